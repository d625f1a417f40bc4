"""Shared fixtures: brokers, workers and endpoints over real sockets, cleaned up after each test."""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cli_processes import run
from hypothesis import HealthCheck, settings
from transports import TRANSPORTS

from generaldomo import Broker, Worker
from generaldomo.io.transport import draft_available

# The suite runs on a loaded 2-core machine: no property test fails for the time an example took (time is the
# benchmarks' business); each test's own settings still say how many examples it runs.
settings.register_profile("loaded", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("loaded")
_names = itertools.count()


def pytest_sessionstart(session: pytest.Session) -> None:
    if not draft_available() and not os.environ.get("GENERALDOMO_ALLOW_NO_DRAFT"):
        raise pytest.UsageError(
            "these tests need pyzmq with draft sockets (CLIENT/SERVER); run them with `tox`, or install one with "
            "`python -m generaldomo.draft ensure` (set GENERALDOMO_ALLOW_NO_DRAFT=1 to skip the server transport)"
        )


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> None:
    if file_path.parent == Path(__file__).parent and file_path.name.startswith("test_"):
        raise pytest.UsageError(
            f"{file_path.name}: a test module goes in the folder of the layer it tests (tests/sansio, tests/io, "
            "tests/peers, tests/cli, ...: docs/explanation/architecture.rst); tests/ itself holds the shared helpers"
        )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if draft_available():
        return
    skip = pytest.mark.skip(reason="pyzmq lacks draft sockets and GENERALDOMO_ALLOW_NO_DRAFT is set")
    for item in items:
        if item.get_closest_marker("needs_draft"):
            item.add_marker(skip)


def _built_once(
    tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], dict[str, Path]]
) -> dict[str, Path]:
    """``build(folder)`` into a folder of the test session that the processes of ``pytest -n`` share: the first
    compiles, the others find the programs up to date (the builds compile one program in one process at a time and
    skip those newer than their sources)."""
    session = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        session = session.parent  # each process of pytest -n has its own folder in the session's
    # the build is not the test's time: pytest-timeout's alarm (its signal method) is paused while it runs, as a
    # loaded machine may take minutes to compile; each compiler run has a bound of its own
    left, interval = signal.setitimer(signal.ITIMER_REAL, 0)
    try:
        return build(session / name)
    finally:
        if left:
            signal.setitimer(signal.ITIMER_REAL, left, interval)


@pytest.fixture(scope="session")
def programs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The C++ test programs (tests/cpp), compiled once per test session."""
    from cpp.build import build_programs

    return _built_once(tmp_path_factory, "cpp-programs", build_programs)


@pytest.fixture(scope="session")
def c_peers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The C Majordomo peers (tests/interop), compiled once per test session."""
    from interop.build import build_peers

    return _built_once(tmp_path_factory, "interop-peers", build_peers)


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def endpoint_for(tmp_path: os.PathLike[str]) -> Callable[[str], str]:
    """A bindable endpoint of a scheme: tcp (ephemeral loopback port), ipc (in tmp_path) or inproc."""

    def make(scheme: str) -> str:
        n = next(_names)
        if scheme == "tcp":
            return "tcp://127.0.0.1:*"
        if scheme == "ipc":
            return f"ipc://{tmp_path}/broker-{n}.sock"
        if scheme == "inproc":
            return f"inproc://generaldomo-test-{os.getpid()}-{n}"
        raise ValueError(scheme)

    return make


@pytest.fixture
def brokers() -> Iterator[Callable[..., Broker]]:
    """Start brokers in threads; stop them all afterwards."""
    started: list[Broker] = []

    def start(transport: str, bind: list[str], **kwargs: object) -> Broker:
        broker = Broker(transport, bind, **kwargs).start()  # type: ignore[arg-type]
        started.append(broker)
        return broker

    yield start
    for broker in started:
        broker.stop()


def echo(payload: bytes | tuple[bytes, ...]) -> bytes | tuple[bytes, ...]:
    return payload


@pytest.fixture
def workers() -> Iterator[Callable[..., Worker]]:
    """Serve workers in threads; stop them all afterwards."""
    running: list[tuple[Worker, threading.Thread]] = []

    def start(endpoint: str, transport: str, description: str = "echo", handler=echo, **kwargs: object) -> Worker:
        worker = Worker(endpoint, description, handler, transport, **kwargs)  # type: ignore[arg-type]
        thread = threading.Thread(target=worker.serve, daemon=True)
        thread.start()
        running.append((worker, thread))
        return worker

    yield start
    for worker, _ in running:
        worker.stop()
    for _, thread in running:
        thread.join(10)
        assert not thread.is_alive(), "a worker did not stop"


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    """Processes a test starts (it appends them); afterwards each gets SIGTERM and 60 s to exit."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in started:
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            raise


@pytest.fixture(scope="session")
def _made_keys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The key pairs of :func:`keydir`, made once per test session (five processes)."""
    folder = tmp_path_factory.mktemp("keys")
    made = {
        "broker": [],
        "client": ["--role", "clients"],
        "worker": ["--role", "workers", "--services", "echo*"],
        "admin": ["--role", "admins"],
        "stranger": [],
    }
    for name, extra in made.items():
        result = run("keygen", name, "--dir", str(folder), *extra)
        assert result.returncode == 0, result.stderr
    return folder


@pytest.fixture
def keydir(tmp_path: Path, _made_keys: Path) -> Path:
    """Key pairs made by ``generaldomo keygen``: broker, client, worker (echo* only), admin, stranger; the test's
    own copy (its ``tmp_path``, files and modes as keygen wrote them) of the pairs made once per session."""
    shutil.copytree(_made_keys, tmp_path, dirs_exist_ok=True)
    return tmp_path

"""The C++ library (``cpp/include/generaldomo``) against the Python broker, over the SERVER transport.

The C++ test programs (``tests/cpp/gd_client.cpp``, ``gd_worker.cpp``, ``gd_protocol.cpp``) are compiled once
per session against the project's static draft libzmq and run as real processes over tcp (loopback, ephemeral
ports) and ipc. They print every answer they got, tagged with the request that asked for it; the tests compare
that output with what each request must get, line by line. Two tests put a bare SERVER socket in the broker's
place to check the bytes on the wire, and the resends and reconnects, message by message.
"""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import zmq
from cut_proxy import CutProxy
from doc_blocks import named
from waiting import eventually, served

from generaldomo import Broker, Client, RequestFailed, Settings
from generaldomo.errors import ServiceUnavailable
from generaldomo.io.auth import BrokerSecurity
from generaldomo.sansio.wire import protocol

ROOT = Path(__file__).resolve().parents[2]
WAIT = 60.0  # seconds: the bound on every wait; generous for a loaded 2-core machine
TIMEOUT_MS = str(int(WAIT * 1000))
SCHEMES = ("tcp", "ipc")


@pytest.fixture(params=SCHEMES)
def scheme(request: pytest.FixtureRequest) -> str:
    return request.param


class Process:
    """A program whose stdout and stderr go to files, so that nothing blocks on a full pipe."""

    def __init__(
        self, args: list[str], log_dir: Path, name: str, *, stdin: bool = False, env: dict[str, str] | None = None
    ) -> None:
        """``stdin``: a pipe that :meth:`send_line` writes to (else the program inherits the test's)."""
        self.name = name
        self.stdout = log_dir / f"{name}.out"
        self.stderr = log_dir / f"{name}.err"
        with self.stdout.open("wb") as out, self.stderr.open("wb") as err:
            self.popen = subprocess.Popen(
                args, stdout=out, stderr=err, stdin=subprocess.PIPE if stdin else None, text=True, env=env
            )

    def send_line(self, line: str = "") -> None:
        assert self.popen.stdin is not None, "started without stdin=True"
        self.popen.stdin.write(line + "\n")
        self.popen.stdin.flush()

    def output(self) -> str:
        return self.stdout.read_text(errors="replace")

    def describe(self) -> str:
        return (
            f"--- {self.name} (exit {self.popen.poll()}) stdout (head):\n{self.output()[:4000]}"
            f"--- {self.name} stderr:\n{self.stderr.read_text(errors='replace')}"
        )

    def wait_for(self, text: str, timeout: float = WAIT) -> None:
        """Wait until ``text`` is in stdout; fail if the program exits or time runs out."""
        deadline = time.monotonic() + timeout
        while text not in self.output():
            assert self.popen.poll() is None, f"{self.name} exited waiting for {text!r}\n{self.describe()}"
            assert time.monotonic() < deadline, f"{self.name} did not print {text!r}\n{self.describe()}"
            time.sleep(0.02)

    def finish(self, timeout: float = 2 * WAIT) -> list[str]:
        """Wait for a successful exit; return stdout's lines."""
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{self.name} did not exit within {timeout} s\n{self.describe()}")
        assert self.popen.returncode == 0, self.describe()
        return self.output().splitlines()

    def stop(self) -> list[str]:
        """SIGTERM (a worker stops and tells the broker); return stdout's lines after a successful exit."""
        self.popen.send_signal(signal.SIGTERM)
        return self.finish(WAIT)


class Programs:
    """Starts the C++ programs (and C peers) of one test; kills whatever is left at teardown."""

    def __init__(self, programs: dict[str, Path], log_dir: Path) -> None:
        self.programs = programs
        self.log_dir = log_dir
        self.started: list[Process] = []

    def start(self, path: Path, *args: str, name: str | None = None, **how: Any) -> Process:
        """Start ``path`` with ``args``; ``how`` as :class:`Process` takes it (stdin, env)."""
        process = Process([str(path), *args], self.log_dir, name or f"{path.name}-{len(self.started)}", **how)
        self.started.append(process)
        return process

    def worker(self, endpoint: str, *args: str, name: str | None = None) -> Process:
        return self.start(self.programs["gd_worker"], *args, endpoint, name=name)

    def client(self, endpoint: str, mode: str, *args: str) -> Process:
        return self.start(self.programs["gd_client"], "--mode", mode, "--timeout-ms", TIMEOUT_MS, *args, endpoint)

    def describe(self) -> str:
        return "\n".join(process.describe() for process in self.started)

    def close(self) -> None:
        for process in self.started:
            if process.popen.poll() is None:
                process.popen.kill()
        for process in self.started:
            process.popen.wait(WAIT)


@pytest.fixture
def run(programs: dict[str, Path], tmp_path: Path) -> Iterator[Programs]:
    started = Programs(programs, tmp_path)
    yield started
    started.close()


def server_broker(brokers: Callable[..., Broker], endpoint_for: Callable[[str], str], scheme: str, **kwargs: object):
    """A broker with a SERVER link on ``scheme``; returns it and the concrete endpoint."""
    broker = brokers("server", [endpoint_for(scheme)], **kwargs)
    return broker, broker.endpoint("server", scheme)


def tagged(tag: bytes) -> Callable[[bytes | tuple[bytes, ...]], bytes | tuple[bytes, ...]]:
    """An echo handler that prefixes the first frame with ``tag``."""

    def handler(payload: bytes | tuple[bytes, ...]) -> bytes | tuple[bytes, ...]:
        if isinstance(payload, bytes):
            return tag + payload
        return (tag + payload[0], *payload[1:])

    return handler


def threads_expected(threads: int, requests: int, reply: Callable[[str], str]) -> list[str]:
    return [f"{t} {n} {reply(f't{t}-{n}')}" for t in range(threads) for n in range(requests)] + ["done"]


LONG = "x" * 300  # the third frame of ``--frames``: a frame with a 5-byte length prefix


def test_cpp_protocol_header_follows_the_documented_layouts(programs: dict[str, Path]) -> None:
    proc = subprocess.run([programs["gd_protocol"]], capture_output=True, text=True, timeout=WAIT, check=False)
    assert (proc.returncode, proc.stdout) == (0, "protocol: 27 checks, 0 failed\n"), proc.stdout + proc.stderr


def test_the_packaged_library_says_where_it_is_and_its_version(tmp_path: Path) -> None:
    """``python -m generaldomo.cpp`` names the installed headers; the pkg-config and CMake files carry the
    package's version."""
    import generaldomo

    shown = subprocess.run(
        [sys.executable, "-m", "generaldomo.cpp", "--include", "--prefix"],
        cwd=tmp_path,  # the generaldomo this test imported, not a source tree's in the working folder
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    include, prefix = map(Path, shown.stdout.split())
    assert (include / "generaldomo" / "generaldomo.hpp").is_file() and include == prefix / "include"
    pc = (prefix / "lib" / "pkgconfig" / "generaldomo.pc").read_text()
    assert f"\nVersion: {generaldomo.__version__}\n" in pc
    cmake = (prefix / "lib" / "cmake" / "generaldomo" / "generaldomoConfigVersion.cmake").read_text()
    assert f'set(PACKAGE_VERSION "{generaldomo.__version__}")' in cmake


def test_the_library_paths_are_all_it_prints(tmp_path: Path) -> None:
    """``--pkg-config-path`` and ``--libs`` print the answer alone, nothing on stderr (used in ``$(...)`` and by
    build scripts): the draft installer's progress lines only come when it builds."""
    for flag in ("--pkg-config-path", "--libs", "--cflags"):
        shown = subprocess.run(
            [sys.executable, "-m", "generaldomo.cpp", flag], cwd=tmp_path, capture_output=True, text=True, timeout=900
        )
        assert shown.returncode == 0, shown.stderr
        again = subprocess.run(
            [sys.executable, "-m", "generaldomo.cpp", flag], cwd=tmp_path, capture_output=True, text=True, timeout=60
        )
        assert (again.returncode, again.stderr, again.stdout) == (0, "", shown.stdout), again.stderr
        assert len(again.stdout.splitlines()) == 1, again.stdout
    paths = again.stdout  # the last: --cflags
    assert "-I" in paths


def test_readme_example_builds_and_runs(brokers, workers, endpoint_for, tmp_path: Path) -> None:
    """The guide's example (docs/examples/client.cpp), built by the guide's own commands: pkg-config on the
    headers installed with the package."""
    (tmp_path / "example.cpp").write_text((ROOT / "docs" / "examples" / "client.cpp").read_text())
    commands = named("cpp-build-pkg-config")
    build = "\n".join(line for line in commands.splitlines() if not line.startswith("./"))
    assert "pkg-config --cflags --libs generaldomo" in build
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    built = subprocess.run(["bash", "-euc", build], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    example = tmp_path / "example"
    _, endpoint = server_broker(brokers, endpoint_for, "tcp")
    workers(endpoint, "server", "echo", tagged(b"py:"))
    proc = subprocess.run([example, endpoint], capture_output=True, text=True, timeout=WAIT, check=False)
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.splitlines()) == [f"py:hello {t}" for t in range(4)]


def test_the_guides_worker_example_builds_serves_and_stops_on_sigterm(brokers, endpoint_for, tmp_path: Path) -> None:
    """The guide's C++ worker (docs/examples/worker.cpp), built by the guide's own commands (``worker.cpp`` for
    ``example.cpp``): it serves
    ``upper``, its ``Reject`` reaches the Python client as 400, and SIGTERM stops it, saying so, status 0."""
    (tmp_path / "worker.cpp").write_text((ROOT / "docs" / "examples" / "worker.cpp").read_text())
    commands = named("cpp-build-pkg-config").replace("example", "worker")
    build = "\n".join(line for line in commands.splitlines() if not line.startswith("./"))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    built = subprocess.run(["bash", "-euc", build], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    _, endpoint = server_broker(brokers, endpoint_for, "tcp")
    worker = subprocess.Popen(
        [tmp_path / "worker", endpoint], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert worker.stdout is not None and worker.stdout.readline() == "serving 'upper'\n"
        with Client(endpoint, "server") as client:
            assert client.request("upper", b"hello worker", timeout=WAIT).payload == b"HELLO WORKER"
            with pytest.raises(RequestFailed) as refused:
                client.request("upper", b"", timeout=WAIT)
            assert (refused.value.status, refused.value.reason) == (400, "nothing to upper-case")
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=WAIT)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(WAIT)
    assert worker.returncode == 0, err
    assert out == "stopped after 2 tasks\n", (out, err)


def test_cpp_client_names_a_refused_handshake_at_once(run: Programs, brokers) -> None:
    """Against a ROUTER broker (the router transport) and a CURVE SERVER link, a request with a 60 s timeout
    fails within seconds with HandshakeFailed naming the cause (the socket monitor), not with a timeout."""
    router = brokers("router", ["tcp://127.0.0.1:*"])
    public, secret = zmq.curve_keypair()
    curve = brokers("server", ["tcp://127.0.0.1:*"], security=BrokerSecurity(public, secret, {}))
    for endpoint, kinds, cause in (
        (router.endpoint("router", "tcp"), {"handshake"}, "it serves the router transport"),
        (curve.endpoint("server", "tcp"), {"handshake", "curve"}, "CURVE"),
    ):
        said, took, done = run.client(endpoint, "once").finish()
        kind = said.split()[1] if said.startswith("handshake ") else None
        assert kind in kinds and f"the broker at {endpoint}" in said and cause in said, said
        assert float(took.split()[1]) < WAIT / 2 and done == "done"  # a generous bound: the cause is what counts


def test_cpp_client_timeout_says_whether_a_broker_answered(run: Programs, brokers, endpoint_for) -> None:
    """Told to wait for its broker, with nothing listening: the timeout says so; a broker that answers but has no
    worker for the service: a timeout, whether the client's wait or the broker's 504 at the request's deadline
    (the same moment) ends first."""
    with zmq.Context.instance().socket(zmq.SERVER) as placeholder:  # a port nobody listens on once closed
        port = placeholder.bind_to_random_port("tcp://127.0.0.1")
    nowhere = f"tcp://127.0.0.1:{port}"
    once = (run.programs["gd_client"], "--mode", "once", "--timeout-ms", "3000", "--wait-for-broker")
    said, _, _ = run.start(*once, nowhere).finish()
    assert said == (
        f"timeout no reply to echo within 3000 ms; no broker has answered at {nowhere} over the server transport: "
        "nothing accepts connections there (is a broker running?)"
    )
    _, endpoint = server_broker(brokers, endpoint_for, "tcp")
    said, _, _ = run.start(*once, endpoint).finish()
    assert said.startswith("timeout no reply to echo within 3000 ms"), said


def test_cpp_client_says_at_once_that_nothing_accepts_connections(run: Programs, tmp_path: Path) -> None:
    """A wrong endpoint: a request with a 60 s timeout fails within about a second with BrokerUnreachable, which
    names the endpoint and how to wait instead (the old client waited the whole timeout)."""
    with zmq.Context.instance().socket(zmq.SERVER) as placeholder:  # a port nobody listens on once closed
        port = placeholder.bind_to_random_port("tcp://127.0.0.1")
    for nowhere in (f"ipc://{tmp_path}/nobody.sock", f"tcp://127.0.0.1:{port}"):
        said, took, done = run.client(nowhere, "once").finish()
        assert said.startswith(f"handshake unreachable nothing accepts connections at {nowhere}"), said
        assert "fail_unreachable = false" in said and done == "done"
        assert float(took.split()[1]) < WAIT / 2  # a generous bound (TIMEOUT_MS is not reached): the cause counts


def test_cpp_client_answers_a_service_typo_at_once_with_the_nearest_name(
    run: Programs, brokers, workers, endpoint_for
) -> None:
    broker, endpoint = server_broker(brokers, endpoint_for, "tcp", settings=Settings(heartbeat_interval=0.2))
    worker = workers(endpoint, "server", "shout", tagged(b"py:"), heartbeat_interval=0.2)
    eventually(lambda: worker.registered, what="the worker's registration")
    said, took, _ = run.client(endpoint, "once", "--service", "shuot", "--heartbeat-ms", "200").finish()
    assert said.startswith("error 404 ") and "did you mean 'shout'?" in said, said
    assert float(took.split()[1]) < WAIT / 2
    before = broker.core.counters["requests"]
    waits = run.client(endpoint, "once", "--service", "later", "--wait-for-service", "--heartbeat-ms", "200")
    eventually(lambda: broker.core.counters["requests"] > before, what="the request, queued for a worker to come")
    workers(endpoint, "server", "later", tagged(b"py:"), heartbeat_interval=0.2)
    said, _, _ = waits.finish()
    assert said == "py:once", said


# ------------------------------------------------------------------------------------------ C++ client, Python workers


@pytest.mark.slow
def test_sixteen_threads_share_one_cpp_client(run: Programs, brokers, workers, endpoint_for, scheme: str) -> None:
    """16 std::threads, 500 requests each, one Client: every thread gets exactly its own answers, in order."""
    _, endpoint = server_broker(brokers, endpoint_for, scheme)
    for _ in range(2):
        workers(endpoint, "server", "echo", tagged(b"py:"))
    out = run.client(endpoint, "threads", "--threads", "16", "--requests", "500").finish(4 * WAIT)
    assert out == threads_expected(16, 500, lambda payload: f"py:{payload}")


def test_thread_pool_tasks_share_one_cpp_client(run: Programs, brokers, workers, endpoint_for, scheme: str) -> None:
    """Tasks run by whichever pool thread is free, in two stages (the second asks the first's answer again)."""
    _, endpoint = server_broker(brokers, endpoint_for, scheme)
    workers(endpoint, "server", "echo", tagged(b"py:"))
    out = run.client(endpoint, "pool", "--threads", "8", "--requests", "200").finish(4 * WAIT)
    assert out == [f"{k} py:py:k{k}" for k in range(200)] + ["done"]


def test_error_status_reaches_the_cpp_client(run: Programs, brokers, workers, endpoint_for) -> None:
    _, endpoint = server_broker(brokers, endpoint_for, "tcp")

    def refuse(payload: bytes) -> bytes:
        raise ValueError(f"no {payload.decode()}")

    workers(endpoint, "server", "echo", refuse)
    out = run.client(endpoint, "threads", "--threads", "2", "--requests", "3").finish()
    assert out == threads_expected(2, 3, lambda payload: f"error 500 ValueError: no {payload}")


def test_a_cpp_worker_whose_connection_is_cut_registers_again_and_its_old_registration_goes_at_once(
    run: Programs, brokers, endpoint_for
) -> None:
    """The C++ worker's connection is cut (no side hears of it); it registers again on a new one, with the same id:
    the broker retires the old registration at once, so a task sent then is not given to the dead connection (it
    would wait for that registration's expiry, 30 s)."""
    broker, endpoint = server_broker(
        brokers, endpoint_for, "tcp", settings=Settings(heartbeat_interval=0.1, liveness=300)
    )
    with CutProxy(endpoint) as proxy, Client(endpoint, "server") as client:
        worker = run.worker(proxy.endpoint, "--heartbeat-ms", "100", "--liveness", "5")
        served(client, "echo")
        assert client.request("echo", b"before", timeout=WAIT).payload == b"before"
        proxy.cut()
        eventually(lambda: broker.core.counters["workers_replaced"] >= 1, WAIT, "the worker to register again")
        started = time.monotonic()
        assert client.request("echo", b"after", timeout=15.0).payload == b"after"
        assert time.monotonic() - started < 15.0 and broker.core.counters["workers_expired"] == 0
        worker.popen.send_signal(signal.SIGTERM)
        worker.finish(WAIT)


def test_a_cpp_workers_reject_for_a_retry_is_retried_by_the_policy(run: Programs, brokers, endpoint_for) -> None:
    """``Reject(503, ..., Reject::retry)`` from a C++ handler: the broker retries it as the service's policy says,
    then gives the client the last answer, without the retry mark."""
    broker, endpoint = server_broker(brokers, endpoint_for, "tcp")
    worker = run.worker(endpoint, "--heartbeat-ms", "200")
    with Client(endpoint, "server") as client:
        client.flow("echo", retry={"retries": 2, "backoff": {"min": 0.01, "max": 0.05}})
        with pytest.raises(ServiceUnavailable) as failed:
            client.request("echo", b"try-again", timeout=WAIT, fail_unknown=False)
        assert failed.value.reason == "try again"
        assert client.request("echo", b"x", timeout=WAIT).payload == b"x"
    assert broker.core.counters["retried"] == 2 and broker.core.counters["retries_exhausted"] == 1
    worker.popen.send_signal(signal.SIGTERM)
    worker.finish(WAIT)


def test_cpp_client_sends_its_timeout_as_the_deadline(run: Programs, brokers, workers, endpoint_for) -> None:
    _, endpoint = server_broker(brokers, endpoint_for, "tcp")

    def left(payload: bytes, task) -> bytes:
        return b"%d" % (0 < task.time_left() <= WAIT)

    workers(endpoint, "server", "echo", left)
    out = run.client(endpoint, "threads", "--threads", "1", "--requests", "2").finish()
    assert out == ["0 0 1", "0 1 1", "done"]


def test_cpp_client_delays_a_request(run: Programs, brokers, workers, endpoint_for) -> None:
    _, endpoint = server_broker(brokers, endpoint_for, "tcp")
    ran: dict[bytes, float] = {}

    def record(payload: bytes) -> bytes:
        ran[payload] = time.monotonic()
        return payload

    workers(endpoint, "server", "echo", record)
    with Client(endpoint, "server") as client:
        served(client, "echo")
    started = time.monotonic()
    out = run.client(endpoint, "burst", "--requests", "2", "--delay-ms", "400").finish()
    assert out[0] == "submitted 2" and out[1:3] == ["0 b0 partials ", "1 b1 partials "], out
    assert min(ran[b"b0"], ran[b"b1"]) >= started + 0.4  # never before its delay (counted from after started)


def test_cpp_client_sends_a_trace_context_the_worker_runs_in_a_child_span_of(
    run: Programs, brokers, workers, endpoint_for, scheme: str
) -> None:
    """The C++ client's RequestFields::traceparent and tracestate (trimmed to the room the fields leave: the long
    member first, then from the end), carried by the broker; the Python worker's handler runs in a child span,
    checked with the OpenTelemetry SDK's in-memory exporter."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):  # (one per process: OpenTelemetry allows no other)
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _, endpoint = server_broker(brokers, endpoint_for, scheme)

    def traced(payload: bytes, task) -> bytes:
        parent = trace.get_current_span().parent
        return f"{task.trace.traceparent} {task.trace.tracestate} {parent.span_id:016x}".encode()

    workers(endpoint, "server", "echo", traced)
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    members = [f"k{i:02}=" + "v" * 20 for i in range(12)]
    long = "big=" + "x" * 129
    tracestate = ",".join([members[0], long, *members[1:]])  # 426 characters: more than a request's fields hold
    out = run.client(endpoint, "once", "--traceparent", traceparent, "--tracestate", tracestate).finish()
    got_parent, got_state, parent_span = out[0].split(" ")
    assert got_parent == traceparent and parent_span == "00f067aa0ba902b7"
    kept = got_state.split(",")
    assert long not in kept and 0 < len(kept) < len(members) and kept == members[: len(kept)]
    [span] = [s for s in exporter.get_finished_spans() if s.context.trace_id == int(traceparent[3:35], 16)]
    assert span.parent is not None and span.parent.span_id == int("00f067aa0ba902b7", 16) and span.name == "echo"
    exporter.shutdown()


# ------------------------------------------------------------------------------------------ C++ workers


def test_python_client_to_cpp_worker(run: Programs, brokers, endpoint_for, scheme: str) -> None:
    _, endpoint = server_broker(brokers, endpoint_for, scheme)
    worker = run.worker(endpoint, "--tag", "c:", "--partials", "2")
    with Client(endpoint, "server") as client, ThreadPoolExecutor(4) as pool:

        def ask(thread: int) -> list[bytes]:
            return [client.request("echo", b"t%d-%d" % (thread, n), timeout=WAIT).payload for n in range(25)]

        answers = list(pool.map(ask, range(4)))
        several = client.request("echo", [b"a", b"", b"c" * 1000], timeout=WAIT).frames
        streamed = [(part.partial, part.payload) for part in client.stream("echo", b"s", timeout=WAIT)]
        with pytest.raises(RequestFailed) as failed:
            client.request("echo", b"fail", timeout=WAIT)
    assert answers == [[b"c:t%d-%d" % (thread, n) for n in range(25)] for thread in range(4)]
    assert list(several) == [b"c:a", b"", b"c" * 1000]
    assert streamed == [(True, b"c:s#1"), (True, b"c:s#2"), (False, b"c:s")]
    assert (failed.value.status, failed.value.reason) == (500, "asked to fail")
    assert worker.stop() == ["stopped after 103 tasks"]


def test_cpp_client_to_cpp_workers(run: Programs, brokers, endpoint_for, scheme: str) -> None:
    broker, endpoint = server_broker(brokers, endpoint_for, scheme)
    cpp_workers = [run.worker(endpoint, "--tag", "c:", "--partials", "2") for _ in range(2)]
    out = run.client(endpoint, "threads", "--threads", "4", "--requests", "100", "--frames").finish()
    assert out == threads_expected(4, 100, lambda payload: f"c:{payload}||{LONG}")
    out = run.client(endpoint, "burst", "--requests", "50").finish()
    assert out == ["submitted 50"] + [f"{k} c:b{k} partials c:b{k}#1,c:b{k}#2" for k in range(50)] + [
        "resent 0 reconnects 0 dropped 0",
        "done",
    ]
    served = [int(w.stop()[0].removeprefix("stopped after ").removesuffix(" tasks")) for w in cpp_workers]
    assert sum(served) == 450 == broker.core.counters["completed"]


def test_killed_cpp_worker_task_is_reissued_and_answered_once(run: Programs, brokers, endpoint_for, scheme) -> None:
    broker, endpoint = server_broker(brokers, endpoint_for, scheme, settings=Settings(heartbeat_interval=0.5))
    hb = ("--heartbeat-ms", "500", "-v")
    doomed = run.worker(endpoint, "--tag", "doomed:", "--delay-ms", "600000", *hb, name="doomed")
    with Client(endpoint, "server") as client:
        future = client.submit("echo", b"task")
        doomed.wait_for("request task")
        rescuer = run.worker(endpoint, "--tag", "rescuer:", *hb, name="rescuer")
        doomed.popen.send_signal(signal.SIGKILL)
        assert future.result(WAIT).payload == b"rescuer:task"
        rescuer.wait_for("replied task")
        assert client.replies_dropped == 0
    assert rescuer.stop() == ["request task", "replied task", "stopped after 1 tasks"]
    assert broker.core.counters["reissued"] == 1


def test_stopped_cpp_worker_says_disconnect_so_its_task_is_reissued(run: Programs, brokers, workers, endpoint_for):
    """Heartbeats so slow that no silence is noticed within the test: only DISCONNECT can free the task."""
    slow = Settings(heartbeat_interval=600.0)
    broker, endpoint = server_broker(brokers, endpoint_for, "ipc", settings=slow)
    doomed = run.worker(endpoint, "--delay-ms", "600000", "--heartbeat-ms", "600000", "-v", name="doomed")
    with Client(endpoint, "server") as client:
        future = client.submit("echo", b"task")
        doomed.wait_for("request task")
        workers(endpoint, "server", "echo", tagged(b"py:"), heartbeat_interval=600.0)
        assert doomed.stop() == ["request task", "interrupted task", "stopped after 0 tasks"]
        assert future.result(WAIT).payload == b"py:task"
    assert broker.core.counters["reissued"] == 1


# ------------------------------------------------------------------------------------------ broker restart, both links


def rebind(brokers: Callable[..., Broker], endpoint: str) -> Broker:
    """A broker on ``endpoint``, retried while libzmq has not yet closed the previous broker's listener."""
    deadline = time.monotonic() + WAIT
    while True:
        try:
            return brokers("server", [endpoint])
        except zmq.ZMQError as error:
            if error.errno != zmq.EADDRINUSE or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_broker_restart_under_a_live_cpp_client(run: Programs, brokers, workers, endpoint_for, scheme: str) -> None:
    """Requests outstanding when the broker stops are sent again to the next one and answered once each."""
    first = Broker("server", [endpoint_for(scheme)]).start()
    try:
        endpoint = first.endpoint("server", scheme)  # the second broker binds the same concrete endpoint
        client = run.client(endpoint, "burst", "--requests", "20", "--heartbeat-ms", "300")
        client.wait_for("submitted 20")
        eventually(lambda: first.core.counters["requests"] == 20, WAIT, "the first broker queued all 20")
    finally:
        first.stop()
    second = rebind(brokers, endpoint)
    workers(endpoint, "server", "echo", tagged(b"py:"))
    submitted, *answers, counts, done = client.finish()
    assert submitted == "submitted 20"
    assert answers == [f"{k} py:b{k} partials " for k in range(20)]
    assert done == "done"
    words = counts.split()
    assert words[0::2] == ["resent", "reconnects", "dropped"] and int(words[1]) >= 20, counts
    assert second.core.counters["requests"] >= 20


@pytest.mark.needs_draft
def test_cpp_server_client_served_by_a_c_mdp_worker_over_router(run: Programs, c_peers: dict[str, Path]) -> None:
    """Both links of one broker: GDP over SERVER from C++ in, MDP/0.1 over ROUTER to the C worker."""
    broker = Broker()
    broker.add_link("router", ["tcp://127.0.0.1:*"])
    broker.add_link("server", ["tcp://127.0.0.1:*"])
    with broker.start():
        worker = run.start(c_peers["mdp01_worker"], "--tag", "c:", broker.endpoint("router", "tcp"))
        out = run.client(broker.endpoint("server", "tcp"), "threads", "--threads", "4", "--requests", "50", "--frames")
        assert out.finish() == threads_expected(4, 50, lambda payload: f"c:{payload}||{LONG}")
        assert worker.popen.poll() is None, run.describe()


# ------------------------------------------------------------------------------------------ on the wire, against a fake


def pack(frames: list[bytes]) -> bytes:
    """The zmsg_encode layout of docs/protocol.rst, written here independently of the library."""
    out = b""
    for frame in frames:
        out += bytes([len(frame)]) if len(frame) < 255 else b"\xff" + len(frame).to_bytes(4, "big")
        out += frame
    return out


def unpack(data: bytes) -> list[bytes]:
    frames, pos = [], 0
    while pos < len(data):
        size, pos = data[pos], pos + 1
        if size == 255:
            size, pos = int.from_bytes(data[pos : pos + 4], "big"), pos + 4
        assert pos + size <= len(data), f"a frame runs past the end: {data!r}"
        frames.append(data[pos : pos + size])
        pos += size
    return frames


class FakeBroker:
    """A bare SERVER socket that a test drives by hand, message by message."""

    def __init__(self, context: zmq.Context) -> None:
        self.socket = context.socket(zmq.SERVER)
        self.socket.linger = 0
        self.socket.bind("tcp://127.0.0.1:*")
        self.endpoint = self.socket.last_endpoint.decode()

    def receive(self) -> tuple[int, list[bytes]]:
        assert self.socket.poll(WAIT * 1000), "the peer sent nothing"
        message = self.socket.recv(copy=False)
        return message.routing_id, unpack(message.bytes)

    def send(self, peer: int, frames: list[bytes]) -> None:
        message = zmq.Frame(pack(frames))
        message.routing_id = peer
        self.socket.send(message)


CLIENT_HEARTBEAT = [b"GDPC01", b"\x04"]


def collect_requests(fake: FakeBroker, instance: bytes | None, limit: int = 2000) -> Iterator[tuple[int, bytes, bytes]]:
    """Yield ``(peer, request id, payload)`` of each REQUEST; answer heartbeats with ``instance`` (None: silence)."""
    for _ in range(limit):
        peer, frames = fake.receive()
        if frames == CLIENT_HEARTBEAT:
            if instance is not None:
                fake.send(peer, [*CLIENT_HEARTBEAT, instance])
            continue
        fields = frames[1] == b"\x06"  # REQUEST+FIELDS: request() sends its timeout as the deadline, and a client
        # that fails fast for unknown services (the default) says so in the flags
        assert frames[:2] in ([b"GDPC01", b"\x01"], [b"GDPC01", b"\x06"]) and frames[3] == b"echo", frames
        parsed = protocol.parse_fields(frames[4]) if fields else None
        assert len(frames) == 5 + fields and (
            parsed is None or (not isinstance(parsed, str) and parsed[:4] != (None, None, 0, 0))
        )
        assert len(frames[2]) == 16, "a request id is 16 random bytes"
        yield peer, frames[2], frames[-1]
    pytest.fail(f"no expected requests among {limit} messages")


def test_cpp_client_resends_with_the_same_ids_after_silence_and_after_a_new_instance(run: Programs) -> None:
    payloads = [b"b0", b"b1", b"b2"]
    with zmq.Context() as context:
        fake = FakeBroker(context)
        client = run.client(fake.endpoint, "burst", "--requests", "3", "--heartbeat-ms", "300")
        ids: dict[bytes, bytes] = {}
        seen: dict[int, dict[bytes, bytes]] = {}
        for peer, request_id, payload in collect_requests(fake, None):  # silence: the client must reconnect
            seen.setdefault(peer, {})[payload] = request_id
            if len(seen) == 1:
                ids = seen[peer]
            elif len(seen[peer]) == len(payloads):
                break
        assert sorted(ids) == payloads and seen[peer] == ids, "resent on a fresh socket, with the same ids"
        assert len({rid[:8] for rid in ids.values()}) == len(ids), "ids share no prefix: nothing to predict"

        for _ in range(2000):  # answer as instance AAAA, then as BBBB (a restart)
            peer, frames = fake.receive()
            if frames == CLIENT_HEARTBEAT:
                fake.send(peer, [*CLIENT_HEARTBEAT, b"AAAA"])
                break
        else:
            pytest.fail("the client sent no heartbeat")
        again: dict[bytes, bytes] = {}
        for sender, request_id, payload in collect_requests(fake, b"BBBB"):
            again[payload] = request_id
            peer = sender
            if len(again) == len(payloads):
                break
        assert again == ids, "resent to the new instance, with the same ids"

        fake.send(peer, [b"GDPC01", b"\x02", ids[b"b0"], b"pb0"])  # a PARTIAL, then FINALs, two of them twice
        timing = struct.pack(">dd", 0.25, 0.5)
        for payload in [b"b0", b"b1", b"b0", b"b1", b"b2"]:  # b2 last: the duplicates are counted when it arrives
            fake.send(peer, [b"GDPC01", b"\x03", ids[payload], b"200", timing, b"r" + payload])
        submitted, *answers, counts, done = client.finish()
    assert (submitted, done) == ("submitted 3", "done")
    assert answers == ["0 rb0 partials pb0", "1 rb1 partials ", "2 rb2 partials "]
    words = counts.split()
    assert words[0::2] == ["resent", "reconnects", "dropped"], counts
    resent, reconnects, dropped = map(int, words[1::2])
    assert resent >= 6 and reconnects >= 1 and dropped == 2, counts


def test_cpp_worker_on_the_wire(run: Programs) -> None:
    """READY (with peer info), a task and READY with its result; reconnect after silence and after DISCONNECT (a
    DISCONNECT before any answer: the plain READY, for a broker older than peer info); DISCONNECT on stop."""
    ready = [b"GDPW01", b"\x01", b"echo"]
    heartbeat = [b"GDPW01", b"\x05"]
    names: set[str] = set()

    def with_info(frames: list[bytes]) -> bool:
        if frames[:3] != ready or len(frames) != 4:
            return False
        info = protocol.read_worker_info(frames[3])
        if info is None or info[3] is None or len(info[3]) != 32:
            return False
        names.add(info[3])  # its id, the same on every socket
        return info[1] == worker.popen.pid and info[2] == protocol.FEATURES

    def next_command(fake: FakeBroker) -> tuple[int, list[bytes]]:
        for _ in range(2000):
            peer, frames = fake.receive()
            if frames != heartbeat:
                return peer, frames
        pytest.fail("only heartbeats")

    with zmq.Context() as context:
        fake = FakeBroker(context)
        worker = run.worker(fake.endpoint, "--tag", "c:", "--heartbeat-ms", "200", "-v")
        first, frames = next_command(fake)
        assert with_info(frames)
        fake.send(first, [b"GDPW01", b"\x02", b"task-1", b"echo", b"x", b"", b"y" * 300])
        assert next_command(fake) == (first, [*ready, b"task-1", b"200", b"c:x", b"", b"y" * 300])
        fields = protocol.request_fields(9.0)  # REQUEST+FIELDS: the handler sees the time left
        fake.send(first, [b"GDPW01", b"\x07", b"task-2", b"echo", fields, b"fail"])
        assert next_command(fake) == (first, [*ready, b"task-2", b"500", b"asked to fail"])
        fake.send(first, [b"GDPW01", b"\x02", b"task-3", b"echo", b"slow-down"])
        assert next_command(fake) == (first, [*ready, b"task-3", b"429", b"slow down", b"0.200"])
        held = [  # no heartbeat said which results were taken (nor that this broker takes none): they are held
            [b"GDPW01", b"\x0a", b"task-1", b"200", b"c:x", b"", b"y" * 300],
            [b"GDPW01", b"\x0a", b"task-2", b"500", b"asked to fail"],
            [b"GDPW01", b"\x0a", b"task-3", b"429", b"slow down", b"0.200"],
        ]
        # silent since: DISCONNECT on the old socket, for a broker that may still hear it; READY on a new one
        assert next_command(fake) == (first, [b"GDPW01", b"\x06"])
        second, frames = next_command(fake)
        assert with_info(frames) and second != first and len(names) == 1
        assert [next_command(fake) for _ in held] == [(second, frames) for frames in held]  # and hands them over
        fake.send(second, [b"GDPW01", b"\x06"])  # before any answer: that READY was refused; after a wait
        third, frames = next_command(fake)  # (about 1 s) the plain READY
        assert frames == ready and third not in (first, second)
        assert [next_command(fake) for _ in held] == [(third, frames) for frames in held]  # a new socket: again
        fake.send(third, [b"GDPW01", b"\x05"])  # a plain heartbeat: a broker that takes no hand-over
        worker.popen.send_signal(signal.SIGTERM)
        assert next_command(fake) == (third, [b"GDPW01", b"\x06"])
        lines = worker.finish(WAIT)
        assert lines[:2] == ["request x", "replied x"] and lines[2].startswith("request fail left ")
        assert 8000 < int(lines[2].split()[-1]) <= 9000
        assert lines[3:] == ["request slow-down", "refused 1 times", "stopped after 3 tasks"]


def test_cpp_worker_hears_a_cancel_and_its_handler_stops(run: Programs) -> None:
    with zmq.Context() as context:
        fake = FakeBroker(context)
        worker = run.worker(fake.endpoint, "--delay-ms", "60000", "--heartbeat-ms", "200", "-v")
        for _ in range(2000):
            peer, frames = fake.receive()
            if frames[1] == b"\x01":
                break
        fake.send(peer, [b"GDPW01", b"\x07", b"task-1", b"echo", protocol.request_fields(30.0), b"x"])
        fake.send(peer, protocol.worker_cancel(b"other-task"))  # not the running one: ignored
        fake.send(peer, protocol.worker_cancel(b"task-1"))
        for _ in range(2000):
            _, frames = fake.receive()
            if frames[1] == b"\x01":
                break
        assert frames == [b"GDPW01", b"\x01", b"echo", b"task-1", b"200", b"x"]  # the result goes back early
        worker.popen.send_signal(signal.SIGTERM)
        lines = worker.finish(WAIT)
        assert lines[0].startswith("request x left ") and 29000 <= int(lines[0].split()[-1]) <= 30000
        assert lines[1:] == ["cancelled x", "stopped after 1 tasks"]


def test_cpp_worker_hands_over_on_the_wire(run: Programs) -> None:
    """Results held until a heartbeat names them; a DISCONNECT while a task runs: RESUME on a new socket at once,
    the result in READY there; a new instance gets the held results in HANDOVER."""
    ready = [b"GDPW01", b"\x01", b"echo"]
    heartbeat = [b"GDPW01", b"\x05"]

    def next_command(fake: FakeBroker) -> tuple[int, list[bytes]]:
        for _ in range(2000):
            peer, frames = fake.receive()
            if frames != heartbeat:
                return peer, frames
        pytest.fail("only heartbeats")

    with zmq.Context() as context:
        fake = FakeBroker(context)
        worker = run.worker(fake.endpoint, "--heartbeat-ms", "200", "--delay-in-payload", "-v")
        first, frames = next_command(fake)
        assert frames[:3] == ready
        fake.send(first, [*heartbeat, b"I1I1"])  # a hand-over broker
        fake.send(first, [b"GDPW01", b"\x02", b"task-1", b"echo", b"a:0"])
        assert next_command(fake) == (first, [*ready, b"task-1", b"200", b"a:0"])
        fake.send(first, [*heartbeat, b"I1I1", b"task-1"])  # taken: no longer held
        fake.send(first, [b"GDPW01", b"\x02", b"task-2", b"echo", b"b:0"])
        assert next_command(fake) == (first, [*ready, b"task-2", b"200", b"b:0"])
        fake.send(first, [b"GDPW01", b"\x02", b"task-3", b"echo", b"c:1500"])
        worker.wait_for("request c:1500")
        fake.send(first, [b"GDPW01", b"\x06"])  # a restarted broker that does not know the worker
        second, frames = next_command(fake)
        assert second != first and frames[:4] == [b"GDPW01", b"\x09", b"echo", b"task-3"]  # at once, mid-task
        info = protocol.read_worker_info(frames[4]) if len(frames) == 5 else None
        assert info is not None and info[3] is not None  # with its peer info, and its id
        assert next_command(fake) == (second, [b"GDPW01", b"\x0a", b"task-2", b"200", b"b:0"])  # still held
        fake.send(second, [*heartbeat, b"I2I2", b"task-2"])
        assert next_command(fake) == (second, [*ready, b"task-3", b"200", b"c:1500"])
        fake.send(second, [*heartbeat, b"I3I3"])  # a new instance on the same socket: task-3's result again
        assert next_command(fake) == (second, [b"GDPW01", b"\x0a", b"task-3", b"200", b"c:1500"])
        worker.popen.send_signal(signal.SIGTERM)
        assert next_command(fake) == (second, [b"GDPW01", b"\x06"])
        assert worker.finish(WAIT)[-1] == "stopped after 3 tasks"


def test_a_refused_cpp_worker_backs_off(run: Programs, brokers) -> None:
    """Issue 20 item 7 for the C++ worker: a READY answered with DISCONNECT (here an ``mmi.`` description, which
    the broker refuses) makes it wait about 1 s, then 2 s, 4 s... before it registers again; it spun before."""
    broker = brokers("server", ["tcp://127.0.0.1:*"])
    worker = run.worker(broker.endpoint("server", "tcp"), "--service", "mmi.mine", "--heartbeat-ms", "200")
    time.sleep(5.0)  # READYs at about 0, 1, 3 s (and 7 s)
    lines = worker.stop()
    refused = broker.core.counters["workers_refused"]
    assert 2 <= refused <= 4, refused
    assert lines == [f"refused {refused} times", "stopped after 0 tasks"]

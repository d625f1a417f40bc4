"""One program: the broker embedded in a C++ program (``generaldomo::EmbeddedBroker``), its threads over inproc.

``tests/cpp/gd_embedded.cpp`` is compiled against the Python that runs these tests (its build flags, pyzmq's
libzmq) and run as a process, with this source tree's generaldomo (``PYTHONPATH``) in the environment of this
interpreter (``GENERALDOMO_PYTHON``). It prints every answer its threads got; workers are Python ``Worker``
threads of this process and the C MDP worker, both over loopback tcp, which the embedded broker binds.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from waiting import eventually

from cpp.build import ROOT, build_embedded, build_source
from cpp.test_cpp import WAIT, Programs, tagged
from generaldomo import Client

TIMEOUT_MS = str(int(WAIT * 1000))
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "GENERALDOMO_PYTHON": sys.executable}


@pytest.fixture
def run(programs: dict[str, Path], tmp_path: Path) -> Iterator[Programs]:
    started = Programs(programs, tmp_path)
    yield started
    started.close()


class Embedded:
    """gd_embedded started and ready: its endpoints, its output, a line on stdin to go on."""

    def __init__(self, run: Programs, endpoint_for: Any, *args: str, program: Path | None = None) -> None:
        settings = ("--set", "router=tcp://127.0.0.1:*", "--set", "server=tcp://127.0.0.1:*")
        path = program or run.programs["gd_embedded"]
        command = (*settings, "--timeout-ms", TIMEOUT_MS, *args, endpoint_for("inproc"))
        self.process = run.start(path, *command, stdin=True, env=ENV, name="gd_embedded")
        self.process.wait_for("ready\n")
        lines = self.process.output().splitlines()
        self.endpoints = [tuple(line.split()[1:]) for line in lines if line.startswith("endpoint ")]

    def endpoint(self, transport: str, scheme: str) -> str:
        return next(e for t, e in self.endpoints if t == transport and e.startswith(scheme))

    def go(self) -> None:
        self.process.send_line("go")

    def lines(self) -> list[str]:
        return self.process.finish(4 * WAIT)


def status_of(lines: list[str]) -> dict[str, Any]:
    return json.loads(next(line for line in lines if line.startswith("status "))[len("status ") :])


def threads_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if line[:1].isdigit()]


def test_sixteen_cpp_threads_over_inproc_served_by_python_and_c_workers_over_tcp(
    run: Programs, workers, endpoint_for, c_peers: dict[str, Path]
) -> None:
    embedded = Embedded(run, endpoint_for, "--mode", "threads", "--threads", "16", "--requests", "40")
    router = embedded.endpoint("router", "tcp")
    for _ in range(2):
        workers(router, "router", "echo", tagged(b"py:"))
    workers(embedded.endpoint("server", "tcp"), "server", "echo", tagged(b"py:"))
    c_worker = run.start(c_peers["mdp01_worker"], "--tag", "c:", "--delay-ms", "1", router)
    with Client(router, "router") as client:
        eventually(lambda: len(client.status()["workers"]) == 4, WAIT, "four workers registered")
    embedded.go()
    lines = embedded.lines()
    answers = threads_lines(lines)
    assert len(answers) == 16 * 40
    tags = set()
    for line, (t, n) in zip(answers, [(t, n) for t in range(16) for n in range(40)], strict=True):
        thread, number, reply = line.split(" ", 2)
        tag, _, payload = reply.partition(":")
        assert (thread, number, payload) == (str(t), str(n), f"t{t}-{n}"), line
        tags.add(tag)
    assert tags == {"py", "c"}, "Python and C workers both served"
    assert lines[-2:] == ["stopped", "done"]
    counters = status_of(lines)["broker"]["counters"]
    assert counters["completed"] == 16 * 40 and counters.get("duplicates_dropped", 0) == 0
    assert c_worker.popen.poll() is None, run.describe()


def test_a_worker_killed_mid_task_is_reissued(run: Programs, workers, endpoint_for, c_peers: dict[str, Path]) -> None:
    embedded = Embedded(
        run, endpoint_for, "--mode", "threads", "--threads", "4", "--requests", "3", "--set", "heartbeat=0.5"
    )
    router = embedded.endpoint("router", "tcp")
    doomed = run.start(c_peers["mdp01_worker"], "--delay-ms", "600000", "--heartbeat-ms", "500", "-v", router)
    with Client(router, "router") as client:
        eventually(lambda: len(client.status()["workers"]) == 1, WAIT, "the doomed worker registered")
        embedded.go()
        doomed.wait_for("request")
        workers(router, "router", "echo", tagged(b"py:"), heartbeat_interval=0.5)
        doomed.popen.send_signal(signal.SIGKILL)
    lines = embedded.lines()
    assert threads_lines(lines) == [f"{t} {n} py:t{t}-{n}" for t in range(4) for n in range(3)]
    counters = status_of(lines)["broker"]["counters"]
    assert counters["reissued"] == 1 and counters["completed"] == 12


@pytest.mark.parametrize("drain_ms", [300, 60_000])
def test_stop_with_tasks_in_flight_loses_none(run: Programs, workers, endpoint_for, drain_ms: int) -> None:
    """40 requests, two workers taking 50 ms each: a short drain fails what is left with 503, a long one serves all."""
    embedded = Embedded(run, endpoint_for, "--mode", "stop", "--requests", "40", "--drain-ms", str(drain_ms))
    router = embedded.endpoint("router", "tcp")

    def slow(payload: bytes) -> bytes:
        time.sleep(0.05)
        return b"py:" + payload

    for _ in range(2):
        workers(router, "router", "echo", slow)
    with Client(router, "router") as client:
        eventually(lambda: len(client.status()["workers"]) == 2, WAIT, "two workers registered")
        embedded.go()
        embedded.process.wait_for("submitted 40")
        eventually(lambda: client.status()["broker"]["counters"].get("completed", 0) >= 4, WAIT, "4 answered")
    embedded.process.send_line("stop")
    lines = embedded.lines()
    summary = next(line for line in lines if line.startswith("answered "))
    words = summary.split()
    answered, failed, lost = int(words[1]), int(words[3]), int(words[5])
    assert (answered + failed, lost) == (40, 0), summary
    assert answered >= 4
    if drain_ms > 1000:
        assert failed == 0, summary
    else:
        assert failed > 0, summary
    for line in lines:
        if line.split(" ", 1)[0].isdigit():
            k, reply = line.split(" ", 1)
            assert reply in (f"py:b{k}", "error 503 the broker stopped before the request was answered"), line


@pytest.mark.parametrize("via", ["inproc", "tcp"])
def test_large_payloads_arrive_whole(run: Programs, endpoint_for, c_peers: dict[str, Path], via: str) -> None:
    """3 MiB requests (sent by reference by the C++ client, passed by reference by the broker) echoed by the C
    worker over tcp: every byte comes back in place."""
    limits = ("max-message=20000000", "service-queue-bytes=20000000", "connection-bytes=40000000")
    settings = [word for limit in limits for word in ("--set", limit)]
    embedded = Embedded(run, endpoint_for, "--mode", "payload", "--size", str(3 << 20), "--requests", "3",
                        "--echo", "--service", "echo", "--via", via, *settings)  # fmt: skip
    run.start(c_peers["mdp01_worker"], embedded.endpoint("router", "tcp"))
    embedded.go()
    lines = embedded.lines()[len(embedded.endpoints) + 1 :]  # after the endpoints and "ready"
    assert lines[0].startswith(f"payload {3 << 20} via {via} requests 3 "), lines
    assert lines[1:] == ["stopped", "done"]


def test_an_interpreter_the_program_started_is_used_as_it_is(run: Programs, workers, endpoint_for) -> None:
    """The program initialises Python and holds the GIL when it makes and stops the broker."""
    embedded = Embedded(run, endpoint_for, "--mode", "threads", "--threads", "4", "--requests", "5", "--own-python")
    workers(embedded.endpoint("router", "tcp"), "router", "echo", tagged(b"py:"))
    embedded.go()
    lines = embedded.lines()
    assert threads_lines(lines) == [f"{t} {n} py:t{t}-{n}" for t in range(4) for n in range(5)]
    assert lines[-3:] == ["stopped", "python: the broker ran here: True", "done"]


def test_settings_come_from_the_broker_command(run: Programs, endpoint_for) -> None:
    process = run.start(
        run.programs["gd_embedded"], "--set", "max-frames=many", endpoint_for("inproc"), stdin=True, env=ENV
    )
    assert process.popen.wait(WAIT) == 3
    assert process.output() == (
        "broker error: the broker did not start: SettingsError: argument --max-frames: max_frames must be a whole "
        "number (at least 1, at most 2147483647), not 'many'\n"
    )


def test_two_copies_of_libzmq_are_refused(run: Programs, endpoint_for, tmp_path: Path) -> None:
    """The same program linked with the static libzmq instead of pyzmq's: its context is not pyzmq's to use."""
    from interop.build import libzmq_prefix

    source = ROOT / "tests" / "cpp" / "gd_embedded.cpp"
    static = build_embedded(source, tmp_path / "gd_embedded_static", [str(libzmq_prefix() / "lib" / "libzmq.a")])
    process = run.start(static, endpoint_for("inproc"), stdin=True, env=ENV)
    assert process.popen.wait(WAIT) == 3
    assert "broker error: this program and pyzmq use two copies of libzmq" in process.output()


def test_without_generaldomo_python_the_error_names_the_variable_to_set(run: Programs, endpoint_for) -> None:
    """Started without ``GENERALDOMO_PYTHON`` (nor ``PYTHONPATH``), the program's Python is the one libpython
    finds by default, without generaldomo: the error says which Python that is and what to set."""
    bare = {k: v for k, v in os.environ.items() if k not in ("GENERALDOMO_PYTHON", "PYTHONPATH", "VIRTUAL_ENV")}
    ours = os.path.realpath(os.path.dirname(sys.executable))  # a venv's bin on PATH (tox puts it first) would be
    # the Python libpython finds: the one with generaldomo
    path = os.environ.get("PATH", "").split(os.pathsep)
    bare["PATH"] = os.pathsep.join(entry for entry in path if os.path.realpath(entry) != ours)
    process = run.start(run.programs["gd_embedded"], endpoint_for("inproc"), stdin=True, env=bare)
    assert process.popen.wait(WAIT) == 3
    said = process.output()
    assert "broker error: cannot import generaldomo in the Python this program runs" in said, said
    assert "GENERALDOMO_PYTHON is not set" in said and "set GENERALDOMO_PYTHON to the python of the environment" in said


def guide_example(name: str, source: Path) -> Path:
    """Copy the guide's example program ``docs/examples/NAME`` (docs/howto/cpp.rst includes it) to ``source``."""
    source.write_text((ROOT / "docs" / "examples" / name).read_text())
    return source


def test_readme_example_builds_and_runs(run: Programs, workers, c_peers: dict[str, Path], tmp_path: Path) -> None:
    source = guide_example("one.cpp", tmp_path / "one.cpp")
    example = run.start(build_embedded(source, tmp_path / "one"), "tcp://127.0.0.1:*", env=ENV, name="one")
    example.wait_for("workers: ")
    router = example.output().split("workers: ", 1)[1].split()[0]
    workers(router, "router", "echo", tagged(b"py:"))
    run.start(c_peers["mdp01_worker"], "--tag", "c:", router)
    assert example.finish(4 * WAIT) == [f"workers: {router}"] + [
        f"thread {t}: 100 answers, 0 not its own" for t in range(16)
    ]


def test_readme_bridge_example_builds_and_runs(run: Programs, brokers, workers, c_peers, tmp_path: Path) -> None:
    """The same threads through the C++ Bridge in the program to the Python broker's ROUTER link."""
    source = guide_example("bridged.cpp", tmp_path / "bridged.cpp")
    broker = brokers("router", ["tcp://127.0.0.1:*"])
    router = broker.endpoint("router", "tcp")
    workers(router, "router", "echo", tagged(b"py:"))
    run.start(c_peers["mdp01_worker"], "--tag", "c:", router)
    example = run.start(build_source(source, tmp_path / "bridged"), router, name="bridged")
    assert example.finish(4 * WAIT) == [f"thread {t}: 100 answers, 0 not its own" for t in range(16)] + [
        "forwarded 1600"
    ]
    assert broker.core.counters["completed"] == 1600

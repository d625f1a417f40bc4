"""A task running when the broker is killed (kill -9) is not run again: real broker processes on a state
directory, Python and C++ workers, a Python client; the workers count their runs."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from restart_harness import WAIT, BrokerProcess, cpp_runs, cpp_worker, python_runs, python_worker, stop_all
from waiting import eventually

from generaldomo import Client

HEARTBEAT = 0.5


Start = Callable[[str, str, Path], tuple[subprocess.Popen[bytes], Callable[[str], int]]]


def start_python(endpoint: str, transport: str, tmp: Path) -> tuple[subprocess.Popen[bytes], Callable[[str], int]]:
    runs = tmp / "runs"
    runs.mkdir()
    process = python_worker(endpoint, transport, runs, tmp / "worker.log", "--heartbeat", str(HEARTBEAT))
    return process, lambda task: python_runs(runs, task)


def kinds(programs: dict[str, Path]) -> dict[str, Start]:
    def start_cpp(endpoint: str, transport: str, tmp: Path) -> tuple[subprocess.Popen[bytes], Callable[[str], int]]:
        log = tmp / "worker.log"
        return cpp_worker(programs["gd_worker"], endpoint, log, int(HEARTBEAT * 1000)), lambda task: cpp_runs(log, task)

    return {"python": start_python, "cpp": start_cpp}


@pytest.mark.parametrize(
    ("kind", "transport", "finish_while_down"),
    [
        ("python", "router", False),
        pytest.param("python", "server", False, marks=pytest.mark.needs_draft),
        pytest.param("cpp", "server", False, marks=pytest.mark.needs_draft),
        ("python", "router", True),
        pytest.param("cpp", "server", True, marks=pytest.mark.needs_draft),
    ],
)
def test_a_task_running_at_a_kill_runs_once(
    kind: str, transport: str, finish_while_down: bool, programs: dict[str, Path], tmp_path: Path
) -> None:
    """The broker dies while the worker runs the task; the task ends while the new broker runs (RESUME, then
    the result) or before it started (the result waits for it); the client's resend gets that result."""
    endpoint = f"ipc://{tmp_path}/broker.sock"
    broker = BrokerProcess(
        ["--transport", transport, "--bind", endpoint, "--state-dir", str(tmp_path / "state"), "--heartbeat",
         str(HEARTBEAT)],
        tmp_path / "broker.log",
    ).start()  # fmt: skip
    broker.wait_serving()
    worker, runs = kinds(programs)[kind](endpoint, transport, tmp_path)
    try:
        with Client(endpoint, transport, heartbeat_interval=HEARTBEAT, fail_unknown=False) as client:
            work = 4000 if finish_while_down else 3000
            first = client.submit("work", b"t1:%d" % work)
            eventually(lambda: runs("t1") == 1, WAIT, "the task to start")
            broker.kill()
            if finish_while_down:
                time.sleep(work / 1000 + 0.5)  # it ended meanwhile: its result waits in the worker
            broker.start()
            answers = {b"ran t1", b"t1:%d" % work}  # the Python worker's, the C++ (echo) worker's
            assert first.result(WAIT).payload in answers
            assert client.request("work", b"t2:0", timeout=WAIT).payload in {b"ran t2", b"t2:0"}  # it serves on
        assert runs("t1") == 1 and runs("t2") == 1
    finally:
        broker.stop()
        stop_all([worker])


def test_a_detached_task_running_at_a_kill_is_fetched_after_it_and_a_queued_one_runs_once(tmp_path: Path) -> None:
    """README's "the broker restarts: detached requests" row: the sender has gone; the running task's result is
    handed over and fetched by its id (asked at once after the restart, before its worker is back); a request
    still queued at the kill is queued again from the state directory's write-ahead log, and runs once."""
    endpoint = f"ipc://{tmp_path}/broker.sock"
    args = ["--bind", endpoint, "--state-dir", str(tmp_path / "state"), "--heartbeat", str(HEARTBEAT)]
    broker = BrokerProcess(args, tmp_path / "broker.log").start()
    broker.wait_serving()
    worker, runs = start_python(endpoint, "router", tmp_path)  # one task at a time
    try:
        with Client(endpoint, heartbeat_interval=HEARTBEAT, fail_unknown=False) as sender:
            running = sender.submit("work", b"d1:3000", detached=True).request_id
            eventually(lambda: runs("d1") == 1, WAIT, "the task to start")
            queued = sender.submit("work", b"d2:0", detached=True).request_id
            sender.flow("work", timeout=WAIT)  # answered after the broker has read the request before it
        broker.kill()
        broker.start().wait_serving()
        with Client(endpoint, heartbeat_interval=HEARTBEAT) as fetcher:
            assert fetcher.fetch(running, timeout=WAIT).payload == b"ran d1"
            assert fetcher.fetch(queued, timeout=WAIT).payload == b"ran d2"
        assert runs("d1") == 1 and runs("d2") == 1
    finally:
        broker.stop()
        stop_all([worker])

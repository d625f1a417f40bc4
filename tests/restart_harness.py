"""Broker processes that a test kills and starts again, and the worker processes that count their runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GENERALDOMO = [sys.executable, "-m", "generaldomo"]
WAIT = 60.0  # seconds: the bound on every wait (a loaded 2-core machine)


class BrokerProcess:
    """``generaldomo broker ARGS``, started again (same arguments) after each kill; its output in ``log``."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.args = args
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> BrokerProcess:
        assert self.process is None or self.process.poll() is not None
        with self.log.open("ab") as out:
            self.process = subprocess.Popen([*GENERALDOMO, "broker", *self.args], stdout=out, stderr=subprocess.STDOUT)
        self.starts += 1
        return self

    def wait_serving(self) -> None:
        """Until this start has printed its endpoints (it binds before it prints)."""
        deadline = time.monotonic() + WAIT
        while self.log.read_text(errors="replace").count("generaldomo broker: ") < self.starts:
            assert self.process is not None and self.process.poll() is None, self.log.read_text(errors="replace")
            assert time.monotonic() < deadline, f"the broker did not start\n{self.log.read_text(errors='replace')}"
            time.sleep(0.01)

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(WAIT)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(WAIT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def python_worker(endpoint: str, transport: str, runs: Path, log: Path, *options: str) -> subprocess.Popen[bytes]:
    """``generaldomo worker tests.apps:restarts``: each run of a task is a file in ``runs``."""
    command = [*GENERALDOMO, "worker", "tests.apps:restarts", "--connect", endpoint, "--transport", transport]
    with log.open("ab") as out:
        return subprocess.Popen(
            [*command, *options], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
            env={**os.environ, "GD_TEST_RUNS": str(runs)},
        )  # fmt: skip


def cpp_worker(program: Path, endpoint: str, log: Path, heartbeat_ms: int) -> subprocess.Popen[bytes]:
    """The C++ test worker on service ``work``: ``ID:MS`` tasks, each run a ``request ID:MS`` line in ``log``."""
    command = [str(program), "--service", "work", "--delay-in-payload", "-v", "--heartbeat-ms", str(heartbeat_ms)]
    with log.open("ab") as out:
        return subprocess.Popen([*command, endpoint], stdout=out, stderr=subprocess.STDOUT)


def python_runs(runs: Path, task: str) -> int:
    return len(list(runs.glob(f"{task}.*")))


def cpp_runs(log: Path, task: str) -> int:
    return sum(line.startswith(f"request {task}:") for line in log.read_text(errors="replace").splitlines())


def stop_all(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(WAIT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

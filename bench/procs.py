"""Child processes (brokers, workers, echo peers) and CPU-time probes.

Every child is started through :mod:`bench.peer`, which asks the kernel to kill it when the bench dies, prints
one banner line (its endpoint) and serves until SIGTERM. :class:`Children` stops them all on exit.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parent.parent


class Children:
    """Child processes of this run; all killed on :meth:`close` (also via ``with``)."""

    def __init__(self, log: IO[str] | None = None) -> None:
        self.procs: list[subprocess.Popen[str]] = []
        self.log = log

    def spawn(
        self, *args: str, banner_timeout: float = 20.0, env: dict[str, str] | None = None
    ) -> tuple[subprocess.Popen[str], str]:
        """Start ``python -m bench.peer ARGS`` (with ``env`` added to the environment); return it and the first
        line it prints."""
        path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        env = {**os.environ, **(env or {}), "PYTHONPATH": path}
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.peer", *args],
            stdout=subprocess.PIPE,
            stderr=self.log or subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            text=True,
            cwd=ROOT,
            env=env,
        )
        self.procs.append(proc)
        return proc, read_line(proc, banner_timeout)

    def start(self, module: str, *args: str) -> subprocess.Popen[str]:
        """Start ``python -m MODULE ARGS`` with pipes to its stdin and stdout (a process the bench talks to);
        stopped with the others."""
        path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        proc = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log or subprocess.DEVNULL,
            text=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": path},
        )
        self.procs.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen[str], timeout: float = 5.0) -> None:
        """SIGTERM ``proc``, then SIGKILL it if it lingers."""
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        if proc.stdout:
            proc.stdout.close()
        with contextlib.suppress(ValueError):
            self.procs.remove(proc)

    def close(self) -> None:
        """Stop every child still running (workers first, as they were started last)."""
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 5
        for proc in list(self.procs):
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.0, deadline - time.monotonic()))
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)
            if proc.stdout:
                proc.stdout.close()
        self.procs.clear()

    def __enter__(self) -> Children:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def read_line(proc: subprocess.Popen[str], timeout: float) -> str:
    """The next line ``proc`` prints, or RuntimeError after ``timeout`` seconds or if it exits."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    line = proc.stdout.readline() if ready else ""
    if not line:
        proc.kill()
        raise RuntimeError(f"child {proc.args[3:]} printed no banner within {timeout} s (exit {proc.poll()})")
    return line.strip()


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (for peers that cannot bind ``*``)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(pid: int, tid: int | None = None) -> float:
    """CPU time (user + system, all threads) of process ``pid``, or of one thread ``tid`` of it, in seconds.

    Read from ``/proc/*/schedstat`` (nanoseconds) summed over threads; falls back to ``/proc/PID/stat`` ticks.
    """
    tasks = [tid] if tid is not None else _tasks(pid)
    try:
        total = 0
        for task in tasks:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        return total / 1e9
    except (OSError, ValueError, IndexError):
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _tasks(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


@contextlib.contextmanager
def cpu_meter(pid: int, tid: int | None = None) -> Iterator[dict[str, float]]:
    """Measure CPU seconds of ``pid`` (or thread ``tid``) and wall seconds over the ``with`` block."""
    result: dict[str, float] = {}
    cpu0, wall0 = cpu_seconds(pid, tid), time.perf_counter()
    try:
        yield result
    finally:
        result["cpu"] = cpu_seconds(pid, tid) - cpu0
        result["wall"] = time.perf_counter() - wall0


COMPILED = ROOT / "generaldomo" / "_compiled"  # where this checkout's compiled core is (generaldomo.compiled)


def core_of(pid: int) -> str:
    """Which sans-IO core the generaldomo process ``pid`` runs, read from the process itself (its memory map, so
    a broker started with another environment or import path is judged as it runs): ``compiled`` when this
    checkout's compiled core (``generaldomo/_compiled/``) is loaded, ``compiled from DIR`` when another install's
    is, ``Python`` when none is, ``unknown`` when the map cannot be read."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return "unknown"
    loaded = {Path(line.split(None, 5)[5]).parent for line in maps.splitlines() if "/_compiled/" in line}
    loaded = {path for path in loaded if path.name == "_compiled" and path.parent.name == "generaldomo"}
    if not loaded:
        return "Python"
    other = sorted(str(path) for path in loaded if path != COMPILED)
    return f"compiled from {other[0]}" if other else "compiled"


def machine() -> dict[str, str | int]:
    """nproc, CPU model, Python, pyzmq and libzmq versions."""
    import platform

    import zmq

    from generaldomo.io import speedups

    model = "unknown"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    try:
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        load = "?"
    return {
        "generaldomo": _git_state(),
        "nproc": len(os.sched_getaffinity(0)),
        "cpu": model,
        "python": platform.python_version(),
        "pyzmq": zmq.pyzmq_version(),
        "libzmq": zmq.zmq_version(),
        "draft": str(bool(zmq.has("draft"))),
        "links": speedups.description,
        "loadavg_at_start": load,
    }


def _git_state() -> str:
    """``<commit>`` of the repository, ``+dirty`` when generaldomo/ has uncommitted changes."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "generaldomo"], cwd=ROOT, capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{commit or 'unknown'}{'+dirty' if dirty else ''}"

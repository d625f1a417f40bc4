"""The ``generaldomo`` command in real processes: start one, read its output lines as they come."""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
import time

COMMAND = [sys.executable, "-m", "generaldomo"]


def spawn(
    processes: list[subprocess.Popen[str]], *args: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """Start ``generaldomo ARGS``, kept in ``processes`` (the fixture of that name ends it)."""
    process = subprocess.Popen([*COMMAND, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    processes.append(process)
    return process


def run(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``generaldomo ARGS`` to its end."""
    return subprocess.run([*COMMAND, *args], capture_output=True, text=True, timeout=timeout, env=env)


def lines(stream) -> queue.Queue[str]:
    """The lines of ``stream`` as a reader thread gets them."""
    found: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [found.put(line) for line in stream], daemon=True).start()
    return found


def expect(found: queue.Queue[str], text: str, timeout: float = 60) -> str:
    """The first line of ``found`` with ``text`` in it (the lines before it are dropped); fail after ``timeout``."""
    seen = []
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = found.get(timeout=left)
        except queue.Empty:
            break
        if text in line:
            return line
        seen.append(line)
    raise AssertionError(f"no line with {text!r} within {timeout} s; saw {seen}")

"""Helpers for the worker-app tests: pool processes, and waiting for registrations (bounded in time)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from generaldomo import Client

ROOT = Path(__file__).resolve().parent.parent
POOL = [sys.executable, "-m", "generaldomo", "worker"]


def start_pool(spec: str, endpoint: str, transport: str, log: Path, *options: str) -> subprocess.Popen[bytes]:
    """``python -m generaldomo worker SPEC`` against ``endpoint``, its output in ``log``."""
    command = [*POOL, spec, "--connect", endpoint, "--transport", transport, *options]
    with log.open("ab") as out:
        return subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)


def registered(client: Client) -> Counter[str]:
    """How many workers the broker has per description."""
    return Counter(worker["description"] for worker in client.status()["workers"])


def wait_for_workers(client: Client, expected: dict[str, int], timeout: float = 60.0) -> None:
    """Wait until the broker has at least ``expected`` workers of each description."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = registered(client)
        if all(seen[name] >= count for name, count in expected.items()):
            return
        time.sleep(0.05)
    raise AssertionError(f"workers {dict(registered(client))} never reached {expected}")


def wait_until(predicate, what: str, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")

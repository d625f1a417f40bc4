"""``python -m bench.durable_queues [--requests N] [--window N]``: what the write-ahead log of ``--state-dir``
costs, in throughput, against a broker without one.

One embedded broker (ipc), one worker thread answering at once and one client sending ``--requests`` requests of
64 bytes, ``--window`` of them outstanding at a time, three times per setting: no state directory, a state
directory with ``--fsync os`` (the system's buffers) and with ``--fsync batch`` (``fdatasync`` per group
commit, the default). Reported: requests per second (the best of three) and its ratio to the broker without
a state directory, and the log's group commits per request (fewer: more requests share each flush).
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
import uuid
from pathlib import Path

from generaldomo import Client, Worker
from generaldomo.io.broker import Broker

SETTINGS = ("none", "os", "batch")


def pipelined(client: Client, requests: int, window: int, wait: float = 30.0) -> float:
    """Seconds ``client`` takes for ``requests`` echo requests of 64 bytes, ``window`` outstanding (after one)."""
    client.request("echo", b"warm", timeout=wait)
    payload = b"x" * 64
    started = time.perf_counter()
    pending = []
    for _ in range(requests):
        pending.append(client.submit("echo", payload))
        if len(pending) >= window:
            pending.pop(0).result(wait)
    for future in pending:
        future.result(wait)
    return time.perf_counter() - started


def run(setting: str, requests: int, window: int, directory: Path) -> tuple[float, float]:
    """Requests per second, and group commits per request, of one run."""
    endpoint = f"ipc://{directory}/{uuid.uuid4().hex[:8]}.sock"
    state = None if setting == "none" else directory / f"state-{uuid.uuid4().hex[:8]}"
    broker = Broker("router", [endpoint], state_dir=state, fsync="batch" if setting == "none" else setting)
    broker.start()
    worker = Worker(endpoint, "echo", lambda payload: payload)
    thread = threading.Thread(target=worker.serve, daemon=True)
    thread.start()
    try:
        with Client(endpoint) as client:
            took = pipelined(client, requests, window)
        groups = 0 if broker.wal is None else broker.wal.groups
        return requests / took, groups / requests
    finally:
        worker.stop()
        thread.join(10)
        broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--window", type=int, default=32)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temporary:
        best: dict[str, tuple[float, float]] = {}
        for _ in range(3):
            for setting in SETTINGS:
                rate, groups = run(setting, args.requests, args.window, Path(temporary))
                if setting not in best or rate > best[setting][0]:
                    best[setting] = (rate, groups)
    base = best["none"][0]
    print(f"{'state directory':<22}{'requests/s':>12}{'ratio':>8}{'commits/request':>18}")
    for setting in SETTINGS:
        rate, groups = best[setting]
        name = "none" if setting == "none" else f"--fsync {setting}"
        print(f"{name:<22}{rate:>12.0f}{rate / base:>8.2f}{groups:>18.2f}")


if __name__ == "__main__":
    main()

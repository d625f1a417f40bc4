"""The adaptive part of the Ray experiment: the phases of :mod:`bench.adaptive_flow` (fixed cap as large as the
pool, fixed cap of 2, adaptive cap) with Ray tasks as the clients and one pool actor holding the workers.

:data:`TASKS` Ray tasks each run ``WORKERS / TASKS`` threads on their process's shared generaldomo client, one
request each outstanding until the phase ends; the workers are one :class:`generaldomo.ray.WorkerPool` actor
with one thread per worker, serving :data:`bench.adaptive_flow.elastic` (whose load counter is per process, so
the pool is one actor). A phase starts once its tasks all run (:class:`bench.ray_clients.Gate`): Ray starting
their worker processes (seconds on a loaded machine) does not eat into it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from bench import adaptive_flow
from bench.adaptive_flow import SERVICE, WORKERS, Trace
from generaldomo import Client

TASKS = 4


def run(endpoint: str, client: Client, seconds: float) -> dict[str, Any]:
    """The three phases through Ray; the figures of :func:`bench.adaptive_flow.measure`."""
    import ray

    import generaldomo.ray as gdray
    from bench.ray_clients import warm

    pool = gdray.WorkerPool(endpoint, SERVICE, "bench.adaptive_flow:elastic", 1, threads=WORKERS, num_cpus=0)
    try:
        pool.wait()
        ray.get([warm.remote(0.5) for _ in range(TASKS)], timeout=120)
        return adaptive_flow.measure(client, lambda length: _tasks(endpoint, length), seconds, "Ray tasks")
    finally:
        pool.close()


def _tasks(endpoint: str, seconds: float) -> tuple[float, Callable[[], Trace]]:
    import ray

    from bench.ray_clients import GATE_WAIT, Gate, closed_loop

    gate = Gate.remote(TASKS)
    running = [closed_loop.remote(endpoint, SERVICE, gate, seconds, WORKERS // TASKS) for _ in range(TASKS)]
    began = float(ray.get(gate.opening.remote(), timeout=GATE_WAIT))

    def gather() -> Trace:
        try:
            batches = ray.get(running, timeout=max(0.0, began + seconds - time.monotonic()) + 120)
        finally:
            ray.kill(gate)
        return sorted(reply for _, replies in batches for reply in replies)

    return began, gather

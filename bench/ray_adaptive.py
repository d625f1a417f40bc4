"""The adaptive part of the Ray experiment: the phases of :mod:`bench.adaptive_flow` (fixed cap as large as the
pool, fixed cap of 2, adaptive cap) with Ray tasks as the clients and one pool actor holding the workers.

:data:`TASKS` Ray tasks each run ``WORKERS / TASKS`` threads on their process's shared generaldomo client, one
request each outstanding until the phase ends; the workers are one :class:`generaldomo.ray.WorkerPool` actor
with one thread per worker, serving :data:`bench.adaptive_flow.elastic` (whose load counter is per process, so
the pool is one actor).
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
        return adaptive_flow.measure(client, lambda until: _tasks(endpoint, until), seconds, "Ray tasks")
    finally:
        pool.close()


def _tasks(endpoint: str, until: float) -> Callable[[], Trace]:
    import ray

    from bench.ray_clients import closed_loop

    running = [closed_loop.remote(endpoint, SERVICE, until, WORKERS // TASKS) for _ in range(TASKS)]

    def gather() -> Trace:
        batches = ray.get(running, timeout=max(0.0, until - time.monotonic()) + 120)
        return sorted(reply for batch in batches for reply in batch)

    return gather

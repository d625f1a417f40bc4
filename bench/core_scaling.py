"""Part 3: scaling of the sans-IO core (``BrokerCore`` fed frames directly; no sockets, no clock).

- dispatch cost per request (a client REQUEST that is dispatched to a waiting worker, then the worker's
  READY carrying the result, which answers the client) as waiting workers grow and as services grow;
- the heartbeat sweep (``tick``) as workers grow;
- memory per queued request with ``core_queued`` requests waiting and no worker (tracemalloc).
"""

from __future__ import annotations

import gc
import os
import time
import tracemalloc
from typing import Any

from bench.config import Config, say
from bench.load import median

BODY = b"x" * 16


def run(cfg: Config) -> dict[str, Any]:
    """Every core measurement; rows of ``{"case", "size", ...}``."""
    rows: list[dict[str, Any]] = []
    for workers in cfg.core_workers:
        rows.append({"case": "workers", "size": workers, **_repeat(cfg, workers=workers, services=1)})
        say(f"core: {workers} waiting workers, 1 service: {rows[-1]['total_us']:.2f} us/request")
    for services in cfg.core_services:
        rows.append({"case": "services", "size": services, **_repeat(cfg, workers=2 * services, services=services)})
        say(f"core: {services} services, 2 workers each: {rows[-1]['total_us']:.2f} us/request")
    for workers in cfg.core_workers:
        rows.append({"case": "tick", "size": workers, "sweep_ms": tick_cost(workers, cfg.core_repeats)})
        say(f"core: heartbeat sweep over {workers} workers: {rows[-1]['sweep_ms']:.2f} ms")
    memory = queued_memory(cfg.core_queued)
    say(f"core: {cfg.core_queued} queued requests: {memory['bytes_per_request']:.0f} bytes each")
    return {"rows": rows, "memory": memory}


def _core(workers: int, services: int) -> tuple[Any, list[bytes]]:
    """A core with ``workers`` waiting workers spread over ``services`` services; the service names."""
    from generaldomo.sansio.broker.core import BrokerCore, Peer
    from generaldomo.sansio.wire import protocol

    core = BrokerCore(instance=b"bnch", random=os.urandom)
    names = [b"svc-%d" % s for s in range(services)]
    for w in range(workers):
        core.receive(Peer(1, w), protocol.gdp_ready(names[w % services]), 0.0)
    return core, names


def dispatch_cost(workers: int, services: int, n: int) -> dict[str, float]:
    """Microseconds per request: the request's dispatch and the reply's completion, timed separately."""
    from generaldomo.sansio.broker.core import Peer
    from generaldomo.sansio.wire import protocol

    core, names = _core(workers, services)
    client = Peer(0, b"client")
    requests = [protocol.gdp_request(b"req-%08d" % i, names[i % services], [BODY]) for i in range(n)]
    receive = core.receive
    clock = time.perf_counter_ns
    dispatch = complete = 0
    gc.collect()
    for frames in requests:
        t0 = clock()
        out = receive(client, frames, 0.0)
        t1 = clock()
        worker, task = out[0]
        reply = protocol.gdp_ready(task[3], (task[2], protocol.OK, [BODY]))
        t2 = clock()
        receive(worker, reply, 0.0)
        complete += clock() - t2
        dispatch += t1 - t0
    if core.counters["completed"] != n:
        raise RuntimeError(f"core completed {core.counters['completed']} of {n} requests")
    return {"dispatch_us": dispatch / n / 1e3, "complete_us": complete / n / 1e3}


def _repeat(cfg: Config, workers: int, services: int) -> dict[str, float]:
    runs = [dispatch_cost(workers, services, cfg.core_n) for _ in range(cfg.core_repeats)]
    result = {key: median([r[key] for r in runs]) for key in runs[0]}
    result["total_us"] = result["dispatch_us"] + result["complete_us"]
    return result


def tick_cost(workers: int, repeats: int) -> float:
    """Milliseconds one heartbeat sweep takes with ``workers`` registered (all alive)."""
    core, _ = _core(workers, 1)
    interval = core.settings.heartbeat_interval
    times = []
    for k in range(1, repeats + 1):
        now = k * interval
        for w in core.workers.values():  # keep them all alive: no expiry work, only heartbeats
            w.expires = now + 100.0
        t0 = time.perf_counter()
        out = core.tick(now)
        times.append((time.perf_counter() - t0) * 1e3)
        if len(out) != workers:
            raise RuntimeError(f"tick sent {len(out)} heartbeats to {workers} workers")
    return median(times)


def queued_memory(n: int) -> dict[str, float]:
    """Bytes the core holds per queued request (16-byte payload, 16-byte request id), measured by tracemalloc."""
    from generaldomo.sansio.broker.core import BrokerCore, Peer
    from generaldomo.sansio.wire import protocol

    core = BrokerCore(instance=b"bnch", random=os.urandom)
    client = Peer(0, b"client")
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(n):  # frames are made here, as a link would make them; the core keeps what it keeps
            core.receive(client, protocol.gdp_request(b"%016d" % i, b"echo", [b"%016d" % i]), 0.0)
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    if len(core.tasks) != n:
        raise RuntimeError(f"{len(core.tasks)} tasks queued, expected {n}")
    return {"queued": n, "bytes_total": after - before, "bytes_per_request": (after - before) / n}

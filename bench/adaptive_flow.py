"""Part ``adaptive``: the adaptive concurrency cap against fixed caps, before a service whose latency rises with
load, driven by plain Python client threads; part ``ray`` runs the same phases with Ray
tasks as the clients and a Ray actor holding the workers (:mod:`bench.ray_adaptive`).

The service runs on :data:`CORES` "cores": a task that starts while ``n`` tasks run takes
``BASE x max(1, n / CORES)`` seconds, so beyond ``CORES`` tasks at once every task gets slower and nothing
gets done sooner. :data:`WORKERS` workers serve it and as many client threads keep one request each
outstanding, so demand always presses on the cap. Three phases in a row: a fixed cap as large as the pool
(latency climbs to ``WORKERS / CORES`` floors), a fixed cap of 2 (latency at the floor, half the throughput
wasted), and the adaptive cap (``mmi.flow`` ``{"adaptive": {"min": 1, "max": WORKERS}}``), which should settle
near ``CORES``: full throughput at a latency near the floor. Each reply's service time comes from the broker's
timing; the cap in force is read from ``mmi.status`` every :data:`POLL` seconds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.config import Config, say
from generaldomo import Broker, Client, Worker
from generaldomo.sansio.broker.services.stats import percentile

SERVICE = "elastic"
CORES = 4
BASE = 0.05  # seconds a task takes while at most CORES run
WORKERS = 24
POLL = 0.25
Trace = list[tuple[float, float]]  # (monotonic time, service time) of each reply
Load = Callable[[float], tuple[float, Callable[[], Trace]]]  # start ``seconds`` of load: when it began, its gatherer


class Elastic:
    """The handler: service time grows with the tasks running at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running = 0

    def __call__(self, payload: bytes | tuple[bytes, ...]) -> bytes:
        with self._lock:
            self._running += 1
            running = self._running
        try:
            time.sleep(BASE * max(1.0, running / CORES))
        finally:
            with self._lock:
                self._running -= 1
        return b"done"


elastic = Elastic()  # one per process, for workers that load their handler by name ("bench.adaptive_flow:elastic")


def phases() -> list[tuple[str, dict[str, Any]]]:
    """(name, the mmi.flow change that starts it)."""
    return [
        (f"fixed cap {WORKERS}", {"concurrency": WORKERS, "adaptive": None}),
        ("fixed cap 2", {"concurrency": 2, "adaptive": None}),
        (f"adaptive 1..{WORKERS}", {"concurrency": None, "adaptive": {"min": 1, "max": WORKERS}}),
    ]


def run(cfg: Config, plot: Path | None = None) -> dict[str, Any]:
    """Run the three phases; their figures, traces and the plot's path (if drawn)."""
    seconds = cfg.adaptive_seconds
    broker = Broker("router", ["tcp://127.0.0.1:*"]).start()
    endpoint = broker.endpoint("router", "tcp")
    workers = [Worker(endpoint, SERVICE, elastic) for _ in range(WORKERS)]
    threads = [threading.Thread(target=w.serve, daemon=True) for w in workers]
    for thread in threads:
        thread.start()
    try:
        with Client(endpoint) as client:
            result = measure(client, lambda length: _threads(client, length), seconds, "client threads")
    finally:
        for worker in workers:
            worker.stop()
        for thread in threads:
            thread.join(5)
        broker.stop()
    if plot is not None:
        result["plot"] = str(draw(result, plot))
    return result


def measure(client: Client, load: Load, seconds: float, clients: str) -> dict[str, Any]:
    """The three phases of ``seconds`` each against the registered workers, driven by ``load``."""
    result: dict[str, Any] = {
        "cores": CORES, "base": BASE, "workers": WORKERS, "seconds": seconds, "clients": clients, "phases": [],
    }  # fmt: skip
    _registered(client)
    start = time.monotonic()
    for name, change in phases():
        say(f"adaptive ({clients}): {name}, {seconds:g} s")
        client.flow(SERVICE, **change)
        result["phases"].append({"name": name, **_phase(client, load, seconds, start)})
    return result


def _threads(client: Client, seconds: float) -> tuple[float, Callable[[], Trace]]:
    """The load of :data:`WORKERS` client threads in this process, one request each outstanding."""
    replies: Trace = []
    began = time.monotonic()
    until = began + seconds

    def call() -> None:
        while time.monotonic() < until:
            reply = client.request(SERVICE, b"x", timeout=60)
            replies.append((time.monotonic(), reply.served or 0.0))  # list.append is atomic

    callers = [threading.Thread(target=call, daemon=True) for _ in range(WORKERS)]
    for caller in callers:
        caller.start()

    def gather() -> Trace:
        for caller in callers:
            caller.join(60)
        return replies

    return began, gather


def _phase(client: Client, load: Load, seconds: float, start: float) -> dict[str, Any]:
    """Drive the service for ``seconds``; each reply's (time, service time) and the cap over time."""
    caps: list[tuple[float, int | None, int]] = []
    began, gather = load(seconds)
    stop = began + seconds
    time.sleep(max(0.0, began - time.monotonic()))
    while time.monotonic() < stop:
        flow = next(s for s in client.status()["services"] if s["name"] == SERVICE)["flow"]
        cap = flow["adaptive"]["cap"] if flow.get("adaptive") else flow["concurrency"]
        caps.append((time.monotonic() - start, cap, flow["in_flight"]))
        time.sleep(POLL)
    replies = [(when - start, served) for when, served in gather()]
    return _figures(replies, caps, began - start, seconds)


def _figures(replies: Trace, caps: list[tuple[float, int | None, int]], began: float, seconds: float) -> dict[str, Any]:
    """Throughput and service times over the second half of a phase (after the cap settled), and the traces."""
    settled = sorted(s for t, s in replies if t >= began + seconds / 2)
    late_caps = sorted(c for t, c, _ in caps if t >= began + seconds / 2 and c is not None)
    return {
        "began": began,
        "throughput": len(settled) / (seconds / 2),
        "service_p50": percentile(settled, 50),
        "service_p90": percentile(settled, 90),
        "settled_cap": percentile(late_caps, 50),
        "replies": replies,
        "caps": caps,
    }


def _registered(client: Client, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        service = next((s for s in client.status()["services"] if s["name"] == SERVICE), None)
        if service is not None and service["workers"] >= WORKERS:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"fewer than {WORKERS} workers registered in {timeout:g} s")
        time.sleep(0.05)


def draw(result: dict[str, Any], path: Path) -> Path:
    """Service time of every reply (top) and the cap in force with the tasks in flight (bottom), phase by phase."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6), sharex=True, height_ratios=(3, 2))
    for n, phase in enumerate(result["phases"]):
        colour = f"C{n}"
        times, served = zip(*phase["replies"], strict=True) if phase["replies"] else ((), ())
        label = f"{phase['name']}: {phase['throughput']:.0f}/s, p50 {1000 * (phase['service_p50'] or 0):.0f} ms"
        top.scatter(times, [1000 * s for s in served], s=2, color=colour, label=label)
        steps = [(t, c) for t, c, _ in phase["caps"] if c is not None]
        if steps:
            bottom.step(*zip(*steps, strict=True), where="post", color=colour)
        flying = [(t, f) for t, _, f in phase["caps"]]
        if flying:
            bottom.plot(*zip(*flying, strict=True), color=colour, linestyle=":", linewidth=1)
    top.axhline(1000 * result["base"], color="grey", linewidth=0.8, linestyle="--", label="floor (no queueing)")
    top.set_ylabel("service time (ms)")
    top.set_yscale("log")
    top.legend(fontsize="small", loc="upper right", markerscale=4)
    bottom.axhline(result["cores"], color="grey", linewidth=0.8, linestyle="--")
    bottom.set_ylabel("cap (solid), in flight (dotted)")
    bottom.set_xlabel("seconds")
    fig.suptitle(
        f"A service of {result['cores']} cores ({1000 * result['base']:.0f} ms a task, slower beyond "
        f"{result['cores']} at once), {result['workers']} workers, {result['clients']} as clients: "
        "fixed caps against the adaptive cap",
        fontsize="medium",
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

"""Part 13, goodput under overload with deadlines: deadline-aware dispatch on and off.

A service of :data:`WORKERS` worker threads, each task taking :data:`WORK` s, gets open-loop arrivals at
:data:`OVERLOAD` times its capacity, each request carrying a :data:`DEADLINE` s deadline. Under such a load the
queue is always full of requests near their deadline: a broker that dispatches the oldest one whatever time it has
left keeps its workers busy with tasks that expire while they run (answered ``504``, their results dropped), while
one that dispatches only a task whose time left covers the service's estimated service time answers the others
``504`` at once and keeps its workers for tasks that can still make it. Reported per run: the requests offered,
answered within their deadline (goodput, per second), answered ``504`` at once (the estimate said so), expired
(waiting, or while a worker ran them: wasted work).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from bench.config import Config, progress, say
from generaldomo import Broker, Client, Settings, Worker

WORKERS = 2
WORK = 0.05  # seconds a task takes: the service does WORKERS / WORK tasks a second
DEADLINE = 0.5  # seconds each request wants its answer within
OVERLOAD = 3.0  # offered load, in capacities
PHASE = {"full": 10.0, "quick": 5.0, "smoke": 2.0}  # seconds of each run


def run(cfg: Config) -> dict[str, Any]:
    """One run with deadline-aware dispatch (the default) and one without."""
    seconds = PHASE.get(cfg.name, 5.0)
    runs = [_run(seconds, aware) for aware in (True, False)]
    return {"workers": WORKERS, "work": WORK, "deadline": DEADLINE, "overload": OVERLOAD, "runs": runs}


def _work(payload: bytes) -> bytes:
    time.sleep(WORK)
    return payload


def _run(seconds: float, aware: bool) -> dict[str, Any]:
    name = "deadline-aware dispatch" if aware else "oldest first (deadline_estimate_after none)"
    say(f"goodput: {name}, {seconds:g} s")
    progress["last"] = time.monotonic()
    settings = Settings() if aware else Settings(deadline_estimate_after=None)
    broker = Broker("router", ["tcp://127.0.0.1:*"], settings=settings).start()
    endpoint = broker.endpoint("router", "tcp")
    workers = [Worker(endpoint, "busy", _work) for _ in range(WORKERS)]
    threads = [threading.Thread(target=w.serve, daemon=True) for w in workers]
    for thread in threads:
        thread.start()
    try:
        for _ in range(600):
            if len(broker.core.workers) >= WORKERS:
                break
            time.sleep(0.05)
        counts = _offer(endpoint, seconds)
        counters = broker.core.counters
        figures = {
            "unreachable": counters.deadline_unreachable,
            "past_deadline": counters.past_deadline,
        }
        estimate = next((s.stats.estimate for s in broker.core.resolver.services() if s.name == "busy"), None)
    finally:
        for worker in workers:
            worker.stop()
        for thread in threads:
            thread.join(10)
        broker.stop()
    return {"name": name, **counts, **figures, "estimate": estimate, "goodput_per_s": counts["on_time"] / seconds}


def _offer(endpoint: str, seconds: float) -> dict[str, int]:
    """Open-loop arrivals at OVERLOAD x capacity for ``seconds``; how each request ended."""
    capacity = WORKERS / WORK
    lock = threading.Lock()
    counts = {"offered": 0, "on_time": 0, "late": 0, "refused": 0}
    with Client(endpoint) as client:
        start = time.monotonic()
        futures: list[Future[Any]] = []

        def settle(scheduled: float) -> Callable[[Future[Any]], None]:
            def done(future: Future[Any]) -> None:
                with lock:
                    if future.cancelled() or future.exception() is not None:
                        counts["refused"] += 1
                    elif time.monotonic() - scheduled <= DEADLINE:
                        counts["on_time"] += 1
                    else:
                        counts["late"] += 1

            return done

        sent = 0
        while (now := time.monotonic()) < start + seconds:
            while sent < int(OVERLOAD * capacity * (now - start)):
                future = client.submit("busy", b"x", deadline=DEADLINE)
                future.add_done_callback(settle(start + sent / (OVERLOAD * capacity)))
                futures.append(future)
                sent += 1
            time.sleep(0.002)
        wait_until = time.monotonic() + DEADLINE + 5
        while time.monotonic() < wait_until and not all(f.done() for f in futures):
            time.sleep(0.05)
        for future in futures:
            future.cancel()
    counts["offered"] = sent
    return counts


def markdown(part: dict[str, Any]) -> str:
    """Part 13's table."""
    lines = [
        "### 13. Goodput under overload with deadlines: deadline-aware dispatch",
        "",
        f"{part['workers']} workers, {1000 * part['work']:.0f} ms a task, {part['overload']:g}x their capacity "
        f"offered, each request wanting its answer within {part['deadline']:g} s:",
        "",
        "| dispatch | offered | on time | goodput/s | 504 at once | expired waiting or running |",
        "|---|---|---|---|---|---|",
    ]
    for r in part["runs"]:
        lines.append(
            f"| {r['name']} | {r['offered']} | {r['on_time']} | {r['goodput_per_s']:.1f} | {r['unreachable']} | "
            f"{r['past_deadline']} |"
        )
    return "\n".join(lines)

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

import time
from typing import Any

from bench.config import Config
from bench.shared import _deadline_phase, _Service
from generaldomo import Settings

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
    settings = Settings() if aware else Settings(deadline_estimate_after=None)
    service = _Service("busy", _work, WORKERS, settings)
    try:
        counts = _deadline_phase(
            service.endpoint, seconds, True, capacity=WORKERS / WORK, overload=OVERLOAD, calm=OVERLOAD,
            deadline=DEADLINE, name=name,
        )  # fmt: skip
        counters = service.broker.core.counters
        figures = {"unreachable": counters.deadline_unreachable, "past_deadline": counters.past_deadline}
        estimate = next((s.stats.estimate for s in service.broker.core.resolver.services() if s.name == "busy"), None)
    finally:
        service.close()
    return {**counts, **figures, "estimate": estimate}


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

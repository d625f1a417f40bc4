"""What the dashboard's page is sent: a frame per status report, and the history a page opened late starts from.

Rules of this module:

- It is IO-free: it is fed typed status reports (:class:`~generaldomo.sansio.broker.report.StatusReport`) and the
  wall-clock time each one arrived, and returns JSON-ready data. It reads no socket and no clock, and knows
  nothing of HTTP or of how the report was fetched.
- A frame is bounded: at most ``max_services`` services and ``max_workers`` workers (the report's first ones;
  the totals say how many there are), and the history keeps :data:`HISTORY` seconds of samples and at most
  :data:`BARS_KEPT` timeline bars per service shown.
- The timeline's bars come from each service's ``recent`` completions: a completion is new when its number is
  above the last ``completed`` seen for that service (a new broker instance starts the count again). When more
  tasks completed between two reports than ``recent`` lists, the frame says how many bars it could not draw.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any, Final

import attrs

from generaldomo.sansio.broker.report import ServiceReport, StatusReport, as_data

__all__ = [
    "BARS_KEPT",
    "DROPS",
    "HISTORY",
    "MAX_SERVICES",
    "MAX_WORKERS",
    "REFUSALS",
    "Bar",
    "Framer",
    "Sample",
    "bars",
    "cap",
    "counter_group",
    "sample",
]

HISTORY: Final = 300.0  # seconds of samples a page opened late gets
BARS_KEPT: Final = 2000  # timeline bars kept per service for a page opened late
MAX_SERVICES: Final = 50  # services a frame shows (unless told otherwise)
MAX_WORKERS: Final = 200  # workers a frame shows (unless told otherwise)
REFUSALS: Final = frozenset({"forbidden", "over_budget", "rejected", "too_large"})  # besides the "*refused*" ones
DROPS: Final = frozenset({"malformed"})  # besides the "*dropped*" ones

Bar = tuple[float, float, float]  # a completed task: when it arrived, was dispatched and ended (wall seconds)
Sample = tuple[int, int, int | None, float]  # a service at one moment: queued, in flight, cap, completions/s


def counter_group(name: str) -> str:
    """Which box of the page a broker counter goes in: ``refused``, ``dropped`` or ``totals``."""
    if name in REFUSALS or "refused" in name:
        return "refused"
    if name in DROPS or "dropped" in name:
        return "dropped"
    return "totals"


def cap(service: ServiceReport) -> int | None:
    """The concurrency cap in force: the lower of the fixed and the adaptive one (None: no cap)."""
    caps = [c for c in (service.flow.concurrency, service.flow.adaptive and service.flow.adaptive.cap) if c]
    return min(caps) if caps else None


def bars(service: ServiceReport, arrived: float, new: int) -> list[Bar]:
    """The last ``new`` of ``service``'s recent completions as bars, for a report that arrived at ``arrived``."""
    recent = service.recent
    count = max(0, min(new, len(recent.ended)))
    columns = (recent.ended[-count:], recent.queued[-count:], recent.served[-count:]) if count else ((), (), ())
    drawn = []
    for ended_ago, queued, served in zip(*columns, strict=True):
        ended = arrived - ended_ago
        dispatched = ended - served
        drawn.append((round(dispatched - queued, 4), round(dispatched, 4), round(ended, 4)))
    return sorted(drawn)


@attrs.define
class _Service:
    """What the framer remembers of one service shown."""

    completed: int
    samples: deque[tuple[float, Sample]] = attrs.field(factory=deque)
    bars: deque[Bar] = attrs.field(factory=lambda: deque(maxlen=BARS_KEPT))


@attrs.define
class Framer:
    """Makes the page's frames from successive status reports; see the module docstring."""

    max_services: int = MAX_SERVICES
    max_workers: int = MAX_WORKERS
    _instance: str | None = None
    _services: dict[str, _Service] = attrs.field(factory=dict)
    _last: dict[str, Any] | None = None

    def frame(self, report: StatusReport, arrived: float, control: bool = False, every: float = 1.0) -> dict[str, Any]:
        """The frame of ``report``, which arrived at ``arrived`` (wall seconds); remembered for :meth:`history`.
        ``control``: the page may change flow limits; ``every``: seconds until the next report."""
        if report.broker.instance != self._instance:
            self._instance = report.broker.instance
            self._services.clear()
        shown = report.services[: self.max_services]
        new_bars, missed = {}, {}
        for service in shown:
            known = self._services.get(service.name)
            if known is None or service.completed < known.completed:  # first sight, or a service made anew
                known = self._services[service.name] = _Service(service.completed)
                new, first = len(service.recent.ended), True
            else:
                new, first = service.completed - known.completed, False
            known.completed = service.completed
            drawn = bars(service, arrived, new)
            if drawn:
                new_bars[service.name] = drawn
                known.bars.extend(drawn)
            if new > len(drawn) and not first:
                missed[service.name] = new - len(drawn)
            known.samples.append((arrived, sample(service)))
            _forget_before(known, arrived - HISTORY)
        for name in set(self._services) - {s.name for s in shown}:
            del self._services[name]
        self._last = {
            "kind": "frame",
            "at": round(arrived, 3),
            "control": control,
            "every": round(every, 3),
            "broker": _broker(report),
            "counters": _counters(report.broker.counters.items()),
            "services_total": max(report.broker.service_count, len(report.services)),  # (older brokers: no count)
            "workers_total": max(report.broker.worker_count, len(report.workers)),
            "services": [_service(s) for s in shown],
            "workers": [as_data(w) for w in report.workers[: self.max_workers]],
            "bars": new_bars,
            "bars_missed": missed,
        }
        return self._last

    def history(self) -> dict[str, Any]:
        """What a page that opens now starts from: the last frame, and each shown service's samples and bars
        of the last :data:`HISTORY` seconds."""
        return {
            "kind": "history",
            "last": self._last,
            "samples": {name: [[at, *values] for at, values in s.samples] for name, s in self._services.items()},
            "bars": {name: list(s.bars) for name, s in self._services.items()},
        }


def sample(service: ServiceReport) -> Sample:
    """The values a service's chart plots at one moment."""
    return (service.queued, service.in_flight, cap(service), service.observed_rate)


def _forget_before(service: _Service, oldest: float) -> None:
    while service.samples and service.samples[0][0] < oldest:
        service.samples.popleft()
    while service.bars and service.bars[0][2] < oldest:
        service.bars.popleft()


def _broker(report: StatusReport) -> dict[str, Any]:
    broker = report.broker
    return {
        "instance": broker.instance,
        "uptime": broker.uptime,
        "endpoints": [f"{e.transport} {e.endpoint}" for e in broker.endpoints],
        "queued": broker.queued,
        "queued_bytes": broker.queued_bytes,
        "in_flight": max(broker.in_flight, sum(s.in_flight for s in report.services)),  # (older brokers: the page's)
        "workers": max(
            broker.worker_count, len(report.workers)
        ),  # the totals, not the page's (older brokers: no count)
        "services": max(broker.service_count, len(report.services)),
        "kept_answers": broker.kept_answers,
        "kept_bytes": broker.kept_bytes,
        "dead_letters": broker.dead_letters.letters,
        "dead_bytes": broker.dead_letters.bytes,
        "dead_service_count": broker.dead_letters.service_count,
        "dead_services": [  # the report's (at most report.DEAD_SERVICES)
            {"service": s.service, "count": s.count, "newest_age": s.newest_age} for s in broker.dead_letters.services
        ],
        "pair": None if broker.pair is None else attrs.asdict(broker.pair),  # a broker pair's role and state
    }


def _counters(counters: Iterable[tuple[str, int]]) -> dict[str, dict[str, int]]:
    groups: dict[str, dict[str, int]] = {"totals": {}, "refused": {}, "dropped": {}}
    for name, value in sorted(counters):
        groups[counter_group(name)][name] = value
    return groups


def _service(service: ServiceReport) -> dict[str, Any]:
    data = as_data(service)
    del data["recent"]  # sent as bars
    data["cap"] = cap(service)
    return data

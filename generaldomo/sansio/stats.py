"""Per-service statistics: counters, recent queue and service times, observed completion rate.

This module owns the bookkeeping behind the broker's status report. It is fed times by the core and reads
no clock; it knows nothing of sockets, workers or how tasks are dispatched. Memory is bounded: only the
most recent ``SAMPLES`` times are kept for percentiles (and the last :data:`RECENT` of them are reported one by
one, for timelines).
"""

from __future__ import annotations

import itertools
from collections import deque

import attrs

SAMPLES = 1024
RATE_WINDOW = 10.0  # seconds over which the observed completion rate is measured
PERCENTILES = (50, 90, 99)
RECENT = 32  # completions the status report lists per service, newest last (a timeline of its dispatches)


def percentiles(values: deque[float]) -> tuple[float | None, ...]:
    """Nearest-rank :data:`PERCENTILES` of ``values`` (None when there are none)."""
    ordered = sorted(values)
    if not ordered:
        return tuple(None for _ in PERCENTILES)
    return tuple(ordered[min(len(ordered) - 1, (len(ordered) * p) // 100)] for p in PERCENTILES)


@attrs.define
class ServiceStats:
    """What happened to one service's tasks."""

    completed: int = 0
    failed: int = 0
    reissued: int = 0
    duplicates_dropped: int = 0
    expired: int = 0
    throttled: int = 0  # tasks a worker sent back with 429 ("slow down"), queued again
    queue_times: deque[float] = attrs.field(factory=lambda: deque(maxlen=SAMPLES))
    service_times: deque[float] = attrs.field(factory=lambda: deque(maxlen=SAMPLES))
    finished_at: deque[float] = attrs.field(factory=lambda: deque(maxlen=SAMPLES * 8))

    def record(self, queued: float, serviced: float, now: float) -> None:
        """A task was answered after ``queued`` seconds waiting and ``serviced`` seconds with its worker."""
        self.completed += 1
        self.queue_times.append(queued)
        self.service_times.append(serviced)
        self.finished_at.append(now)

    def rate(self, now: float) -> float:
        """Completions per second over the last :data:`RATE_WINDOW` seconds."""
        recent = sum(1 for t in self.finished_at if t > now - RATE_WINDOW)
        return recent / RATE_WINDOW

    def recent(self, n: int = RECENT) -> list[tuple[float, float, float]]:
        """The last ``n`` completions, oldest first: when each ended, its queue time and its service time (the
        newest is completion number :attr:`completed`)."""
        count = min(n, len(self.queue_times))
        columns = (self.finished_at, self.queue_times, self.service_times)
        newest_first = zip(*(itertools.islice(reversed(column), count) for column in columns), strict=True)
        return list(newest_first)[::-1]

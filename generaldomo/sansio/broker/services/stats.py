"""Per-service statistics: counters, recent queue and service times, observed completion rate.

This module owns the bookkeeping behind the broker's status report. It is fed times by the core and reads
no clock; it knows nothing of sockets, workers or how tasks are dispatched. Memory is bounded and small
whatever happens, since any peer can make a service: the most recent :data:`SAMPLES` times are kept for
percentiles in arrays of doubles (:class:`Samples`), the last :data:`RECENT` completions are reported one by
one (for timelines), and completions are counted per second over the last :data:`RATE_WINDOW` seconds.
"""

from __future__ import annotations

import dataclasses
import math
from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import Final

__all__ = [
    "ESTIMATE_EASING",
    "ESTIMATE_WEIGHT",
    "PERCENTILES",
    "RATE_WINDOW",
    "RECENT",
    "SAMPLES",
    "Samples",
    "ServiceStats",
    "nearest_rank",
    "percentile",
    "percentiles",
]

SAMPLES = 1024
RATE_WINDOW = 10.0  # seconds over which the observed completion rate is measured
PERCENTILES = (50, 90, 99)
RECENT = 32  # completions the status report lists per service, newest last (a timeline of its dispatches)
_SECONDS: Final = int(RATE_WINDOW)
ESTIMATE_WEIGHT: Final = 0.125  # the newest service time's weight in the estimate (as TCP's smoothed round-trip time)
ESTIMATE_EASING = 0.98  # the estimate's factor at each task it turns away (35 in a row halve it)


def nearest_rank(ordered: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0 < p <= 100) of the sorted, non-empty ``ordered`` by nearest rank: its
    ceil(p/100 x n)-th smallest value (the median of 1..100 is 50, the 99th percentile 99), a value of the data.
    The one percentile of the project: the status report's, the metrics' and the bench's."""
    rank = math.ceil(round(p * len(ordered) / 100, 9))  # (the rounding drops float noise: 0.07 x 100 is 7.000...01)
    return ordered[min(max(rank, 1), len(ordered)) - 1]


def percentile(values: Iterable[float], p: float) -> float | None:
    """The nearest-rank ``p``-th percentile of ``values`` (:func:`nearest_rank`); None when there are none."""
    ordered = sorted(values)
    return nearest_rank(ordered, p) if ordered else None


def percentiles(values: Iterable[float], ps: Sequence[float] = PERCENTILES) -> tuple[float | None, ...]:
    """The nearest-rank percentiles ``ps`` (default :data:`PERCENTILES`) of ``values``, sorted once; Nones when
    there are none."""
    ordered = sorted(values)
    return tuple(nearest_rank(ordered, p) if ordered else None for p in ps)


class Samples:
    """The latest ``size`` values, in a ring of doubles (8 bytes each, allocated as they come)."""

    __slots__ = ("_next", "_ring", "_size")

    def __init__(self, size: int = SAMPLES) -> None:
        self._ring = array("d")
        self._next = 0  # where the next value goes once the ring is full: the oldest value's place
        self._size = size

    def __len__(self) -> int:
        return len(self._ring)

    def __iter__(self) -> Iterator[float]:
        return iter(self._ring)

    def append(self, value: float) -> None:
        ring = self._ring
        if len(ring) < self._size:
            ring.append(value)
            return
        ring[self._next] = value
        self._next = (self._next + 1) % self._size

    def latest(self, n: int) -> list[float]:
        """The last ``n`` values (fewer if there are fewer), oldest first."""
        ring, at = self._ring, self._next
        ordered = ring[at:] + ring[:at] if len(ring) == self._size else ring
        return list(ordered[max(0, len(ordered) - n) :])


@dataclasses.dataclass(slots=True)
class ServiceStats:
    """What happened to one service's tasks."""

    completed: int = 0
    failed: int = 0
    reissued: int = 0
    duplicates_dropped: int = 0
    expired: int = 0
    throttled: int = 0  # tasks a worker sent back with 429 ("slow down"), queued again
    estimate: float | None = None  # the estimated service time (s); None: no task answered yet
    retried: int = 0  # answers its retry policy retried: tasks held for a backoff, then queued again
    queue_times: Samples = dataclasses.field(default_factory=Samples)
    service_times: Samples = dataclasses.field(default_factory=Samples)
    finished_at: Samples = dataclasses.field(default_factory=lambda: Samples(RECENT))
    # completions in each of the last RATE_WINDOW whole seconds: second % RATE_WINDOW -> (second, count)
    _per_second: list[tuple[int, int]] = dataclasses.field(default_factory=lambda: [(-1, 0)] * _SECONDS, repr=False)

    def record(self, queued: float, serviced: float, now: float) -> None:
        """A task was answered after ``queued`` seconds waiting and ``serviced`` seconds with its worker."""
        self.completed += 1
        estimate = self.estimate
        self.estimate = serviced if estimate is None else estimate + ESTIMATE_WEIGHT * (serviced - estimate)
        self.queue_times.append(queued)  # (calls, not a loop over pairs: native calls under the compiled core)
        self.service_times.append(serviced)
        self.finished_at.append(now)
        second = math.floor(now)
        slot = second % _SECONDS
        seen, count = self._per_second[slot]
        self._per_second[slot] = (second, count + 1 if seen == second else 1)

    def rate(self, now: float) -> float:
        """Completions per second over the last :data:`RATE_WINDOW` seconds (whole seconds, this one included)."""
        oldest = math.floor(now) - _SECONDS
        return sum(count for second, count in self._per_second if second > oldest) / RATE_WINDOW

    def recent(self, n: int = RECENT) -> list[tuple[float, float, float]]:
        """The last ``n`` (at most :data:`RECENT`) completions, oldest first: when each ended, its queue time and
        its service time (the newest is completion number :attr:`completed`)."""
        count = min(n, len(self.finished_at))
        columns = (self.finished_at, self.queue_times, self.service_times)
        return list(zip(*(column.latest(count) for column in columns), strict=True))

    def ahead(self, after: int | None) -> float:
        """The time a task needs left to be dispatched: the estimated service time once ``after`` tasks have been
        answered (None: never; 0.0 until then)."""
        estimate = self.estimate
        if after is None or estimate is None or self.completed < after:
            return 0.0
        return estimate

    def turned_away(self, in_flight: int) -> None:
        """A task was answered ``504`` at once, its time left less than the estimate, while ``in_flight`` tasks
        of the service run: with none (no answer will come to correct the estimate), ease it."""
        if self.estimate is not None and not in_flight:
            self.estimate *= ESTIMATE_EASING

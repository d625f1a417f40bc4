"""Per-service statistics: counters, recent queue and service times, observed completion rate.

This module owns the bookkeeping behind the broker's status report. It is fed times by the core and reads
no clock; it knows nothing of sockets, workers or how tasks are dispatched. Memory is bounded and small
whatever happens, since any peer can make a service: the most recent :data:`SAMPLES` times are kept for
percentiles in arrays of doubles (:class:`Samples`), and completions are counted per second over the last
:data:`RATE_WINDOW` seconds.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Iterator

import attrs

SAMPLES = 1024
RATE_WINDOW = 10.0  # seconds over which the observed completion rate is measured
PERCENTILES = (50, 90, 99)
_SECONDS = int(RATE_WINDOW)


def percentiles(values: Iterable[float]) -> tuple[float | None, ...]:
    """Nearest-rank :data:`PERCENTILES` of ``values`` (None when there are none)."""
    ordered = sorted(values)
    if not ordered:
        return tuple(None for _ in PERCENTILES)
    return tuple(ordered[min(len(ordered) - 1, (len(ordered) * p) // 100)] for p in PERCENTILES)


class Samples:
    """The latest ``size`` values, in a ring of doubles (8 bytes each, allocated as they come)."""

    __slots__ = ("_next", "_ring", "_size")

    def __init__(self, size: int = SAMPLES) -> None:
        self._ring = array("d")
        self._next = 0
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


@attrs.define
class ServiceStats:
    """What happened to one service's tasks."""

    completed: int = 0
    failed: int = 0
    reissued: int = 0
    duplicates_dropped: int = 0
    expired: int = 0
    queue_times: Samples = attrs.field(factory=Samples)
    service_times: Samples = attrs.field(factory=Samples)
    # completions in each of the last RATE_WINDOW whole seconds: second % RATE_WINDOW -> (second, count)
    _per_second: list[tuple[int, int]] = attrs.field(factory=lambda: [(-1, 0)] * _SECONDS, repr=False)

    def record(self, queued: float, serviced: float, now: float) -> None:
        """A task was answered after ``queued`` seconds waiting and ``serviced`` seconds with its worker."""
        self.completed += 1
        self.queue_times.append(queued)
        self.service_times.append(serviced)
        second = math.floor(now)
        slot = second % _SECONDS
        seen, count = self._per_second[slot]
        self._per_second[slot] = (second, count + 1 if seen == second else 1)

    def rate(self, now: float) -> float:
        """Completions per second over the last :data:`RATE_WINDOW` seconds (whole seconds, this one included)."""
        oldest = math.floor(now) - _SECONDS
        return sum(count for second, count in self._per_second if second > oldest) / RATE_WINDOW

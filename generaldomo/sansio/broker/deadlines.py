"""The live tasks that carry a deadline, soonest first: when the broker must next answer one ``504``.

This module owns one data structure: a heap of ``(deadline, order, task)``. Tasks leave it lazily: a task that
was answered (or dropped) before its deadline stays in the heap until it comes up (and is skipped then), or
until such finished entries outnumber the unfinished ones, when the heap is rebuilt once (amortised O(1) per task,
never more than twice the live entries plus a constant). Adding a task costs O(log n). It reads no clock
(times are given) and knows nothing of services, workers or messages; it reads a task's ``deadline`` and
whether it is finished, and changes nothing in it.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["COMPACT_AFTER", "Deadlines"]

T = TypeVar("T")
COMPACT_AFTER = 64  # finished entries kept before a rebuild is considered


class Deadlines(Generic[T]):
    """Tasks by deadline; ``finished(task)`` says whether a task no longer needs its deadline kept."""

    __slots__ = ("_finished", "_heap", "_live", "_order")

    def __init__(self, finished: Callable[[T], bool]) -> None:
        self._heap: list[tuple[float, int, Any]] = []
        self._order = 0
        self._live = 0
        self._finished = finished

    def __len__(self) -> int:
        """Tasks added and not yet forgotten."""
        return self._live

    @property
    def slots(self) -> int:
        """Entries held, live and finished."""
        return len(self._heap)

    def add(self, deadline: float, task: T) -> None:
        """Keep ``task`` until ``deadline``."""
        self._order += 1
        heapq.heappush(self._heap, (deadline, self._order, task))
        self._live += 1

    def forget(self) -> None:
        """One task that was added has finished (the core says so as it forgets the task, whether or not its
        deadline came)."""
        self._live -= 1
        if len(self._heap) > COMPACT_AFTER and len(self._heap) > 2 * self._live:
            finished = self._finished
            self._heap = [entry for entry in self._heap if not finished(entry[2])]
            heapq.heapify(self._heap)

    def soonest(self) -> float | None:
        """The earliest deadline of a live task, or None (finished entries at the top are dropped first)."""
        heap, finished = self._heap, self._finished
        while heap and finished(heap[0][2]):
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def due(self, now: float) -> list[T]:
        """Take out the unfinished tasks whose deadline is ``now`` or earlier, soonest first."""
        heap, finished = self._heap, self._finished
        due: list[T] = []
        while heap and heap[0][0] <= now:
            task = heapq.heappop(heap)[2]
            if not finished(task):
                due.append(task)
        return due

"""A service's delayed tasks: those held off its queue until a time (a request's ``not_before``).

This module owns one data structure, the per-service timer heap: a heap of ``(until, order, task)`` and the
held tasks with their order. A task leaves it when its time comes (:meth:`Delayed.due`, soonest first, then in
the order they were held) or before (:meth:`Delayed.remove`: cancelled, expired, its client gone); an entry of a
task that left early stays in the heap until it comes up (skipped then) or until such entries outnumber the
held ones, when the heap is rebuilt once (amortised O(1) per task, never more than twice the held entries plus a
constant). Holding a task costs O(log n), and no held task delays any other task of its service: they are not
in its queue. It reads no clock (times are given) and knows nothing of workers, messages or what a task is
beyond its identity.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import Any

__all__ = ["COMPACT_AFTER", "Delayed"]

COMPACT_AFTER = 64  # stale entries kept before a rebuild is considered


class Delayed:
    """The tasks a service holds until a time; see the module docstring."""

    __slots__ = ("_heap", "_held", "_order")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Any]] = []
        self._held: dict[Any, int] = {}  # held task -> its entry's order (an entry with another is stale)
        self._order = 0

    def __len__(self) -> int:
        """How many tasks are held."""
        return len(self._held)

    def __bool__(self) -> bool:
        return bool(self._held)

    def __contains__(self, task: object) -> bool:
        return task in self._held

    def __iter__(self) -> Iterator[Any]:
        """The held tasks, in the order they were held."""
        return iter(self._held)

    @property
    def slots(self) -> int:
        """Entries in the heap, held and stale."""
        return len(self._heap)

    def hold(self, task: Any, until: float) -> None:
        """Hold ``task`` until ``until`` (held already: from now on until then)."""
        self._order += 1
        self._held[task] = self._order
        heapq.heappush(self._heap, (until, self._order, task))
        self._compact()

    def remove(self, task: Any) -> bool:
        """Let ``task`` go before its time; False when it is not held."""
        if self._held.pop(task, None) is None:
            return False
        self._compact()
        return True

    def discard(self, tasks: set[Any]) -> set[Any]:
        """Let every held task of ``tasks`` go; the others of ``tasks`` (not held here) are returned."""
        rest = {task for task in tasks if self._held.pop(task, None) is None}
        if len(rest) < len(tasks):
            self._compact()
        return rest

    def due(self, now: float) -> list[Any]:
        """Take out the tasks whose time is ``now`` or earlier, soonest first (then in the order they were held)."""
        heap, held = self._heap, self._held
        due: list[Any] = []
        while heap and heap[0][0] <= now:
            _, order, task = heapq.heappop(heap)
            if held.get(task) == order:
                del held[task]
                due.append(task)
        return due

    def next_due(self) -> float | None:
        """When the next held task's time comes, or None when none is held (stale entries on top dropped)."""
        heap, held = self._heap, self._held
        while heap and held.get(heap[0][2]) != heap[0][1]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def _compact(self) -> None:
        heap, held = self._heap, self._held
        if len(heap) > COMPACT_AFTER and len(heap) > 2 * len(held):
            self._heap = [entry for entry in heap if held.get(entry[2]) == entry[1]]
            heapq.heapify(self._heap)

"""A FIFO queue whose items can also leave from anywhere in O(1): a service's waiting workers and pending tasks.

This module owns that data structure and nothing else. Items are distinct and hashable (the core's records,
which hash by identity). An item removed from the middle stays in the underlying deque, marked, until it
reaches the head (where it is dropped) or the marked items outnumber the live ones (then the deque is rebuilt
once: amortised O(1) per removal, and never more than twice the live items plus a constant in memory). So a
client that queues many tasks and cancels them out of order, or a peer that registers many workers and drops
them in reverse, costs the broker O(1) per message, not O(queue). It offers the part of ``deque``'s interface a
service and its resolvers use (``append``, ``appendleft``, ``popleft``, ``remove``, ``[0]``, ``len``, iteration
over the live items).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Generic, TypeVar

__all__ = ["COMPACT_AFTER", "Queue"]

T = TypeVar("T")
COMPACT_AFTER = 64  # marked items kept before a rebuild is considered


class Queue(Generic[T]):
    """FIFO, with ``remove`` of any item in O(1) amortised; ``tracked`` queues also know their members, so that
    removing an item that is not there is a no-op (the others require it to be there)."""

    __slots__ = ("_items", "_marked", "_members")

    def __init__(self, tracked: bool = False) -> None:
        self._items: deque[T] = deque()
        self._marked: set[T] = set()
        self._members: set[T] | None = set() if tracked else None

    def __len__(self) -> int:
        return len(self._items) - len(self._marked)

    def __bool__(self) -> bool:
        return len(self._items) > len(self._marked)

    def __iter__(self) -> Iterator[T]:
        marked = self._marked
        return (item for item in self._items if item not in marked) if marked else iter(self._items)

    def __getitem__(self, index: int) -> T:
        """The head (``[0]``) or the tail (``[-1]``) only."""
        if index == 0:
            return self._items[0]  # the head is never a marked item
        if index == -1:
            return next(item for item in reversed(self._items) if item not in self._marked)
        raise IndexError("a service queue gives its head and its tail only")

    def __repr__(self) -> str:
        return f"Queue({list(self)!r})"

    def head(self) -> T | None:
        """The head, or None when the queue is empty (one call where ``if q`` and ``q[0]`` take two)."""
        items = self._items
        return items[0] if items else None  # the head is never a marked item

    @property
    def slots(self) -> int:
        """Entries held, live and marked: never more than twice the live ones plus :data:`COMPACT_AFTER`."""
        return len(self._items)

    # append, appendleft and popleft are on the broker's hot path: one check each when nothing is marked

    def append(self, item: T) -> None:
        if self._marked and item in self._marked:
            self._compact()  # its old, marked place must go first, or it would come back to life
        self._items.append(item)
        if self._members is not None:
            self._members.add(item)

    def appendleft(self, item: T) -> None:
        if self._marked and item in self._marked:
            self._compact()
        self._items.appendleft(item)
        if self._members is not None:
            self._members.add(item)

    def popleft(self) -> T:
        item = self._items.popleft()
        if self._members is not None:
            self._members.discard(item)
        if self._marked:
            self._skip_marked()
        return item

    def remove(self, item: T) -> None:
        """Take ``item`` out (it must be queued, unless the queue is ``tracked``)."""
        members = self._members
        if members is not None:
            if item not in members:
                return
            members.discard(item)
        items = self._items
        if items and items[-1] is item:
            items.pop()
        elif items and items[0] is item:
            items.popleft()
        else:
            self._marked.add(item)
            if len(self._marked) > COMPACT_AFTER and 2 * len(self._marked) > len(items):
                self._compact()
        self._skip_marked()

    def remove_all(self, doomed: set[T]) -> None:
        """Take every item of ``doomed`` out, in one pass."""
        self._items = deque(item for item in self._items if item not in doomed and item not in self._marked)
        self._marked.clear()
        if self._members is not None:
            self._members -= doomed

    def _skip_marked(self) -> None:
        items, marked = self._items, self._marked
        while marked and items and items[0] in marked:
            marked.discard(items.popleft())

    def _compact(self) -> None:
        marked = self._marked
        self._items = deque(item for item in self._items if item not in marked)
        marked.clear()

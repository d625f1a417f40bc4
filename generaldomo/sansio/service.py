"""The service management object (SMO): one queue of waiting workers and one of pending tasks.

This module owns how a service pairs a waiting worker with a pending task. The default pairing is Majordomo's:
the oldest pending task goes to the worker that has waited longest. Resolvers that bias the choice (priorities,
capabilities) subclass :class:`Service` and override :meth:`Service.next_pair`. It does not know about
sockets, clocks, dialects or how a description maps to a service (that is the resolver's job).

Workers and tasks are the broker core's records; a service reads only their ``description`` (and a
worker's ``task``, None while it is idle) and must not change them.

Every operation costs O(1) however long the queues, so that no client can make the broker slow by queueing many
tasks and cancelling them out of order: a task dropped from the middle of ``pending`` stays there, marked, until
it reaches the head or the marked ones are as many as the live ones (then the queue is rebuilt once, amortised
O(1)). ``pending`` may so hold dropped tasks: :meth:`Service.live` iterates the queued ones, :attr:`Service.queued`
counts them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any, Protocol

from generaldomo.sansio.flow import Flow
from generaldomo.sansio.stats import ServiceStats

_COMPACT_AFTER = 64  # dropped tasks kept marked in ``pending`` before a rebuild is considered


class Described(Protocol):
    """What a service may read of a worker or a task."""

    description: bytes


class Service:
    """A named queue of waiting workers and pending tasks (FIFO on both sides)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.waiting: deque[Any] = deque()
        self.pending: deque[Any] = deque()
        self._dropped: set[Any] = set()  # tasks dropped from the middle of ``pending``, skipped when reached
        self.workers: set[Any] = set()
        self.flow = Flow()
        self.stats = ServiceStats()

    def __repr__(self) -> str:
        counts = f"{len(self.workers)} workers, {len(self.waiting)} waiting, {self.queued} pending"
        return f"<Service {self.name!r}: {counts}>"

    def join(self, worker: Described) -> None:
        """Register ``worker`` as serving this service (waiting or busy)."""
        self.workers.add(worker)

    def leave(self, worker: Described) -> None:
        """Forget ``worker``; it no longer serves this service."""
        self.workers.discard(worker)
        self.unwait(worker)

    def wait(self, worker: Described) -> None:
        """Queue ``worker`` as ready for a task."""
        self.waiting.append(worker)

    def unwait(self, worker: Described) -> None:
        """Take ``worker`` off the waiting queue if it is there."""
        try:
            self.waiting.remove(worker)
        except ValueError:
            pass

    @property
    def queued(self) -> int:
        """How many tasks are pending (not counting dropped ones still in ``pending``)."""
        return len(self.pending) - len(self._dropped)

    def live(self) -> Iterator[Any]:
        """The pending tasks, oldest first, without the dropped ones."""
        dropped = self._dropped
        return (task for task in self.pending if task not in dropped) if dropped else iter(self.pending)

    def push(self, task: Described, *, front: bool = False) -> None:
        """Queue ``task``; a reissued task goes to the ``front``."""
        if task in self._dropped:  # its old place is still marked: remove it first, or it would come back
            self._compact()
        if front:
            self.pending.appendleft(task)
        else:
            self.pending.append(task)

    def drop(self, task: Described) -> None:
        """Take ``task``, which is pending, off the queue: at once at either end, else by marking it."""
        pending = self.pending
        if pending and pending[-1] is task:
            pending.pop()
        elif pending and pending[0] is task:
            pending.popleft()
        else:
            self._dropped.add(task)
            if len(self._dropped) > _COMPACT_AFTER and 2 * len(self._dropped) > len(pending):
                self._compact()
        self._skip_dropped()

    def _skip_dropped(self) -> None:
        """Let the head of ``pending`` be a live task (or nothing)."""
        pending, dropped = self.pending, self._dropped
        while dropped and pending and pending[0] in dropped:
            dropped.discard(pending.popleft())

    def _compact(self) -> None:
        """Rebuild ``pending`` without the dropped tasks."""
        dropped = self._dropped
        self.pending = deque(task for task in self.pending if task not in dropped)
        dropped.clear()

    def discard(self, tasks: set[Any]) -> None:
        """Take every task in ``tasks`` off the pending queue, in one pass."""
        dropped = self._dropped
        self.pending = deque(task for task in self.pending if task not in tasks and task not in dropped)
        dropped.clear()

    def put_back(self, worker: Described, task: Described) -> None:
        """Undo :meth:`next_pair` when flow control holds the pair back: both go to the front of their queues."""
        self.waiting.appendleft(worker)
        self.push(task, front=True)

    def can_serve(self, description: bytes) -> bool:
        """True when a registered worker could serve a request with ``description`` (for ``mmi.service``)."""
        return bool(self.workers)

    def next_pair(self) -> tuple[Any, Any] | None:
        """Take and return the next ``(worker, task)`` to dispatch, or None when nothing can be paired."""
        if self.waiting and self.pending:  # the head of pending is live (drop() sees to it)
            task = self.pending.popleft()
            self._skip_dropped()
            return self.waiting.popleft(), task
        return None

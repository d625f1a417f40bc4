"""The service management object (SMO): one queue of waiting workers and one of pending tasks.

This module owns how a service pairs a waiting worker with a pending task. The default pairing is Majordomo's:
the oldest pending task goes to the worker that has waited longest. Resolvers that bias the choice (priorities,
capabilities) subclass :class:`Service` and override :meth:`Service.next_pair`. It does not know about
sockets, clocks, dialects or how a description maps to a service (that is the resolver's job).

Workers and tasks are the broker core's records; a service reads only their ``description`` (and a
worker's ``task``, None while it is idle) and must not change them.

Both queues are :class:`~generaldomo.sansio.queues.Queue` objects (deque-like, FIFO, with O(1) removal from
anywhere), so that no peer can make the broker slow by queueing many tasks, or registering many workers, and
taking them away out of order.
"""

from __future__ import annotations

from typing import Any, Protocol

from generaldomo.sansio.flow import Flow
from generaldomo.sansio.queues import Queue
from generaldomo.sansio.stats import ServiceStats


class Described(Protocol):
    """What a service may read of a worker or a task."""

    description: bytes


class Service:
    """A named queue of waiting workers and pending tasks (FIFO on both sides)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.waiting: Queue[Any] = Queue(tracked=True)  # a worker may be asked to leave when it is not waiting
        self.pending: Queue[Any] = Queue()  # the core drops only queued tasks (and a set per task costs memory)
        self.workers: set[Any] = set()
        self.flow = Flow()
        self.stats = ServiceStats()

    def __repr__(self) -> str:
        counts = f"{len(self.workers)} workers, {len(self.waiting)} waiting, {len(self.pending)} pending"
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
        self.waiting.remove(worker)

    def push(self, task: Described, *, front: bool = False) -> None:
        """Queue ``task``; a reissued task goes to the ``front``."""
        if front:
            self.pending.appendleft(task)
        else:
            self.pending.append(task)

    def drop(self, task: Described) -> None:
        """Take ``task``, which is pending, off the queue."""
        self.pending.remove(task)

    def discard(self, tasks: set[Any]) -> None:
        """Take every task in ``tasks`` off the pending queue, in one pass."""
        self.pending.remove_all(tasks)

    def put_back(self, worker: Described, task: Described | None = None) -> None:
        """Undo :meth:`next_pair` when flow control holds the pair back: both go to the front of their queues (a
        ``task`` of None: the task is not dispatched at all, and only the worker goes back)."""
        self.waiting.appendleft(worker)
        if task is not None:
            self.pending.appendleft(task)

    def can_serve(self, description: bytes) -> bool:
        """True when a registered worker could serve a request with ``description`` (for ``mmi.service``)."""
        return bool(self.workers)

    def next_pair(self) -> tuple[Any, Any] | None:
        """Take and return the next ``(worker, task)`` to dispatch, or None when nothing can be paired."""
        if self.waiting and self.pending:
            return self.waiting.popleft(), self.pending.popleft()
        return None

"""The service management object (SMO): one queue of waiting workers and one of pending tasks.

This module owns how a service pairs a waiting worker with a pending task. The default pairing: the task its
pending queue offers next (fair shares between tenants, then priorities: :mod:`generaldomo.sansio.broker.flow.fair`)
goes to the worker that has waited longest. Resolvers that bias the choice (capabilities) subclass
:class:`Service` and override :meth:`Service.next_pair`. It does not know about sockets, clocks, dialects or
how a description maps to a service (that is the resolver's job).

Workers and tasks are the broker core's records; a service reads only their ``description`` (and a
worker's ``task``, None while it is idle; a task's ``tenant`` and ``priority``) and must not change them
(the pending queue keeps its own mark on each task, ``order``).

The waiting queue is a :class:`~generaldomo.sansio.queues.Queue` (deque-like, FIFO, with O(1) removal from
anywhere), the pending one a :class:`~generaldomo.sansio.broker.flow.fair.FairQueue` of such queues, so that no peer can
make the broker slow by queueing many tasks, or registering many workers, and taking them away out of order.
A task held until a time (its ``not_before``) waits beside the pending queue, in the service's timer heap
(:class:`~generaldomo.sansio.broker.services.delayed.Delayed`), and joins the queue when its time comes
(:meth:`Service.release_delayed`); taking a task off the service takes it from either.
"""

from __future__ import annotations

from typing import Any, Protocol

from generaldomo.sansio.broker.flow.fair import FairQueue
from generaldomo.sansio.broker.flow.flow import Flow, FlowLimits
from generaldomo.sansio.broker.services.delayed import Delayed
from generaldomo.sansio.broker.services.stats import ServiceStats
from generaldomo.sansio.queues import Queue
from generaldomo.sansio.subclassing import mypyc_attr

__all__ = ["Described", "Service"]


class Described(Protocol):
    """What a service may read of a worker or a task."""

    description: bytes


@mypyc_attr(allow_interpreted_subclasses=True)  # (resolvers' services subclass it)
class Service:
    """A named queue of waiting workers and pending tasks (FIFO on both sides).

    Args:
        name: the service's name (what ``mmi.service``, the status and the flow limits call it).

    Example::

        class GpuService(Service):  # a resolver's own service: which queued task a worker may take
            def can_serve(self, description: bytes) -> bool:
                return any(b"gpu" in worker.description for worker in self.workers)
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.waiting: Queue[Any] = Queue(tracked=True)  # a worker may be asked to leave when it is not waiting
        self.pending = FairQueue()  # the core drops only queued tasks
        self.delayed = Delayed()  # queued tasks held until their time, off the pending queue
        self.workers: set[Any] = set()
        self.flow = Flow()
        self.stats = ServiceStats()

    def __repr__(self) -> str:
        counts = f"{len(self.workers)} workers, {len(self.waiting)} waiting, {len(self.pending)} pending"
        if self.delayed:
            counts += f", {len(self.delayed)} delayed"
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

    def hold(self, task: Described, until: float) -> None:
        """Hold ``task`` off the queue until ``until``, when :meth:`release_delayed` queues it."""
        self.delayed.hold(task, until)

    def drop(self, task: Described) -> None:
        """Take ``task``, which is pending or held, off the queue."""
        if not (self.delayed and self.delayed.remove(task)):
            self.pending.remove(task)

    def discard(self, tasks: set[Any]) -> None:
        """Take every task in ``tasks`` (each pending or held) off the queue, in one pass."""
        self.pending.remove_all(self.delayed.discard(tasks) if self.delayed else tasks)

    def release_delayed(self, now: float) -> list[Any]:
        """Queue the held tasks whose time is ``now`` or earlier (at the back, soonest first); return them.

        Args:
            now: the time.
        """
        due = self.delayed.due(now)
        for task in due:
            self.pending.append(task)
        return due

    def put_back(self, worker: Described, task: Described | None = None) -> None:
        """Undo :meth:`next_pair` when flow control holds the pair back: both go to the front of their queues (a
        ``task`` of None: the task is not dispatched at all, and only the worker goes back).

        Args:
            worker: the worker of the pair.
            task: the task of the pair (None: it was not taken).
        """
        self.waiting.appendleft(worker)
        if task is not None:
            self.pending.appendleft(task)

    def apply_flow(self, limits: FlowLimits) -> None:
        """Enforce ``limits`` from now on: the flow's, and the tenants' weights and limits in the queue."""
        self.flow.apply(limits)
        self.pending.configure(limits.tenants)

    def started(self, task: Described, now: float) -> None:
        """``task`` (from :meth:`next_pair`) was dispatched at ``now``: its tenant is charged."""
        self.pending.started(task, now)

    def stopped(self, task: Described) -> None:
        """``task`` left flight: answered, failed, lost with its worker, or sent back by it."""
        self.pending.stopped(task)

    def release_due(self, now: float) -> float | None:
        """Let tenants held by their rate take part again when their time has come; when the next one's comes.

        Args:
            now: the time.
        """
        pending = self.pending
        if not pending.rate_held:
            return None
        pending.release_due(now)
        return pending.next_release()

    def can_serve(self, description: bytes) -> bool:
        """True when a registered worker could serve a request with ``description`` (for ``mmi.service``)."""
        return bool(self.workers)

    def next_pair(self) -> tuple[Any, Any] | None:
        """Take and return the next ``(worker, task)`` to dispatch, or None when nothing can be paired."""
        if self.waiting and self.pending.ready:
            return self.waiting.popleft(), self.pending.popleft()
        return None

"""The broker core's expiry: the tasks answered ``504`` because time ran out.

This module owns the live tasks that carry a deadline (soonest first, :mod:`generaldomo.sansio.broker.deadlines`) and
what becomes of a task whose deadline passes (a queued one leaves its queue, a running one is answered now and
its worker told), or that waited in its queue beyond ``queue_timeout`` (or ``anonymous_queue_timeout``, for a
request without an id); and the tasks a dispatch finds too late: past their deadline, or with less time left than
their service's estimated service time (deadline-aware dispatch, ``deadline_estimate_after``: answered ``504``
at once rather than run for nobody). A task is *completed* only through the core, which it reaches only through
:class:`Core`, what it may call of it. It knows nothing of sockets, clocks or frames' layout.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from generaldomo.sansio.broker.accounts.ledger import CHARGED
from generaldomo.sansio.broker.core.counters import Counters
from generaldomo.sansio.broker.core.turns import Tasks, Turn
from generaldomo.sansio.broker.deadlines import Deadlines
from generaldomo.sansio.broker.records import Task, WorkerRecord
from generaldomo.sansio.broker.services.service import Service
from generaldomo.sansio.broker.states import TASK, WORKER, Step, TaskState
from generaldomo.sansio.wire import protocol
from generaldomo.sansio.wire.events import Frame

__all__ = ["HOLDINGS", "PAST_DEADLINE", "UNREACHABLE", "Core", "Expiry", "unreachable"]

HOLDINGS = {
    "_deadlines": CHARGED + "tasks (finished entries compacted)"
}  # (see generaldomo.sansio.broker.core.HOLDINGS)

PAST_DEADLINE = b"the request's deadline passed before a worker took it"
RAN_PAST_DEADLINE = b"the request's deadline passed while a worker ran it"
UNREACHABLE = "the request's deadline leaves less than its service's estimated service time"


def unreachable(left: float, estimate: float) -> bytes:
    """The reason of a ``504`` at once for a task with ``left`` seconds, less than the ``estimate``."""
    return f"{UNREACHABLE} ({max(left, 0.0):.3f} s left, {estimate:.3f} s estimated)".encode()


_T_CANCEL, _W_CANCEL = TASK.row(Step.CANCEL), WORKER.row(Step.CANCEL)


class Core(Tasks, Protocol):
    """What the expiry may read and call of the core: its tables of live tasks, and how a task is completed or
    answered and its worker told."""

    def _reply(self, task: Task, status: bytes, body: Sequence[Frame], meta: bytes, turn: Turn) -> None: ...
    def _tell_cancel(self, worker: WorkerRecord, task: Task, turn: Turn) -> None: ...


class Expiry:
    """Deadlines and queue timeouts (see the module docstring); ``core`` is the broker core it serves."""

    def __init__(self, core: Core, counters: Counters) -> None:
        self._core = core
        self._counters = counters
        self._deadlines: Deadlines[Task] = Deadlines(_finished)  # the live tasks that carry a deadline

    def __len__(self) -> int:
        """How many entries the deadlines hold (finished ones until they are compacted)."""
        return len(self._deadlines)

    def add(self, deadline: float, task: Task) -> None:
        """``task`` must be answered by ``deadline``."""
        self._deadlines.add(deadline, task)

    def forget(self) -> None:
        """A task that carried a deadline finished (its entry is compacted in time)."""
        self._deadlines.forget()

    def soonest(self) -> float | None:
        """When the next deadline passes, or None."""
        return self._deadlines.soonest() if self._deadlines else None

    def expire_deadlines(self, turn: Turn) -> None:
        """Answer 504 to the live tasks whose deadline has passed: a queued one leaves its queue; a running one
        is answered now and its worker told (its result will be dropped, as for a cancel)."""
        now = turn.now
        for task in self._deadlines.due(now):
            if task.state is TaskState.CANCELLED:
                continue  # nobody waits for it already
            self._counters.past_deadline += 1
            if task.state is TaskState.QUEUED:
                self._core._complete(task, protocol.EXPIRED, [PAST_DEADLINE], turn)
                continue
            worker = task.worker
            task.service.stats.expired += 1
            self._counters.completed += 1
            self._counters.expired += 1
            served = now - task.dispatched if task.dispatched is not None else 0.0
            waited = now - task.enqueued - served
            self._core._reply(task, protocol.EXPIRED, [RAN_PAST_DEADLINE], protocol.timing(waited, served), turn)
            if task.key is not None and self._core._by_request.get(task.key) is task:
                del self._core._by_request[task.key]  # a re-ask gets the kept 504
            task.state = _T_CANCEL[task.state]
            if worker is not None:
                worker.state = _W_CANCEL[worker.state]
                self._core._tell_cancel(worker, task, turn)

    def too_late(self, task: Task, left: float, turn: Turn) -> None:
        """Answer ``task``, taken off its queue by a dispatch, ``504``: ``left`` seconds before its deadline,
        none (past it) or less than its service's estimated service time."""
        if left <= 0:
            self._counters.past_deadline += 1
            self._core._complete(task, protocol.EXPIRED, [PAST_DEADLINE], turn, dequeued=True)
            return
        stats = task.service.stats
        self._counters.deadline_unreachable += 1
        reason = unreachable(left, stats.estimate or 0.0)
        stats.turned_away(task.service.flow.in_flight)
        self._core._complete(task, protocol.EXPIRED, [reason], turn, dequeued=True)

    def expire_queued(self, enqueued_before: float, turn: Turn, *, anonymous: bool = False) -> None:
        """Answer 504 to queued requests that have waited since before ``enqueued_before`` (``anonymous``: only
        those without a request id)."""
        stale: dict[Service, set[Task]] = {}
        for task in self._core._tasks.values():  # oldest first
            if task.enqueued >= enqueued_before:
                break
            held = task.not_before is not None  # not in its queue yet: its wait begins when its time comes
            if task.state is TaskState.QUEUED and not held and not (anonymous and task.key is not None):
                stale.setdefault(task.service, set()).add(task)
        for service, tasks in stale.items():
            service.discard(tasks)
            for task in tasks:
                reason = b"no worker took the request in time"
                self._core._complete(task, protocol.EXPIRED, [reason], turn, dequeued=True)


def _finished(task: Task) -> bool:
    return task.state is TaskState.DONE

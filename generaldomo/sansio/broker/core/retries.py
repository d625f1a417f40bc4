"""The broker core's retries: a worker's failed answer tried again, after a backoff, within the request's deadline.

This module owns the tasks held for a retry's backoff (soonest first, :mod:`generaldomo.sansio.broker.deadlines`) and
the decision on a worker's final answer (its service's retry policy, :mod:`generaldomo.sansio.broker.flow.retry`):
an answer the policy retries makes the running task RETRYING (out of flight, its worker free, its client not
answered), held until its backoff ends, then queued again at the head of its tenant's queue, as a reissue is: a new
attempt of the same task (its id, its client, its deadline), never a second answer. An answer the policy would retry
goes to the client as it is once the task has had its retries (``retries_exhausted``), and is answered ``504`` at
once, as at its deadline, when the backoff would end at or past the request's deadline (``retries_past_deadline``):
no retry starts that could not finish in time. Only GDP workers' answers are retried (MDP workers send no status).
The jitter of each backoff is drawn from the core's random source. A held task is charged like any live one (its
client's connection, the queue budgets); one cancelled, expired or abandoned while held leaves the heap lazily. It
reaches the core only through :class:`Core`; it knows nothing of sockets, clocks or frames' layout.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from generaldomo.sansio.broker.accounts.ledger import CHARGED
from generaldomo.sansio.broker.core.counters import Counters
from generaldomo.sansio.broker.core.turns import Tasks, Turn
from generaldomo.sansio.broker.deadlines import Deadlines
from generaldomo.sansio.broker.flow.retry import DEFAULT
from generaldomo.sansio.broker.records import Task
from generaldomo.sansio.broker.services.service import Service
from generaldomo.sansio.broker.states import TASK, Step, TaskState
from generaldomo.sansio.wire import protocol
from generaldomo.sansio.wire.events import Dialect

__all__ = ["HOLDINGS", "PAST_RETRY", "Core", "Retries"]

HOLDINGS = {"_held": CHARGED + "tasks (finished entries compacted)"}  # (see generaldomo.sansio.broker.core.HOLDINGS)

_T_RETRY, _T_REISSUE = TASK.row(Step.RETRY), TASK.row(Step.REISSUE)
_DRAW_BYTES = 4
PAST_RETRY = b"the request's deadline would pass before its retry could start"


class Core(Tasks, Protocol):
    """What the retries may read and call of the core: its tables of live tasks, how a task is completed, and
    dispatch."""

    def _dispatch(self, service: Service, turn: Turn) -> None: ...


class Retries:
    """Tasks held for a retry's backoff (see the module docstring); ``core`` is the broker core it serves,
    ``random`` its source of random bytes (the jitter)."""

    def __init__(self, core: Core, counters: Counters, random: Callable[[int], bytes]) -> None:
        self._core = core
        self._counters = counters
        self._random = random
        self._held: Deadlines[Task] = Deadlines(_not_held)  # the tasks held, by the end of their backoff

    def __len__(self) -> int:
        """Tasks held now."""
        return len(self._held)

    def take(self, task: Task, status: bytes, body: Sequence[bytes], dialect: Dialect, turn: Turn) -> bool:
        """The running ``task``'s worker answered ``status`` (a 5xx) and ``body`` (the caller has freed the worker):
        True when that answer is the retries' business (the task held for a retry, or answered ``504`` as its
        backoff would end past its deadline); False when the caller completes the task with it."""
        if dialect is not Dialect.GDP:
            return False
        service = task.service
        policy = service.flow.limits.retry or DEFAULT
        if not policy.retried(status, body, 0):
            return False  # not an answer it retries
        if not policy.retried(status, body, task.retries):
            self._counters.retries_exhausted += 1
            return False
        now = turn.now
        due = now + policy.wait(task.retries + 1, int.from_bytes(self._random(_DRAW_BYTES)) / 2 ** (8 * _DRAW_BYTES))
        if task.deadline is not None and due >= task.deadline:
            self._counters.retries_past_deadline += 1
            self._counters.past_deadline += 1
            self._core._complete(task, protocol.EXPIRED, [PAST_RETRY], turn, dispatch=False)
            return True
        task.state = _T_RETRY[task.state]
        task.worker = None
        service.flow.finished(task.size)
        service.stopped(task)
        task.retries += 1
        self._held.add(due, task)
        service.stats.retried += 1
        service.stats.retrying += 1
        self._counters.retried += 1
        return True

    def due(self) -> float | None:
        """When the next held task's backoff ends, or None."""
        return self._held.soonest() if len(self._held) else None

    def release(self, turn: Turn) -> None:
        """Queue again, at the head of their tenants' queues, the held tasks whose backoff has ended, and dispatch."""
        services: dict[Service, None] = {}
        for task in self._held.due(turn.now):
            self._held.forget()
            task.state = _T_REISSUE[task.state]
            task.service.stats.retrying -= 1
            task.service.push(task, front=True)
            services[task.service] = None
        for service in services:
            self._core._dispatch(service, turn)

    def forget(self, task: Task) -> None:
        """``task``, held, finished (cancelled, expired, abandoned): its entry is compacted in time."""
        self._held.forget()
        task.service.stats.retrying -= 1


def _not_held(task: Task) -> bool:
    return task.state is not TaskState.RETRYING

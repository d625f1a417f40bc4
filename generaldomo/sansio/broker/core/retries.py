"""The broker core's retries: a worker's failed answer tried again, after a backoff, within the request's deadline.

This module owns the decision on a worker's final answer that is a 5xx (its service's retry policy,
:mod:`generaldomo.sansio.broker.flow.retry`): an answer the policy retries leaves the running task QUEUED again
(out of flight, its worker free, its client not answered), held as a delayed task
(:mod:`~generaldomo.sansio.broker.core.delays`: off its queue, holding no other task back) until its backoff
ends, when it joins its queue again: a new attempt of the same task (its id, its client, its deadline), never a
second answer, and not a run lost with its worker (``max_attempts`` counts those alone). An answer the policy would
retry goes to the client as it is once the task has had its retries
(``retries_exhausted``), and is answered ``504`` at once, as at its deadline, when the backoff would end at or past
the request's deadline (``retries_past_deadline``): no retry starts that could not finish in time. Only GDP
workers' answers are retried (MDP workers send no status). The jitter of each backoff is drawn from the core's
random source. A held task is a queued one in all else (charged to its client's connection and the queue budgets;
cancelled, expired, its client gone, abandoned alike). It reaches the core only through :class:`Core`; it knows
nothing of sockets, clocks or frames' layout.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from generaldomo.sansio.broker.core.counters import Counters
from generaldomo.sansio.broker.core.delays import Delays
from generaldomo.sansio.broker.core.turns import Tasks, Turn
from generaldomo.sansio.broker.flow.retry import DEFAULT
from generaldomo.sansio.broker.records import Task
from generaldomo.sansio.broker.states import TASK, Step
from generaldomo.sansio.wire import protocol
from generaldomo.sansio.wire.events import Dialect, Frame

__all__ = ["PAST_RETRY", "Core", "Retries"]

_T_REISSUE = TASK.row(Step.REISSUE)
_DRAW_BYTES = 4
PAST_RETRY = b"the request's deadline would pass before its retry could start"


class Core(Tasks, Protocol):
    """What the retries may read and call of the core: its tables of live tasks, and how a task is completed."""


class Retries:
    """A worker's failed answers retried (see the module docstring); ``core`` is the broker core it serves,
    ``delays`` its part that holds tasks until a time, ``random`` its source of random bytes (the jitter)."""

    def __init__(self, core: Core, counters: Counters, delays: Delays, random: Callable[[int], bytes]) -> None:
        self._core = core
        self._counters = counters
        self._delays = delays
        self._random = random

    def take(self, task: Task, status: bytes, body: Sequence[Frame], dialect: Dialect, turn: Turn) -> bool:
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
        draw = int.from_bytes(self._random(_DRAW_BYTES)) / 2 ** (8 * _DRAW_BYTES)
        due = now + policy.wait(task.retries + 1, draw)
        if task.deadline is not None and due >= task.deadline:
            self._counters.retries_past_deadline += 1
            self._counters.past_deadline += 1
            self._core._complete(task, protocol.EXPIRED, [PAST_RETRY], turn, dispatch=False)
            return True
        task.state = _T_REISSUE[task.state]
        task.worker = None
        task.attempts -= 1  # (max_attempts counts the runs lost with their workers: a retry is not one)
        service.flow.finished(task.size)
        service.stopped(task)
        task.retries += 1
        service.stats.retried += 1
        self._counters.retried += 1
        self._delays.hold(task, due, counted=False)
        return True

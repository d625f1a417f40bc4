"""The broker core's traced answers: what the IO layer needs to record a request's broker spans.

This module owns the record of a traced task's life in the broker, :class:`Answered` (its trace context, its
service, when it was queued, dispatched and answered, and the answer's status), made when the core answers a
task whose request carries a trace context, while :class:`Spans` is on (the broker's ``--trace-spans``). The
records wait in a list the IO layer takes after each turn (:meth:`Spans.take`), which records the spans with
those times: nothing is kept of a task after its answer but its record until then, and nothing is made for a
request without a trace context or while it is off. Times are the turns' ``now`` (the core's clock); it reads
no clock, and knows nothing of OpenTelemetry, sockets or frames.
"""

from __future__ import annotations

import dataclasses

from generaldomo.sansio.broker.records import Task
from generaldomo.sansio.wire.tracecontext import TraceContext

__all__ = ["Answered", "Spans"]


@dataclasses.dataclass(frozen=True, slots=True)
class Answered:
    """A traced task, answered: its request's trace context, its service's name, when it was queued (its last
    time in the queue), dispatched (its last attempt's; None: answered without a worker, e.g. expired in the
    queue) and answered, in the core's clock, and the answer's status."""

    trace: TraceContext
    service: str
    queued: float
    dispatched: float | None
    answered: float
    status: bytes


class Spans:
    """The traced answers of the turns since the IO layer last took them (see the module docstring); off until
    ``on`` is set."""

    __slots__ = ("_answered", "on")

    def __init__(self) -> None:
        self.on = False
        self._answered: list[Answered] = []

    def answered(self, task: Task, trace: TraceContext, status: bytes, now: float) -> None:
        """``task``, whose request carries ``trace``, is answered ``status`` at ``now``."""
        self._answered.append(Answered(trace, task.service.name, task.enqueued, task.dispatched, now, status))

    def take(self) -> list[Answered]:
        """The traced answers made since the last call, oldest first (and forget them)."""
        answered, self._answered = self._answered, []
        return answered

    def __bool__(self) -> bool:
        return bool(self._answered)

"""The broker core's delayed tasks: requests held off their service's queue until their ``not_before``.

This module owns what happens to a task accepted with a ``not_before`` (a delay the request's fields give): it is
*held* in its service's timer heap (:class:`~generaldomo.sansio.broker.services.delayed.Delayed`), apart from the
queue, so that it holds no other task back; it stays QUEUED meanwhile, with its bytes charged like any queued
task's, and leaves as a queued task does (cancelled, its deadline, its client gone: the service takes it from the
heap or the queue alike). When its time comes, a dispatch of its service *releases* it: it joins the back of the
queue as if accepted then (its ``enqueued`` time, and its place in the core's order of acceptance, which the queue
timeout reads), and is dispatched like any other. The core is told when to dispatch the service again (the next
held task's time). A delayed requeue (a retry's backoff) holds a task the same way. It reads no clock: times are
the turn's. It reaches the core only through :class:`Core`, and knows nothing of sockets or frames.
"""

from __future__ import annotations

from typing import Protocol

from generaldomo.sansio.broker.core.counters import Counters
from generaldomo.sansio.broker.core.turns import Tasks
from generaldomo.sansio.broker.records import Task
from generaldomo.sansio.broker.services.service import Service

__all__ = ["Core", "Delays"]


class Core(Tasks, Protocol):
    """What the delays may call of the core: its table of live tasks, and when to dispatch a service again."""

    def _again(self, service: Service, when: float) -> None: ...


class Delays:
    """Tasks held until a time (see the module docstring); ``core`` is the broker core it serves."""

    def __init__(self, core: Core, counters: Counters) -> None:
        self._core = core
        self._counters = counters

    def hold(self, task: Task, until: float, *, counted: bool = True) -> None:
        """Hold ``task`` (QUEUED, off its queue) until ``until``; its service is dispatched again then
        (``counted``: as a delayed request; a retry is counted as one by the retries)."""
        task.not_before = until
        task.service.hold(task, until)
        if counted:
            self._counters.delayed += 1
        self._core._again(task.service, until)

    def release(self, service: Service, now: float) -> None:
        """Queue ``service``'s held tasks whose time has come, as if accepted ``now``; the service is dispatched
        again when the next one's comes."""
        tasks = self._core._tasks
        for task in service.release_delayed(now):
            task.not_before = None
            task.enqueued = now
            del tasks[task.id]  # last in the order of acceptance, with the latest time
            tasks[task.id] = task
        due = service.delayed.next_due()
        if due is not None:
            self._core._again(service, due)

"""The life cycles of the core's workers and tasks: their states and the moves between them.

This module owns the transition tables (:class:`~generaldomo.sansio.machine.Machine`, keyed by (state,
step)); :mod:`generaldomo.sansio.broker.core` moves its records only through them, so a record in a state the table
does not allow for a step is a bug that fails loudly (``IllegalTransition``, naming machine, state and step). It
knows nothing of messages, services or clocks.

Worker: registers WAITING (queued on its service); a dispatch makes it BUSY (it holds a task); its result
makes it WAITING again. A cancel of the task it holds makes it FINISHING: it still works on the task, whose
result will be dropped, and it waits again once that result comes. Leaving (DISCONNECT, silence, a new
READY) makes it GONE from any state.

Task: accepted QUEUED; a dispatch makes it RUNNING; losing its worker puts it back QUEUED (reissue). A cancel
ends a queued task (DONE) and makes a running one CANCELLED (its worker's result will be dropped). Finishing
(answered, expired, failed, dropped) makes it DONE from any live state.
"""

from __future__ import annotations

import enum
from typing import Final

from generaldomo.sansio.machine import Machine

__all__ = ["IN_FLIGHT", "TASK", "WORKER", "Step", "TaskState", "WorkerState"]


class WorkerState(enum.Enum):
    """Where a registered worker is in its life cycle; the values appear in the status report."""

    WAITING = "waiting"
    BUSY = "busy"
    FINISHING = "finishing"
    GONE = "gone"

    # members are singletons: the C identity hash serves, not Enum's own (it hashes the name in Python at every dict
    # or set lookup); without both enums here, the core costs 6,100 instructions more per request and reply, 3.2 %
    # (``python -m bench.peer_instructions --role core``, 2026-12-07)
    __hash__ = object.__hash__


class TaskState(enum.Enum):
    """Where a task is between acceptance and its single answer."""

    QUEUED = "queued"
    RUNNING = "running"
    CANCELLED = "cancelled"
    DONE = "done"

    __hash__ = object.__hash__  # (as WorkerState's)


class Step(enum.Enum):
    """What happens to a worker or a task."""

    DISPATCH = "dispatch"
    RESULT = "result"
    CANCEL = "cancel"
    REISSUE = "reissue"
    LEAVE = "leave"
    FINISH = "finish"


W, T = WorkerState, TaskState
WORKER: Final[Machine[WorkerState, Step]] = Machine(
    "worker",
    {
        (W.WAITING, Step.DISPATCH): W.BUSY,
        (W.BUSY, Step.RESULT): W.WAITING,
        (W.FINISHING, Step.RESULT): W.WAITING,
        (W.BUSY, Step.CANCEL): W.FINISHING,
        (W.WAITING, Step.LEAVE): W.GONE,
        (W.BUSY, Step.LEAVE): W.GONE,
        (W.FINISHING, Step.LEAVE): W.GONE,
    },
)
TASK: Final[Machine[TaskState, Step]] = Machine(
    "task",
    {
        (T.QUEUED, Step.DISPATCH): T.RUNNING,
        (T.RUNNING, Step.REISSUE): T.QUEUED,
        (T.QUEUED, Step.CANCEL): T.DONE,
        (T.RUNNING, Step.CANCEL): T.CANCELLED,
        (T.QUEUED, Step.FINISH): T.DONE,
        (T.RUNNING, Step.FINISH): T.DONE,
        (T.CANCELLED, Step.FINISH): T.DONE,
    },
)
IN_FLIGHT: Final = frozenset({T.RUNNING, T.CANCELLED})  # the task occupies a worker and a place in its flow

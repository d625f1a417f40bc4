"""What a worker's handler may know of the task it runs: its deadline, whether it was cancelled, its trace context.

Rules: a handler whose second positional parameter has no default (``def handle(payload, task)``) is called
with a :class:`TaskContext`; any other handler is called with the payload alone, as before. The deadline is the
client's (its request's timeout, by default, for generaldomo clients), carried by the broker to workers that
understand it, on this process's ``time.monotonic()`` clock. ``cancelled`` turns true when the broker says
nobody waits for the result any more (the client cancelled, or the deadline passed): a cooperative handler
stops early (whatever it returns is dropped). ``trace`` is the request's W3C trace context, if it carries one
(the handler runs in a child span of it when OpenTelemetry is installed: see :mod:`generaldomo.peers.tracing`).
It knows nothing of sockets or the protocol.
"""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Callable
from typing import Any

from generaldomo.sansio.wire.tracecontext import TraceContext

__all__ = ["TaskContext"]
_MAKING = threading.Lock()  # makes each context's cancel event once


class TaskContext:
    """The task a handler runs: ``task_id``, ``description``, ``deadline`` (monotonic time, None: none given),
    :meth:`time_left`, :attr:`cancelled` (or :meth:`wait_cancelled`) and ``trace``, the request's W3C trace
    context (a :class:`~generaldomo.TraceContext`; None: none came).

    Example::

        def render(payload: bytes, task: TaskContext) -> bytes:
            for frame in frames_of(payload):
                if task.cancelled or (task.time_left() or 1) <= 0:
                    raise Reject(504, "nobody waits for it any more")
                draw(frame)
            return b"done"
    """

    __slots__ = ("_cancelled", "deadline", "description", "task_id", "trace")

    def __init__(
        self, task_id: bytes, description: bytes, deadline: float | None, trace: TraceContext | None = None
    ) -> None:
        self.task_id = task_id
        self.description = description
        self.deadline = deadline
        self.trace = trace
        # made at the first cancel or wait: a threading.Event costs about 30,000 instructions (its Condition
        # looks for methods a plain lock lacks, raising and catching AttributeError three times), per task
        self._cancelled: threading.Event | None = None

    def _event(self) -> threading.Event:
        event = self._cancelled
        if event is None:
            with _MAKING:  # the heartbeat thread cancels while the handler may start to wait
                if self._cancelled is None:
                    self._cancelled = threading.Event()
                event = self._cancelled
        return event

    def __repr__(self) -> str:
        left = self.time_left()
        return f"<TaskContext {self.description!r} left={'none' if left is None else f'{left:.3f}s'}>"

    def time_left(self) -> float | None:
        """Seconds until the deadline (negative once past), or None when the request carries none."""
        return None if self.deadline is None else self.deadline - time.monotonic()

    @property
    def expired(self) -> bool:
        """True once the deadline has passed."""
        return self.deadline is not None and time.monotonic() >= self.deadline

    @property
    def cancelled(self) -> bool:
        """True once the broker said nobody waits for this task's result."""
        event = self._cancelled
        return event is not None and event.is_set()

    def wait_cancelled(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds for a cancel; True if one came (a handler's interruptible sleep)."""
        return self._event().wait(timeout)

    def cancel(self) -> None:
        """Mark the task cancelled (the worker does, when the broker says so)."""
        self._event().set()


def takes_task(handler: Callable[..., Any]) -> bool:
    """True when ``handler`` takes a :class:`TaskContext` after the payload (see the module docstring)."""
    declared = getattr(handler, "takes_task", None)
    if isinstance(declared, bool):
        return declared
    try:
        parameters = list(inspect.signature(handler).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature: the payload alone
        return False
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 and positional[1].default is inspect.Parameter.empty

"""Stopping on signals: SIGINT and SIGTERM set an event instead of ending the process.

Rules: the serving loops of the command line and of the worker pool (and its children) wait on that event, so
that a signal only asks and the loop's own clean-up runs. Python runs signal handlers in the main thread only,
between two bytecodes of whatever it was running: call it from there. What a handler sets is a
:class:`SignalEvent`, whose :meth:`~SignalEvent.set` takes no lock (a flag, and a byte down a pipe): a
``threading.Event`` takes its lock to be set, and a handler that lands while the main thread holds that lock
(inside the same event's ``wait``, which a serving loop calls again and again) waits for it for ever. It knows
nothing of what stops.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import signal
import weakref
from collections.abc import Iterable

__all__ = ["STOP_SIGNALS", "stop_on_signals"]

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class SignalEvent:
    """An event that a signal handler may set, and any thread wait for: ``threading.Event``'s ``set``,
    ``is_set``, ``clear`` and ``wait``, with no lock taken by any of them (see the module docstring).

    Example:
        >>> event = SignalEvent()
        >>> event.wait(0.01), event.set(), event.wait(), event.is_set()
        (False, None, True, True)
    """

    def __init__(self) -> None:
        self._flag = False
        self._read, self._write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        # closed once nothing can set it any more; left to the process's end at exit (daemon threads may still wait)
        weakref.finalize(self, _close, self._read, self._write).atexit = False

    def set(self) -> None:
        """Set the flag and wake every thread that waits (from any thread, or a signal handler)."""
        self._flag = True
        with contextlib.suppress(BlockingIOError):  # a full pipe wakes waiters already
            os.write(self._write, b"\0")

    def is_set(self) -> bool:
        """Whether the flag is set."""
        return self._flag

    def clear(self) -> None:
        """Reset the flag (a ``set`` meanwhile may leave a waiter one spurious wake-up: it looks at the flag)."""
        self._flag = False
        with contextlib.suppress(BlockingIOError):
            while os.read(self._read, 4096):
                pass

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the flag is set or ``timeout`` seconds (None: no limit) pass; the flag."""
        if not self._flag:
            poller = select.poll()  # one per call: a poll object takes no two calls at once
            poller.register(self._read, select.POLLIN)
            poller.poll(None if timeout is None else max(0, math.ceil(timeout * 1000)))
        return self._flag


def _close(*descriptors: int) -> None:
    for descriptor in descriptors:
        with contextlib.suppress(OSError):
            os.close(descriptor)


def stop_on_signals(signals: Iterable[signal.Signals] = STOP_SIGNALS) -> SignalEvent:
    """An event that ``signals`` (SIGINT and SIGTERM unless told) set from now on, instead of ending the process."""
    stop = SignalEvent()
    for signum in signals:
        signal.signal(signum, lambda *_: stop.set())
    return stop

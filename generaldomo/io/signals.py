"""Stopping on signals: SIGINT and SIGTERM set an event instead of ending the process.

Rules: the serving loops of the command line and of the worker pool (and its children) wait on that event, so
that a signal only asks and the loop's own clean-up runs. Python runs signal handlers in the main thread only:
call it from there. It knows nothing of what stops.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterable

__all__ = ["STOP_SIGNALS", "stop_on_signals"]

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def stop_on_signals(signals: Iterable[signal.Signals] = STOP_SIGNALS) -> threading.Event:
    """An event that ``signals`` (SIGINT and SIGTERM unless told) set from now on, instead of ending the process."""
    stop = threading.Event()
    for signum in signals:
        signal.signal(signum, lambda *_: stop.set())
    return stop

"""The barrier around each message: an unexpected error while handling one drops that message, not the loop.

This module owns what every loop that handles peer input does when handling one message (or one tick) raises
an ``Exception`` it did not expect: the loop calls :meth:`Barrier.caught` from its ``except`` block, which
counts the error (``internal_errors`` in the status report, the metrics and the peers' properties) and logs
its traceback, rate-limited (one line per kind of error per interval, then a count), and the loop goes on
with the next message. A ``BaseException`` that is not an ``Exception`` (``KeyboardInterrupt``,
``SystemExit``, a plug-in's own) is not caught: it ends the loop, which then fails fast (see
:mod:`generaldomo.io.broker`). It is fed the time by its caller and reads no clock; it knows nothing of
sockets or of what the messages mean.
"""

from __future__ import annotations

import logging
import sys

from generaldomo.sansio.lograte import LogLimiter

__all__ = ["INTERNAL_ERRORS", "Barrier"]

INTERNAL_ERRORS = "internal_errors"  # the counter's name, everywhere it is shown


class Barrier:
    """Counts and logs, rate-limited, the unexpected errors a loop caught; ``what`` names the loop in logs."""

    def __init__(self, log: logging.Logger, what: str, interval: float = 10.0) -> None:
        self.what = what
        self.count = 0
        self._warnings = LogLimiter(log, interval)

    def caught(self, handling: str, now: float) -> None:
        """Count the error being handled (call from an ``except`` block) that ``handling`` (e.g. "a message")
        raised, and log its traceback unless one of its kind was logged less than an interval ago."""
        self.count += 1
        error = sys.exc_info()[1]
        kind = f"{handling}: {type(error).__name__}"
        self._warnings.warn(
            kind, None, lambda: self.what, now, "%s dropped %s after an unexpected error (%r)", self.what,
            handling, error, level=logging.ERROR, exc_info=True,
        )  # fmt: skip

    def flush(self, now: float) -> None:
        """Log the counts of errors suppressed in intervals that are over."""
        self._warnings.flush(now)

"""How a serving loop (the broker's, the bridge's) ends when it cannot go on: it fails fast, and says so.

This module owns what happens once an error escapes a loop's barriers (a socket that fails, a
``BaseException`` such as a plug-in's ``SystemExit``): the error is recorded and logged with its traceback,
the owner's ``on_failure(error)`` callback is called once (from the loop's thread), and from then on
:meth:`Failure.check` raises the loop's :class:`LoopFailed` subclass with the error as its ``__cause__``, so
that an application learns at its next call that nothing is served any more. The command line exits non-zero
(:class:`generaldomo.cli.command.Exit` ``SERVE_FAILED``). It knows nothing of what the loop serves.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from generaldomo.errors import GeneraldomoError

OnFailure = Callable[[BaseException], None]


class LoopFailed(GeneraldomoError, RuntimeError):
    """A serving loop stopped because of an error (its ``__cause__``): it serves nothing any more."""


class Failure:
    """The error that stopped the loop of ``what`` (e.g. "broker"), if one did; raised as ``kind``."""

    def __init__(
        self, log: logging.Logger, what: str, kind: type[LoopFailed], on_failure: OnFailure | None = None
    ) -> None:
        self._log = log
        self.what = what
        self.kind = kind
        self.on_failure = on_failure
        self.error: BaseException | None = None

    def ended(self, error: BaseException) -> None:
        """The loop ended with ``error`` propagating: record it as the failure, unless it is Ctrl-C in the main
        thread (a user's stop). Call from the ``except`` block around the loop, then re-raise."""
        if isinstance(error, KeyboardInterrupt) and threading.current_thread() is threading.main_thread():
            return
        self.error = error
        self._log.critical("the %s's loop stopped: %r; it serves nothing any more", self.what, error, exc_info=error)
        if self.on_failure is not None:
            try:
                self.on_failure(error)
            except Exception:
                self._log.exception("the %s's on_failure callback failed", self.what)

    def check(self) -> None:
        """Raise :attr:`kind` if the loop stopped because of an error; else nothing."""
        if self.error is not None:
            raise self.kind(f"the {self.what} stopped serving: {self.error!r}") from self.error

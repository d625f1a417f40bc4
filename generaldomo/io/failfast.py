"""How a serving loop (the broker's, the bridge's) runs, and ends when it cannot go on: it fails fast, and says so.

This module owns what happens once an error escapes a loop's barriers (a socket that fails, a
``BaseException`` such as a plug-in's ``SystemExit``): the error is recorded and logged with its traceback,
the owner's ``on_failure(error)`` callback is called once (from the loop's thread), and from then on
:meth:`Failure.check` raises the loop's :class:`LoopFailed` subclass with the error as its ``__cause__``, so
that an application learns at its next call that nothing is served any more. The command line exits non-zero
(:class:`generaldomo.cli.command.Exit` ``SERVE_FAILED``). :class:`ServingLoop` is the part the loops' owners
share: running in the caller's thread or a daemon thread, ``join``, ``check``, ``failure``, ``serving``, and
the barrier around each job of the loop. It knows nothing of what the loop serves.
"""

from __future__ import annotations

import abc
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Self

import zmq

import generaldomo.errors as errors
from generaldomo.compat import moved_names
from generaldomo.sansio.barrier import Barrier

# the errors' old paths here: the same classes, with a DeprecationWarning (they live in generaldomo.errors)
__getattr__ = moved_names(__name__, "generaldomo", ["LoopFailed"])

__all__ = ["Failure", "OnFailure", "ServingLoop"]

OnFailure = Callable[[BaseException], None]


class Failure:
    """The error that stopped the loop of ``what`` (e.g. "broker"), if one did; raised as ``kind``."""

    def __init__(
        self, log: logging.Logger, what: str, kind: type[errors.LoopFailed], on_failure: OnFailure | None = None
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


class ServingLoop(abc.ABC):
    """The life of a serving loop's owner: :meth:`run` in the caller's thread or :meth:`start` in a daemon
    thread, failing fast (module docstring). The owner's constructor sets ``_failure`` (whose ``kind`` is the
    :class:`LoopFailed` subclass raised: ``BrokerFailed``, ``BridgeFailed``), ``_barrier``, ``_thread`` (None) and
    ``_running`` (False); its :meth:`run` hands its loop and its clean-up to :meth:`_serve_until_done`."""

    _failure: Failure
    _barrier: Barrier
    _thread: threading.Thread | None
    _running: bool
    _thread_name = "generaldomo-loop"  # the daemon thread's name

    @abc.abstractmethod
    def run(self) -> None:
        """Serve until stopped, in the calling thread (the owner's loop, through :meth:`_serve_until_done`)."""

    def start(self) -> Self:
        """Run the loop (:meth:`run`) in a daemon thread of this process; return self. RuntimeError if it was
        started already."""
        if self._thread is not None:
            raise RuntimeError(f"{self._failure.what} already started")
        self._thread = threading.Thread(target=self._run_in_thread, name=self._thread_name, daemon=True)
        self._thread.start()
        return self

    def join(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds (None: for ever) for the background loop to end; True if it has ended.
        Raises the owner's :class:`LoopFailed` (``BrokerFailed``, ``BridgeFailed``) if it ended because of an
        error.

        Args:
            timeout: seconds to wait (None: no limit).
        """
        if self._thread is not None:
            self._thread.join(timeout)
        self.check()
        return self._thread is None or not self._thread.is_alive()

    def check(self) -> None:
        """Raise the owner's :class:`LoopFailed` (``BrokerFailed``, ``BridgeFailed``; the error as its
        ``__cause__``) if the loop stopped because of an error; else nothing."""
        self._failure.check()

    @property
    def failure(self) -> BaseException | None:
        """The error that stopped the loop, if one did."""
        return self._failure.error

    @property
    def serving(self) -> bool:
        """True from :meth:`start` (or :meth:`run`) until the loop ends, unless it failed."""
        alive = self._thread is not None and self._thread.is_alive()
        return (alive or self._running) and self._failure.error is None

    def _serve_until_done(self, loop: Callable[[], None], close: Callable[[], None]) -> None:
        """Run ``loop`` (``serving`` meanwhile); an error that ends it fails the owner (:meth:`Failure.ended`)
        and is raised; ``close`` (the clean-up) runs however it ends."""
        self._running = True
        try:
            loop()
        except BaseException as error:
            self._failure.ended(error)
            raise
        finally:
            self._running = False
            close()

    def _run_in_thread(self) -> None:
        with contextlib.suppress(BaseException):  # recorded, logged and told by self._failure
            self.run()

    def _guarded(self, what: str, job: Callable[..., object], *args: Any) -> None:
        """Run ``job(*args)`` inside the loop's barrier: a socket's failure goes through (it ends the loop),
        another error is counted and logged (:meth:`_caught`) and the loop goes on."""
        try:
            job(*args)
        except zmq.ZMQError:
            raise
        except Exception:
            self._caught(what)

    def _caught(self, what: str) -> None:
        """An unexpected error in ``what`` (the current exception): counted and logged by the barrier."""
        self._barrier.caught(what, time.monotonic())

"""The worker API: serve one service description with a handler function.

This module is the IO shell around :class:`generaldomo.sansio.peer.session.WorkerSession`, which owns READY
(carrying the previous result), heartbeats both ways, registering again and DISCONNECT. Threads: the thread
that calls :meth:`Worker.serve` owns the socket and runs the handler itself, with no hand-over per task;
while the handler runs it lends the socket, across a lock, to a heartbeat thread, so that a long task does
not look like a dead worker, and that reads what the broker sends meanwhile (a CANCEL of the running task
marks its :class:`~generaldomo.peers.task.TaskContext` cancelled; a restarted broker's DISCONNECT makes the
worker register again at once, with RESUME). The lock also guards the session. Each message from the broker is
handled inside a barrier (:mod:`generaldomo.sansio.barrier`): one whose handling raises is dropped, counted
(:attr:`Worker.internal_errors`) and logged, rate-limited. It knows nothing of how the broker matches
descriptions.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import socket
import threading
import time
from collections.abc import Callable, Generator, Sequence
from types import GeneratorType
from typing import Any, Final

import zmq

import generaldomo.errors as errors
from generaldomo.compat import moved_names
from generaldomo.io.peer.connection import BrokerChannel, Curve
from generaldomo.io.peer.locator import Where
from generaldomo.io.signals import SignalEvent
from generaldomo.io.transport import Transport
from generaldomo.peers.payload import Keys, as_bytes, as_frames, named
from generaldomo.peers.reject import Reject
from generaldomo.peers.task import TaskContext, takes_task
from generaldomo.peers.tracing import handler_span, mark_status
from generaldomo.sansio.barrier import Barrier
from generaldomo.sansio.config.settings import HEARTBEAT_INTERVAL, LIVENESS, PeerSettings
from generaldomo.sansio.peer.handshake import HandshakeFailure
from generaldomo.sansio.peer.session import Action, CancelTask, Reconnect, RunTask, WorkerSession
from generaldomo.sansio.wire import protocol

# the errors' old paths here: the same classes, with a DeprecationWarning (they live in generaldomo.errors)
__getattr__ = moved_names(__name__, "generaldomo", ["WorkerStopped"])

__all__ = ["LISTEN_EVERY", "MAX_SAID", "READ_BATCH", "Handler", "Result", "TaskInput", "Worker"]

log = logging.getLogger(__name__)

TaskInput = bytes | tuple[bytes, ...]  # a task's payload as its handler gets it: one frame, or a tuple of several
Result = bytes | Sequence[bytes] | Generator[Any, None, Any]
Handler = Callable[[TaskInput], Result] | Callable[[TaskInput, TaskContext], Result]
READ_BATCH: Final = 256  # broker messages read before the clock is looked at again
LISTEN_EVERY: Final = 0.1  # seconds between two looks at the socket while the handler runs (for a CANCEL)
MAX_SAID: Final = 64  # handshake failures remembered as logged already (then forgotten, and logged again)
_SAID: set[str] = set()


class Worker:
    """Serves requests matching ``description`` with ``handler``.

    The handler gets the request payload (``bytes`` when the request has one frame, else a tuple of frames),
    and, if it has a second positional parameter without a default, the task's
    :class:`~generaldomo.peers.task.TaskContext` (its deadline, time left, and whether it was cancelled); it
    returns the result: ``bytes`` or a sequence of bytes frames. An exception in the handler, or a result
    of another type (``str``, ``None``, a dict...), is sent back to the client as a ``500`` error reply saying
    what happened, and the worker goes on. A handler that is a generator streams: each value it yields goes to
    the client at once as a partial result, and the value it returns is the final result. ``endpoint`` is
    found and followed as for :class:`generaldomo.Client` (several endpoints, a
    :class:`~generaldomo.io.peer.locator.Where`, or None: ``GENERALDOMO_BROKER``, the broker file, a beacon).
    ``server_key`` and ``keys`` turn on CURVE, as for :class:`generaldomo.Client`.

    Args:
        endpoint: the broker's endpoint, several (tried in turn), a Where, or None (found as above).
        description: the service description (a service name with the default resolver).
        handler: the function that serves each request (above).
        transport: ``router`` or ``server``.
        context: the ZeroMQ context (``inproc://`` needs the broker's).
        heartbeat_interval: seconds between heartbeats (use the broker's).
        liveness: heartbeat intervals of silence after which the worker reconnects.
        server_key: the broker's CURVE public key; None: plaintext.
        keys: this worker's CURVE key pair (default: a fresh one).

    Example::

        def shout(payload: bytes) -> bytes:
            return payload.upper()

        worker = Worker("tcp://127.0.0.1:5555", "shout", shout)
        threading.Thread(target=worker.serve, daemon=True).start()
        ...
        worker.stop()  # tells the broker at once
    """

    def __init__(
        self,
        endpoint: str | Sequence[str] | Where | None,
        description: str | bytes,
        handler: Handler,
        transport: str = "router",
        *,
        context: zmq.Context[Any] | None = None,
        heartbeat_interval: float = HEARTBEAT_INTERVAL,
        liveness: int = LIVENESS,
        server_key: str | bytes | None = None,
        keys: Keys | None = None,
    ) -> None:
        self.transport = Transport.of(transport)
        self.description = as_bytes(description)
        self.handler = handler
        self._takes_task = takes_task(handler)
        self._task: TaskContext | None = None  # the running task's, while the handler runs
        self.context = context or zmq.Context.instance()
        self.heartbeat_interval = heartbeat_interval
        self.liveness = liveness
        settings = PeerSettings(heartbeat_interval, liveness)
        # its id, the same across its reconnects: a READY from a new socket retires the registration of the old one
        host, name = socket.gethostname()[: protocol.MAX_HOST] or None, os.urandom(16).hex()
        info = protocol.worker_info(host, os.getpid(), name=name)
        self._session = WorkerSession(self.description, settings, time.monotonic(), info, random.random)
        self._channel = BrokerChannel(endpoint, self.transport, self.context, Curve.of(server_key, keys))
        self._stopping = SignalEvent()  # stop() may come from a signal handler: the events it sets take no lock
        # The socket (and the session) belong to the serving thread, except while it runs the handler: then
        # the heartbeat thread may use them, holding this lock (a socket may move between threads across a lock).
        self._socket_lock = threading.Lock()
        self._busy = False  # the handler runs; changed with the socket lock held
        self._poke = SignalEvent()  # wakes the heartbeat thread early (stop)
        self._finish = False  # stop(finish=True): the running task's result still goes out
        self._barrier = Barrier(log, "the worker")  # around each message from the broker (socket held)
        self._failure: HandshakeFailure | None = None  # the socket monitor's latest, until a handshake succeeds
        self._failures = 0  # failures the monitor named, one per new cause

    @property
    def endpoint(self) -> str:
        """The broker endpoint the worker is connected (or connecting) to now."""
        return self._channel.endpoint

    @property
    def busy(self) -> bool:
        """True while the handler runs."""
        return self._busy

    @property
    def registered(self) -> bool:
        """True once the broker has answered this worker's latest READY (a heartbeat or a task came)."""
        return self._session.heard

    @property
    def handshake_failure(self) -> HandshakeFailure | None:
        """Why the broker refuses this worker's connection (the other transport, CURVE, its key), as the socket
        monitor saw it within about a second of the attempt; None once a handshake succeeds. The worker keeps
        trying and logs each new cause once."""
        return self._failure

    @property
    def handshake_failures(self) -> int:
        """How many times :attr:`handshake_failure` took a new cause (each logged, once per process), however
        briefly it lasted: a failure the worker logged counts here even after a handshake cleared it."""
        return self._failures

    @property
    def tasks_done(self) -> int:
        """Tasks whose result went back to the broker."""
        return self._session.tasks_done

    @property
    def internal_errors(self) -> int:
        """Messages from the broker whose handling raised an unexpected error: dropped, counted, logged."""
        return self._barrier.count

    @property
    def refusals(self) -> int:
        """READYs the broker answered with DISCONNECT (its key's role or services, or the description): after each
        the worker waits longer (about 1 s, doubled up to 60 s, with jitter) before it registers again."""
        return self._session.refusals

    @property
    def malformed(self) -> int:
        """Messages from the broker that were not valid (a field outside its bounds, an unknown command), dropped;
        tasks that came while one ran are counted too."""
        return self._session.drops.count

    @property
    def reconnects(self) -> int:
        """Times this worker registered again on a new socket (broker silent, or DISCONNECT from it)."""
        return self._channel.reconnects

    def stop(self, *, finish: bool = False) -> None:
        """Make :meth:`serve` return; callable from any thread or a signal handler.

        If the handler is running, the broker is told at once that this worker is leaving (so the task is
        reissued), the result is discarded, and :meth:`serve` returns when the handler does. With
        ``finish=True`` the running task's result is sent first and the worker leaves after it; a later
        ``stop()`` cuts it short as above."""
        self._finish = finish
        self._stopping.set()
        self._poke.set()
        self._channel.wake()

    def serve(self) -> None:
        """Serve until :meth:`stop`; on return the broker has been told this worker is leaving.

        Raises :class:`WorkerStopped` if serving fails for any other reason (the socket's context was
        terminated, a bug): it never ends silently."""
        heartbeats = threading.Thread(target=self._heartbeat_while_busy, name="generaldomo-heartbeat", daemon=True)
        self._socket_lock.acquire()
        heartbeats.start()
        try:
            self._serve()
        except Exception as error:
            log.exception("the worker stopped serving %r", self.description)
            raise errors.WorkerStopped(f"the worker stopped serving {named(self.description)}: {error!r}") from error
        finally:
            self._busy = False
            with contextlib.suppress(zmq.ZMQError):  # a terminated context has no socket to say goodbye on
                self._perform(self._session.stop())
            self._channel.close(linger_ms=500)
            self._socket_lock.release()
            self._poke.set()

    def _perform(self, actions: list[Action[Any]]) -> RunTask | None:
        """Carry out the session's actions; the task to run, if one came (the caller has the socket). A worker
        told to stop does not reconnect: a broker's DISCONNECT then (it stopped too) is no news to log."""
        if self._stopping.is_set():
            actions = [action for action in actions if not isinstance(action, Reconnect)]
        for action in self._channel.perform(actions):
            if isinstance(action, RunTask):
                return action
            if isinstance(action, CancelTask) and (task := self._task) is not None and task.task_id == action.task_id:
                task.cancel()
        return None

    def _serve(self) -> None:
        channel, session, clock = self._channel, self._session, time.monotonic
        channel.adopt()
        self._perform(session.start())
        while not self._stopping.is_set():
            deadline, look = session.deadline(), channel.next_look  # an address file is looked at now and then
            channel.wait(look if deadline is None else deadline if look is None else min(deadline, look), clock())
            if (watch := channel.handshake_news()) is not None:
                self._follow(watch.failure)
            task = self._read()
            if task is not None and not self._stopping.is_set():  # a task that came after stop() is not run
                self._run(task)
            else:
                self._perform([*self._ticked(channel.backlogged), *self._moved()])

    def _moved(self) -> list[Action[Any]]:
        """Register where the broker's address file says it is now, if that changed (the socket's holder)."""
        now = time.monotonic()
        return self._session.moved("the broker moved", now) if self._channel.moved(now) else []

    def _follow(self, failure: HandshakeFailure | None) -> None:
        if failure is not None and failure != self._failure:
            self._failures += 1
            if failure.cause not in _SAID:
                if len(_SAID) >= MAX_SAID:
                    _SAID.clear()
                _SAID.add(failure.cause)  # once per process, not once per slot of a pool
                log.warning("%s", failure.cause)
        self._failure = failure

    def _read(self) -> RunTask | None:
        """Feed the session what arrived, up to the first task (the rest is read after it). One message at a
        time: the wait after the task looks at the socket anyway, so a read needs no look of its own."""
        for _ in range(READ_BATCH):
            frames = self._channel.recv()
            if frames is None:
                break
            task = self._perform(self._received(frames))
            if task is not None:
                return task
        return None

    def _received(self, frames: list[bytes]) -> list[Action[Any]]:
        """The session's actions for one message from the broker, inside the barrier (the caller has the socket)."""
        now = time.monotonic()
        try:
            return self._session.receive(frames, now)
        except Exception:
            self._barrier.caught("a message from the broker", now)
            return []

    def _ticked(self, backlogged: bool = False) -> list[Action[Any]]:
        """The session's actions for the time now, inside the barrier (the caller has the socket)."""
        now = time.monotonic()
        try:
            return self._session.tick(now, backlogged)
        except Exception:
            self._barrier.caught("a tick", now)
            return []

    def _run(self, task: RunTask) -> None:
        """Run the handler with the socket lent to the heartbeat thread; send the result."""
        payload = task.body[0] if len(task.body) == 1 else task.body
        context = self._task = TaskContext(task.task_id, task.description, task.deadline, task.trace)
        traced = log.isEnabledFor(logging.DEBUG)  # -vv: one line per task
        started = time.monotonic() if traced else 0.0
        self._busy = True
        self._socket_lock.release()
        try:
            if task.trace is None:
                status, result = self._call(payload, context)
            else:  # in a child span of the client's, when OpenTelemetry is installed
                with handler_span(task.trace, task.description) as span:
                    status, result = self._call(payload, context)
                    mark_status(span, status)
        finally:
            self._socket_lock.acquire()
            self._busy = False
            self._task = None
        if traced:
            elapsed = time.monotonic() - started
            log.debug(
                "task %s for %r: %s in %.3f s", task.task_id.hex(), task.description[:64], status.decode(), elapsed
            )
        if self._stopping.is_set():  # told to stop meanwhile: drop the result, or send it, then leave
            self._perform(self._session.stop(self._finish))
        self._perform(self._session.finish(status, result, time.monotonic()))

    def _call(self, payload: TaskInput, task: TaskContext) -> tuple[bytes, tuple[bytes, ...]]:
        """The handler's ``(status, result frames)``; a generator's yields go out as partial results."""
        try:
            handler: Callable[..., Result] = self.handler
            result = handler(payload, task) if self._takes_task else handler(payload)
            if isinstance(result, GeneratorType):  # (inspect.isgenerator's test, without its Python call)
                result = self._stream(result)
            return protocol.OK, as_frames(result, "handler's result")
        except Reject as rejected:  # the handler chose the status
            return rejected.status_bytes, rejected.frames
        except Exception as error:  # the client gets the error; the worker goes on
            log.exception("handler failed")
            return protocol.WORKER_ERROR, (f"{type(error).__name__}: {error}".encode(),)

    def _stream(self, parts: Generator[Any, Any, Any]) -> Any:
        """Send each value a generator handler yields as a partial result; its return value is the result."""
        with contextlib.closing(parts):
            while True:
                try:
                    part = next(parts)
                except StopIteration as done:
                    return () if done.value is None else done.value
                frames = as_frames(part, "handler's partial result")
                with self._socket_lock:
                    self._perform(self._session.partial(frames))

    def _heartbeat_while_busy(self) -> None:
        """While the handler runs, heartbeat the broker and read what it says (a CANCEL of the task); on stop,
        tell it at once that this worker leaves."""
        while True:
            self._poke.wait(self._beat_wait())
            self._poke.clear()
            if not self.busy:
                if self._stopping.is_set():
                    return
                continue
            with self._socket_lock:
                if not self.busy:  # the handler finished meanwhile; the serving thread has the socket
                    continue
                leaving = self._session.stop(self._finish) if self._stopping.is_set() else []
                self._perform([*leaving, *self._ticked(), *self._moved()])
                for _ in range(READ_BATCH):
                    frames = self._channel.recv()
                    if frames is None:
                        break
                    self._perform(self._received(frames))

    def _beat_wait(self) -> float:
        """Seconds until the heartbeat thread has something to do (a heartbeat due, or a look at the socket,
        while the handler runs)."""
        if not self.busy or self._session.deadline() is None:
            return self.heartbeat_interval  # stop() and the end of serve() poke it
        return min(max(self._session.pulse.due - time.monotonic(), 0.001), LISTEN_EVERY)

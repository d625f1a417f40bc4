"""The worker API: serve one service description with a handler function.

This module owns the worker's side of the conversation: READY (carrying the previous result), heartbeats both
ways, and reconnecting when the broker goes silent or says DISCONNECT. The handler runs in the serving thread,
with no hand-over per task; while it runs, a heartbeat thread borrows the socket across a lock, so that a long
task does not look like a dead worker. It knows nothing of how the broker matches descriptions.
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
from collections.abc import Callable, Generator, Sequence
from typing import Any

import zmq

from generaldomo.io.beacon import find_broker
from generaldomo.io.connection import Connection, connect
from generaldomo.peers.client import as_bytes, as_frames
from generaldomo.peers.reject import Reject
from generaldomo.sansio import protocol
from generaldomo.sansio.settings import HEARTBEAT_INTERVAL, LIVENESS

log = logging.getLogger(__name__)

Handler = Callable[[bytes | tuple[bytes, ...]], bytes | Sequence[bytes] | Generator[Any, None, Any]]


class Worker:
    """Serves requests matching ``description`` with ``handler``.

    The handler gets the request payload (``bytes`` when the request has one frame, else a tuple of frames)
    and returns the result (``bytes`` or a sequence of frames). An exception in the handler is sent back to
    the client as a ``500`` error reply carrying its text. A handler that is a generator streams: each value
    it yields goes to the client at once as a partial result, and the value it returns is the final result.
    A ``None`` endpoint is found as :func:`generaldomo.io.beacon.find_broker` says (``GENERALDOMO_BROKER``, then
    a beacon).
    """

    def __init__(
        self,
        endpoint: str | None,
        description: str | bytes,
        handler: Handler,
        transport: str = "router",
        *,
        context: zmq.Context | None = None,
        heartbeat_interval: float = HEARTBEAT_INTERVAL,
        liveness: int = LIVENESS,
    ) -> None:
        self.endpoint = find_broker(transport, endpoint)
        self.description = as_bytes(description)
        self.handler = handler
        self.transport = transport
        self.context = context or zmq.Context.instance()
        self.heartbeat_interval = heartbeat_interval
        self.liveness = liveness
        self.tasks_done = 0
        self.reconnects = 0
        self._connection: Connection = connect(self.endpoint, transport, self.context)
        self._stopping = threading.Event()
        # The socket is used by the serving thread, except while that thread runs the handler: then the
        # heartbeat thread may use it, holding this lock (a socket may move between threads across a lock).
        self._socket_lock = threading.Lock()
        self._busy = threading.Event()
        self._poke = threading.Event()  # wakes the heartbeat thread early (stop)
        self._said_goodbye = False
        self._finish_task = False  # stop(finish=True): a running task's result is still sent

    @property
    def busy(self) -> bool:
        """True while the handler runs."""
        return self._busy.is_set()

    def stop(self, *, finish: bool = False) -> None:
        """Make :meth:`serve` return; callable from any thread or a signal handler.

        If the handler is running, the broker is told at once that this worker is leaving (so the task is
        reissued), the result is discarded, and :meth:`serve` returns when the handler does. With
        ``finish=True`` the running task's result is sent first and the worker leaves after it; a later
        ``stop()`` cuts it short as above."""
        self._finish_task = finish
        self._stopping.set()
        self._poke.set()
        self._connection.wake()

    def serve(self) -> None:
        """Serve until :meth:`stop`; on return the broker has been told this worker is leaving."""
        heartbeats = threading.Thread(target=self._heartbeat_while_busy, name="generaldomo-heartbeat", daemon=True)
        self._socket_lock.acquire()
        heartbeats.start()
        try:
            self._serve()
        finally:
            self._busy.clear()
            self._say_goodbye()
            self._connection.close(linger_ms=500)
            self._socket_lock.release()
            self._poke.set()

    def _say_goodbye(self) -> None:
        """Send DISCONNECT once (caller holds the socket)."""
        if not self._said_goodbye:
            self._said_goodbye = True
            self._connection.write(protocol.worker_command(protocol.Dialect.GDP, protocol.DISCONNECT))

    def _serve(self) -> None:
        connection = self._connect_io()
        expiry = self.heartbeat_interval * self.liveness
        clock = time.monotonic
        heard = clock()
        next_heartbeat = heard + self.heartbeat_interval
        while not self._stopping.is_set():
            timeout = 0.01 if connection.backlogged else max(0.0, next_heartbeat - clock())
            self._poller.poll(timeout * 1000)
            connection.flush()
            task = None
            while (frames := connection.recv()) is not None:
                heard = clock()
                command, args = self._on_message(frames)
                if command == protocol.DISCONNECT:
                    log.info("broker sent DISCONNECT; registering again")
                    connection = self._reconnect()
                    task = None
                    break
                if command == protocol.REQUEST:
                    if task is not None:
                        log.warning("broker sent a task while another waits; ignored")
                    else:
                        task = args
            if task is not None:
                self._run(task)
                heard = clock()  # the broker's heartbeats are read now
                continue
            now = clock()
            if now - heard > expiry:
                log.warning("broker silent for %.1f s; reconnecting to %s", now - heard, self.endpoint)
                connection = self._reconnect()
                heard = now
            if now >= next_heartbeat and not connection.backlogged:  # no heartbeats pile up for a gone broker
                connection.send(protocol.worker_command(protocol.Dialect.GDP, protocol.HEARTBEAT))
                next_heartbeat = now + self.heartbeat_interval

    def _connect_io(self) -> Connection:
        self._poller = self._connection.adopt()
        self._connection.send(protocol.gdp_ready(self.description))
        return self._connection

    def _reconnect(self) -> Connection:
        self.reconnects += 1
        self._connection = self._connection.reopen()
        return self._connect_io()

    def _on_message(self, frames: list[bytes]) -> tuple[str | None, tuple[bytes, ...]]:
        parsed = protocol.parse_worker_command(frames)
        if parsed is None:
            log.warning("worker dropped a message that is not a generaldomo worker command")
            return None, ()
        return parsed

    def _run(self, args: tuple[bytes, ...]) -> None:
        """Run the handler on one task with the socket released to the heartbeat thread; send the result."""
        task_id, _description, *body = args
        payload = body[0] if len(body) == 1 else tuple(body)
        self._busy.set()
        self._socket_lock.release()
        try:
            status, result = self._call(task_id, payload)
        finally:
            self._socket_lock.acquire()
            self._busy.clear()
        self.tasks_done += 1
        if not self._stopping.is_set() or self._finish_task:
            self._connection.write(protocol.gdp_ready(self.description, (task_id, status, result)))

    def _call(self, task_id: bytes, payload: bytes | tuple[bytes, ...]) -> tuple[bytes, tuple[bytes, ...]]:
        """The handler's ``(status, result frames)``; a generator's yields go out as partial results."""
        try:
            result = self.handler(payload)
            if inspect.isgenerator(result):
                result = self._stream(task_id, result)
            return protocol.OK, as_frames(result)
        except Reject as rejected:  # the handler chose the status
            return rejected.status_bytes, (rejected.reason.encode(),)
        except Exception as error:  # the client gets the error; the worker goes on
            log.exception("handler failed")
            return protocol.WORKER_ERROR, (f"{type(error).__name__}: {error}".encode(),)

    def _stream(self, task_id: bytes, parts: Generator[Any, None, Any]) -> Any:
        """Send each value a generator handler yields as a partial result; its return value is the result."""
        while True:
            try:
                part = next(parts)
            except StopIteration as done:
                return () if done.value is None else done.value
            with self._socket_lock:
                self._connection.write(protocol.gdp_partial(task_id, as_frames(part)))

    def _heartbeat_while_busy(self) -> None:
        """While the handler runs, heartbeat the broker; on stop, tell it at once that this worker leaves."""
        while True:
            self._poke.wait(self.heartbeat_interval)
            self._poke.clear()
            if not self._busy.is_set():
                if self._stopping.is_set() and not self.busy:
                    return
                continue
            with self._socket_lock:
                if not self._busy.is_set():  # the handler finished meanwhile; the serving thread has the socket
                    continue
                if self._stopping.is_set() and not self._finish_task:
                    self._say_goodbye()
                else:
                    self._connection.write(protocol.worker_command(protocol.Dialect.GDP, protocol.HEARTBEAT))

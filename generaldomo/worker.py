"""The worker API: serve one service description with a handler function.

This module owns the worker's side of the conversation: READY (carrying the previous result), heartbeats both
ways, and reconnecting when the broker goes silent or says DISCONNECT. The handler runs on its own thread so
that a long task does not stop the heartbeats. It knows nothing of how the broker matches descriptions.
"""

from __future__ import annotations

import inspect
import logging
import queue
import threading
import time
from collections.abc import Callable, Generator, Sequence
from typing import Any

import zmq

from generaldomo import protocol
from generaldomo.beacon import find_broker
from generaldomo.client import as_bytes, as_frames
from generaldomo.connection import Connection, connect

log = logging.getLogger(__name__)

Handler = Callable[[bytes | tuple[bytes, ...]], bytes | Sequence[bytes] | Generator[Any, None, Any]]


class Worker:
    """Serves requests matching ``description`` with ``handler``.

    The handler gets the request payload (``bytes`` when the request has one frame, else a tuple of frames)
    and returns the result (``bytes`` or a sequence of frames). An exception in the handler is sent back to
    the client as a ``500`` error reply carrying its text. A handler that is a generator streams: each value
    it yields goes to the client at once as a partial result, and the value it returns is the final result.
    A ``None`` endpoint is found as :func:`generaldomo.beacon.find_broker` says (``GENERALDOMO_BROKER``, then
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
        heartbeat_interval: float = 2.5,
        liveness: int = 3,
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
        self._tasks: queue.SimpleQueue[tuple[bytes, bytes | tuple[bytes, ...]] | None] = queue.SimpleQueue()
        self._busy = False

    def stop(self) -> None:
        """Make :meth:`serve` return soon; callable from any thread or a signal handler."""
        self._stopping.set()
        self._connection.wake()

    def serve(self) -> None:
        """Serve until :meth:`stop`; on return the broker has been told this worker is leaving."""
        handler_thread = threading.Thread(target=self._run_handler, name="generaldomo-handler", daemon=True)
        handler_thread.start()
        try:
            self._serve()
        finally:
            self._tasks.put(None)
            self._connection.send(protocol.worker_command(protocol.Dialect.GDP, protocol.DISCONNECT))
            self._connection.close(linger_ms=500)

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
            while (frames := connection.recv()) is not None:
                heard = clock()
                if not self._on_message(frames):
                    connection = self._reconnect()
                    break
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

    def _on_message(self, frames: list[bytes]) -> bool:
        """Act on a broker message; False when the broker asked this worker to reconnect."""
        parsed = protocol.parse_worker_command(frames)
        if parsed is None:
            log.warning("worker dropped a message that is not a generaldomo worker command")
            return True
        command, args = parsed
        if command == protocol.DISCONNECT:
            log.info("broker sent DISCONNECT; registering again")
            return False
        if command == protocol.REQUEST:
            if self._busy:
                log.warning("broker sent a task while another runs; ignored")
                return True
            task_id, _description, *body = args
            self._busy = True
            self._tasks.put((task_id, body[0] if len(body) == 1 else tuple(body)))
        return True

    def _stream(self, task_id: bytes, parts: Generator[Any, None, Any]) -> Any:
        """Send each value a generator handler yields as a partial result; its return value is the result."""
        while True:
            try:
                part = next(parts)
            except StopIteration as done:
                return () if done.value is None else done.value
            self._connection.send(protocol.gdp_partial(task_id, as_frames(part)))

    def _run_handler(self) -> None:
        while (item := self._tasks.get()) is not None:
            task_id, payload = item
            try:
                result = self.handler(payload)
                if inspect.isgenerator(result):
                    result = self._stream(task_id, result)
                status, body = protocol.OK, as_frames(result)
            except Exception as error:  # the client gets the error; the worker goes on
                log.exception("handler failed")
                status, body = protocol.WORKER_ERROR, (f"{type(error).__name__}: {error}".encode(),)
            self.tasks_done += 1
            self._busy = False
            self._connection.send(protocol.gdp_ready(self.description, (task_id, status, body)))

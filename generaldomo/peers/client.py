"""The client API: one :class:`Client` shared by any number of threads.

This module owns request ids and the matching of replies to the callers that wait for them. Every request
carries an id made by this client; the IO thread resolves the caller's future when the reply with that id
arrives, and drops any later reply with the same id, so a caller gets exactly one answer. It knows nothing of
workers or services beyond the descriptions it passes on.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, InvalidStateError
from typing import Any

import attrs
import zmq

from generaldomo.io.beacon import find_broker
from generaldomo.io.connection import connect
from generaldomo.sansio import protocol
from generaldomo.sansio.settings import HEARTBEAT_INTERVAL, LIVENESS

log = logging.getLogger(__name__)

Payload = bytes | Sequence[bytes]
OnPartial = Callable[["Reply"], None]


@attrs.frozen(slots=True)
class Reply:
    """A successful result: the frames the worker returned, and where the time went.

    ``queued``: seconds the request waited in the broker before a worker got it (including earlier attempts
    when it was reissued); ``served``: seconds from dispatch to result. ``sent`` and ``received`` are this
    client's ``time.monotonic()`` when the request left and the reply arrived. Together they draw a timeline.
    """

    frames: tuple[bytes, ...]
    queued: float | None = None
    served: float | None = None
    sent: float | None = None
    received: float | None = None
    partial: bool = False

    @property
    def payload(self) -> bytes:
        """The result when it is one frame (the usual case)."""
        if len(self.frames) != 1:
            raise ValueError(f"the reply has {len(self.frames)} frames; read .frames")
        return self.frames[0]


class RequestFailed(Exception):
    """The broker or the worker answered the request with an error status."""

    def __init__(self, status: bytes, reason: str) -> None:
        super().__init__(f"{status.decode(errors='replace')}: {reason}")
        self.status = status
        self.reason = reason


class ClientClosed(RuntimeError):
    """The client was closed before the request was answered."""


def as_frames(payload: Payload) -> tuple[bytes, ...]:
    """One frame for bytes, or the given frames."""
    if isinstance(payload, bytes | bytearray | memoryview):
        return (bytes(payload),)
    return tuple(payload)


def as_bytes(text: str | bytes) -> bytes:
    """UTF-8 for text; bytes as they are."""
    return text.encode() if isinstance(text, str) else text


class Client:
    """Sends requests to a broker from any thread; each caller gets its own reply.

    While requests are outstanding the client heartbeats the broker every ``heartbeat_interval`` seconds. When
    the broker answers as a new instance (it restarted) the client sends every outstanding request again;
    when it stays silent for ``liveness`` intervals the client reconnects on a new socket and does the same.
    Resent requests keep their ids, so a broker that still has them does not run them twice, and a reply
    that arrives twice is delivered once. Without an ``endpoint`` the client uses ``GENERALDOMO_BROKER`` or,
    failing that, listens for a broker's beacon (:func:`generaldomo.io.beacon.find_broker`).
    """

    def __init__(
        self,
        endpoint: str | None = None,
        transport: str = "router",
        *,
        context: zmq.Context | None = None,
        heartbeat_interval: float = HEARTBEAT_INTERVAL,
        liveness: int = LIVENESS,
    ) -> None:
        self.endpoint = find_broker(transport, endpoint)
        self.transport = transport
        self.context = context or zmq.Context.instance()
        self.heartbeat_interval = heartbeat_interval
        self.liveness = liveness
        self.replies_dropped = 0
        self.resent = 0
        self.reconnects = 0
        self._connection = connect(self.endpoint, transport, self.context)
        self._prefix = os.urandom(8)  # request ids are unique across clients
        self._serial = itertools.count(1)
        self._waiting: dict[bytes, tuple[Future[Reply], list[bytes], float, OnPartial | None]] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="generaldomo-client", daemon=True)
        self._thread.start()

    def submit(
        self, description: str | bytes, payload: Payload = b"", on_partial: OnPartial | None = None
    ) -> Future[Reply]:
        """Send a request; the future gives its :class:`Reply` or raises :class:`RequestFailed`.

        ``on_partial`` is called with each partial result (a :class:`Reply` with ``partial=True``) that a
        streaming worker sends before the final one; it runs on the client's IO thread, so keep it short.
        """
        request_id = self._prefix + next(self._serial).to_bytes(8, "big")
        frames = protocol.gdp_request(request_id, as_bytes(description), as_frames(payload))
        future: Future[Reply] = Future()
        with self._lock:
            if self._closed:
                raise ClientClosed("the client is closed")
            self._waiting[request_id] = (future, frames, time.monotonic(), on_partial)
        future.add_done_callback(lambda done: self._forget(request_id) if done.cancelled() else None)
        self._connection.send(frames)
        return future

    def _forget(self, request_id: bytes) -> None:
        with self._lock:
            self._waiting.pop(request_id, None)

    def request(self, description: str | bytes, payload: Payload = b"", timeout: float | None = None) -> Reply:
        """Send a request and wait up to ``timeout`` seconds for its reply (raises ``TimeoutError``)."""
        future = self.submit(description, payload)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise TimeoutError(f"no reply to {description!r} within {timeout} s") from None

    def stream(self, description: str | bytes, payload: Payload = b"", timeout: float | None = None) -> Iterator[Reply]:
        """Send a request and yield its partial results as they come, then the final :class:`Reply`.

        Raises ``TimeoutError`` when nothing arrives for ``timeout`` seconds, :class:`RequestFailed` on an error.
        """
        arrivals: queue.SimpleQueue[Reply | None] = queue.SimpleQueue()
        future = self.submit(description, payload, on_partial=arrivals.put)
        future.add_done_callback(lambda _: arrivals.put(None))
        try:
            while (item := arrivals.get(timeout=timeout)) is not None:
                yield item
        except queue.Empty:
            future.cancel()
            raise TimeoutError(f"nothing from {description!r} for {timeout} s") from None
        yield future.result()

    def status(self, timeout: float | None = 10.0) -> dict[str, Any]:
        """The broker's status report (``mmi.status``): broker, services and workers."""
        return json.loads(self.request("mmi.status", [], timeout).payload)

    def flow(self, service: str, timeout: float | None = 10.0, **limits: object) -> dict[str, Any]:
        """Read the flow limits of ``service`` or, given ``rate``, ``burst``, ``concurrency``,
        ``bytes_in_flight`` and/or ``adaptive`` (``{"min": 1, "max": 64}``), change them (None lifts a limit).
        Returns the limits now in force (``mmi.flow``)."""
        body = [service.encode()] + ([json.dumps(limits).encode()] if limits else [])
        return json.loads(self.request("mmi.flow", body, timeout).payload)

    def close(self) -> None:
        """Stop the IO thread; requests still waiting fail with :class:`ClientClosed`."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._connection.wake()
        self._thread.join()
        with self._lock:
            waiting, self._waiting = self._waiting, {}
        for future, *_ in waiting.values():
            with contextlib.suppress(InvalidStateError):
                future.set_exception(ClientClosed("the client was closed before the reply came"))

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ---------------------------------------------------------------------------------------- IO thread

    def _run(self) -> None:
        clock = time.monotonic
        expiry = self.heartbeat_interval * self.liveness
        instance: bytes | None = None
        next_heartbeat = clock()
        silent_since: float | None = None  # when the broker last spoke while we waited for it
        poller = self._connection.adopt()
        try:
            while not self._closed:
                connection = self._connection
                if connection.backlogged:
                    timeout = 0.01
                elif self._waiting:
                    timeout = min(1.0, max(0.0, next_heartbeat - clock()))
                else:
                    timeout = 1.0  # idle: nothing to heartbeat for; close() wakes the poll
                poller.poll(timeout * 1000)
                connection.flush()
                heard = False
                while (frames := connection.recv()) is not None:
                    heard = True
                    announced = protocol.parse_broker_instance(frames)
                    if announced is None:
                        self._on_reply(frames)
                    elif announced != instance:
                        if instance is not None:
                            log.warning("the broker restarted; sending %d requests again", len(self._waiting))
                            self._resend()
                        instance = announced
                now = clock()
                if not self._waiting:
                    silent_since = None
                    continue
                if heard or silent_since is None:
                    silent_since = now
                elif now - silent_since > expiry:
                    log.warning("broker silent for %.1f s; reconnecting to %s", now - silent_since, self.endpoint)
                    poller = self._reconnect()
                    self._resend()
                    silent_since = now
                if now >= next_heartbeat:
                    self._connection.send(protocol.gdp_client_heartbeat())
                    next_heartbeat = now + self.heartbeat_interval
        finally:
            self._connection.close()

    def _on_partial(self, request_id: bytes, body: tuple[bytes, ...]) -> None:
        with self._lock:
            entry = self._waiting.get(request_id)
        if entry is None or entry[3] is None:
            return
        try:
            entry[3](Reply(body, sent=entry[2], received=time.monotonic(), partial=True))
        except Exception:  # a faulty callback must not stop the IO thread
            log.exception("on_partial callback failed")

    def _reconnect(self) -> zmq.Poller:
        self.reconnects += 1
        self._connection = self._connection.reopen()
        return self._connection.adopt()

    def _resend(self) -> None:
        with self._lock:
            outstanding = [frames for _, frames, *_ in self._waiting.values()]
        self.resent += len(outstanding)
        for frames in outstanding:
            self._connection.send(frames)

    def _on_reply(self, frames: list[bytes]) -> None:
        parsed = protocol.parse_client_reply(frames)
        if parsed is None:
            log.warning("client dropped a message that is not a generaldomo reply")
            return
        request_id, status, meta, body = parsed
        if status is None:
            self._on_partial(request_id, body)
            return
        with self._lock:
            entry = self._waiting.pop(request_id, None)
        if entry is None:
            self.replies_dropped += 1  # a duplicate, or the answer to a cancelled request
            return
        future, _, sent, _ = entry
        with contextlib.suppress(InvalidStateError):  # the caller may have cancelled it
            if status == protocol.OK:
                queued, served = protocol.parse_timing(meta) or (None, None)
                future.set_result(Reply(body, queued, served, sent, time.monotonic()))
            else:
                reason = body[0].decode(errors="replace") if body else ""
                future.set_exception(RequestFailed(status, reason))

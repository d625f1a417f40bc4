"""The client API: one :class:`Client` shared by any number of threads.

This module owns request ids and the matching of replies to the callers that wait for them. Every request
carries an id made by this client; the IO thread resolves the caller's future when the reply with that id
arrives, and drops any later reply with the same id, so a caller gets exactly one answer. It knows nothing of
workers or services beyond the descriptions it passes on.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import threading
from collections.abc import Sequence
from concurrent.futures import Future, InvalidStateError

import attrs
import zmq

from generaldomo import protocol
from generaldomo.connection import connect

log = logging.getLogger(__name__)

Payload = bytes | Sequence[bytes]


@attrs.frozen(slots=True)
class Reply:
    """A successful result: the frames the worker returned."""

    frames: tuple[bytes, ...]

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
    """Sends requests to a broker from any thread; each caller gets its own reply."""

    def __init__(self, endpoint: str, transport: str = "router", *, context: zmq.Context | None = None) -> None:
        self.transport = transport
        self._connection = connect(endpoint, transport, context)
        self._prefix = os.urandom(8)  # request ids are unique across clients
        self._serial = itertools.count(1)
        self._waiting: dict[bytes, Future[Reply]] = {}
        self._lock = threading.Lock()
        self._closed = False
        self.replies_dropped = 0
        self._thread = threading.Thread(target=self._run, name="generaldomo-client", daemon=True)
        self._thread.start()

    def submit(self, description: str | bytes, payload: Payload = b"") -> Future[Reply]:
        """Send a request; the future gives its :class:`Reply` or raises :class:`RequestFailed`."""
        request_id = self._prefix + next(self._serial).to_bytes(8, "big")
        future: Future[Reply] = Future()
        with self._lock:
            if self._closed:
                raise ClientClosed("the client is closed")
            self._waiting[request_id] = future
        future.add_done_callback(lambda done: self._forget(request_id) if done.cancelled() else None)
        self._connection.send(protocol.gdp_request(request_id, as_bytes(description), as_frames(payload)))
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
        for future in waiting.values():
            with contextlib.suppress(InvalidStateError):
                future.set_exception(ClientClosed("the client was closed before the reply came"))

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ---------------------------------------------------------------------------------------- IO thread

    def _run(self) -> None:
        connection = self._connection
        connection.bind_thread()
        poller = zmq.Poller()
        for item in connection.poll_items:
            poller.register(item, zmq.POLLIN)
        try:
            while not self._closed:
                poller.poll(10 if connection.backlogged else 1000)
                connection.flush()
                while (frames := connection.recv()) is not None:
                    self._on_reply(frames)
        finally:
            connection.close()

    def _on_reply(self, frames: list[bytes]) -> None:
        parsed = protocol.parse_client_reply(frames)
        if parsed is None:
            log.warning("client dropped a message that is not a generaldomo reply")
            return
        request_id, status, body = parsed
        if status is None:
            return  # partial results are not delivered by this API yet
        with self._lock:
            future = self._waiting.pop(request_id, None)
        if future is None:
            self.replies_dropped += 1  # a duplicate, or the answer to a cancelled request
            return
        with contextlib.suppress(InvalidStateError):  # the caller may have cancelled it
            if status == protocol.OK:
                future.set_result(Reply(body))
            else:
                reason = body[0].decode(errors="replace") if body else ""
                future.set_exception(RequestFailed(status, reason))

"""asyncio for clients: ``AsyncClient`` awaits replies on a running event loop.

Rules: one IO thread per client (the :class:`~generaldomo.Client`'s own), never a thread per call. Each call
sends from the loop's thread (sends never block) and wraps the Client's ``concurrent.futures.Future`` with
``asyncio.wrap_future``: the reply wakes the loop through ``call_soon_threadsafe``. Cancelling an await, or a
``timeout`` running out, cancels the request. With a ``serializer``, calls take and return Python objects
(:class:`~generaldomo.peers.typed.TypedClient`); without one, bytes in and :class:`~generaldomo.Reply` out.
Later answers as the Client has them: :meth:`AsyncClient.submit` (``detached=True``) gives an
:class:`AsyncFuture` with the ``request_id``, :meth:`AsyncClient.fetch` awaits the answer by its id (same errors
as :meth:`Client.fetch`). It knows nothing of sockets; async *handlers* are the worker app's
(:mod:`generaldomo.peers.app`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future
from typing import Any

from generaldomo.errors import RequestFailed, RequestTimeout
from generaldomo.peers.app import Description, wire_description
from generaldomo.peers.client import (
    DEFAULT,
    MAX_RESENDS,
    Client,
    Payload,
    Reply,
    RequestFuture,
    _Default,
    fetch_timeout,
    named,
)
from generaldomo.peers.typed import TypedClient, TypedFuture
from generaldomo.sansio.peer.serializers import Serializer
from generaldomo.sansio.wire import wirejson

__all__ = ["AsyncClient", "AsyncFuture"]

_DONE = object()


async def _answer(future: Future[Any], timeout: float | None, timed_out: Callable[[], RequestTimeout]) -> Any:
    """The future's result within ``timeout`` seconds, or ``timed_out()`` (the :class:`RequestTimeout` that
    ``Client`` raises in that case); the future is cancelled then (a request withdrawn, a fetch no longer
    waited for)."""
    try:
        return await asyncio.wait_for(asyncio.wrap_future(future), timeout)
    except TimeoutError:
        if future.done() and not future.cancelled():  # its own error (RequestExpired), or a reply just in time
            return future.result()
        raise timed_out() from None


class AsyncFuture(asyncio.Future[Any]):
    """The answer to a request :meth:`AsyncClient.submit` sent, to await (a :class:`Reply`, or the decoded value
    with a serializer), with the request's ``request_id``; cancelling it withdraws the request."""

    def __init__(self, inner: RequestFuture | TypedFuture) -> None:
        loop = asyncio.get_running_loop()
        super().__init__(loop=loop)
        self._request_id = inner.request_id
        self.add_done_callback(lambda done: inner.cancel() if done.cancelled() else None)
        inner.add_done_callback(
            lambda done: None if loop.is_closed() else loop.call_soon_threadsafe(self._settle, done)
        )

    @property
    def request_id(self) -> bytes:
        """The request's id, as :meth:`AsyncClient.fetch` and the broker's kept answers know it."""
        return self._request_id

    def _settle(self, inner: Future[Any]) -> None:
        if self.done():  # cancelled meanwhile
            return
        if inner.cancelled():
            self.cancel()
        elif (error := inner.exception()) is not None:
            self.set_exception(error)
        else:
            self.set_result(inner.result())


class AsyncClient:
    """``await client.request(description, payload)`` on a running loop; see the module docstring.

    ``endpoint`` may be an existing :class:`Client` (shared, not closed here) or what ``Client`` takes;
    ``client_options`` go to ``Client`` (``heartbeat_interval``, ``liveness``, ``context``).

    Args:
        endpoint: the broker's endpoint, or a :class:`Client` to share.
        transport: ``router`` or ``server``.
        serializer: send and receive values through it (``json``, ``msgpack``, ``pickle``); None: bytes and Replies.
        client_options: what :class:`Client` takes.

    Example::

        async def main():
            async with AsyncClient("tcp://127.0.0.1:5555", serializer="json") as client:
                return await client.request("square", [1, 2], timeout=10)  # [1, 4]
    """

    def __init__(
        self,
        endpoint: str | Client | None = None,
        transport: str = "router",
        *,
        serializer: str | Serializer | None = None,
        **client_options: Any,
    ) -> None:
        self._owned = not isinstance(endpoint, Client)
        self.client = endpoint if isinstance(endpoint, Client) else Client(endpoint, transport, **client_options)
        self.typed = None if serializer is None else TypedClient(self.client, serializer)

    def _submit(
        self, description: Description | bytes, payload: Any, on_partial: Any = None, **fields: Any
    ) -> RequestFuture | TypedFuture:
        if self.typed is not None:
            return self.typed.submit(description, payload, on_partial, **fields)
        return self.client.submit(wire_description(description), payload, on_partial, **fields)

    def submit(
        self, description: Description | bytes, payload: Payload | Any = b"",
        on_partial: Callable[[Any], None] | None = None, **fields: Any,
    ) -> AsyncFuture:  # fmt: skip
        """Send a request from the running loop without waiting, as :meth:`Client.submit` does: the
        :class:`AsyncFuture` gives its answer when awaited (and raises what :meth:`request` raises but the
        timeout), its ``request_id`` the request's id; cancelling it withdraws the request. ``on_partial`` gets
        each partial result on the loop's thread. ``fields``: ``deadline``, ``tenant``, ``priority``,
        ``fail_unknown``, ``detached`` as for :meth:`Client.submit`: ``detached=True`` asks the broker to keep
        the request while this client is gone; :meth:`fetch` gets its answer later, from any client of the same
        CURVE key.

        Args:
            description: the request description.
            payload: bytes or frames, or the value to encode with the serializer.
            on_partial: called with each partial result, on the loop's thread.
            fields: ``detached``, ``deadline``, ``tenant``, ``priority`` and the other keywords of
                :meth:`Client.submit`.
        """
        loop = asyncio.get_running_loop()
        partial = None if on_partial is None else (lambda part: loop.call_soon_threadsafe(on_partial, part))
        return AsyncFuture(self._submit(description, payload, partial, **fields))

    async def fetch(self, request_id: bytes | str, timeout: float | _Default | None = DEFAULT) -> Any:
        """The answer to the request ``request_id`` (a :class:`Reply`, or the decoded value with a serializer), as
        :meth:`Client.fetch` gets it, without blocking the loop: the broker's kept answer, or the answer when it
        comes while the request is queued or running. Raises :class:`~generaldomo.NotFound` when the broker has
        no such request, :class:`~generaldomo.RequestTimeout` when the wait ends (the request runs on), and what
        the answer raises (:class:`~generaldomo.RequestFailed`).

        Args:
            request_id: the request's id (``future.request_id``, or its hex text).
            timeout: seconds to wait (default: the client's ``default_timeout``; None: no limit).
        """
        wait = self.client.default_timeout if isinstance(timeout, _Default) else timeout
        asked = self.client if self.typed is None else self.typed
        future = asked.submit_fetch(request_id)
        return await _answer(future, wait, lambda: fetch_timeout(future.request_id, wait))

    async def request(
        self, description: Description | bytes, payload: Payload | Any = b"", timeout: float | None = None,
        **fields: Any,
    ) -> Any:  # fmt: skip
        """The reply (a :class:`Reply`, or the decoded value with a serializer); raises the errors
        :meth:`Client.request` raises: :class:`~generaldomo.RequestTimeout` after ``timeout`` seconds (also the
        request's deadline, unless the client has ``deadlines=False``), :class:`~generaldomo.RequestFailed` on an
        error reply, :class:`~generaldomo.ClientClosed`, :class:`~generaldomo.HandshakeFailed`. ``fields``:
        ``tenant``, ``priority``.

        Args:
            description: the request description.
            payload: bytes or frames, or the value to encode with the serializer.
            timeout: seconds to wait (None: no limit).
            fields: ``tenant``, ``priority`` and the other keywords of :meth:`Client.submit`.
        """
        client = self.client
        end = None if timeout is None else time.monotonic() + timeout
        left = timeout
        for _ in range(MAX_RESENDS + 1):  # a 429 with retry_after is backpressure: wait, send again (as Client)
            deadline = left if client.deadlines else None
            future = self._submit(description, payload, deadline=deadline, **fields)
            try:
                return await _answer(future, left, lambda: client.timeout_error(description, timeout))
            except RequestFailed as error:
                await asyncio.sleep(client.pause_after(error, description, timeout, end))
                left = None if end is None else end - time.monotonic()
        raise client.timeout_error(description, timeout)

    async def stream(
        self, description: Description | bytes, payload: Payload | Any = b"", timeout: float | None = None
    ) -> AsyncIterator[Any]:
        """Yield the partial results as they come, then the final one; ``timeout``: the longest gap
        (:class:`~generaldomo.RequestTimeout` past it, as from :meth:`Client.stream`).

        Args:
            description: the request description.
            payload: bytes or frames, or the value to encode.
            timeout: the longest gap between two results (None: no limit).
        """
        loop = asyncio.get_running_loop()
        arrivals: asyncio.Queue[Any] = asyncio.Queue()
        future = self._submit(description, payload, lambda part: loop.call_soon_threadsafe(arrivals.put_nowait, part))
        future.add_done_callback(lambda _: loop.call_soon_threadsafe(arrivals.put_nowait, _DONE))
        try:
            while (item := await asyncio.wait_for(arrivals.get(), timeout)) is not _DONE:
                if isinstance(item, Exception):  # a partial result that could not be decoded
                    raise item
                yield item
        except TimeoutError:
            future.cancel()
            raise RequestTimeout(f"nothing from {named(description)} for {timeout} s") from None
        yield future.result()

    async def status(self, timeout: float | None = 10.0) -> dict[str, Any]:
        """The broker's status report (``mmi.status``), without blocking the loop.

        Args:
            timeout: seconds to wait for the report.
        """
        status = self.client.submit("mmi.status", [])
        reply: Reply = await _answer(status, timeout, lambda: self.client.timeout_error("mmi.status", timeout))
        answer: dict[str, Any] = wirejson.loads(reply.payload, None)
        return answer

    def close(self) -> None:
        """Close the Client if this object made it (a short wait for its IO thread)."""
        if self._owned:
            self.client.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()

"""asyncio for clients: ``AsyncClient`` awaits replies on a running event loop.

Rules: one IO thread per client (the :class:`~generaldomo.Client`'s own), never a thread per call. Each call
sends from the loop's thread (sends never block) and wraps the Client's ``concurrent.futures.Future`` with
``asyncio.wrap_future``: the reply wakes the loop through ``call_soon_threadsafe``. Cancelling an await, or a
``timeout`` running out, cancels the request. With a ``serializer``, calls take and return Python objects
(:class:`~generaldomo.peers.typed.TypedClient`); without one, bytes in and :class:`~generaldomo.Reply` out.
It knows nothing of sockets; async *handlers* are the worker app's (:mod:`generaldomo.peers.app`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from concurrent.futures import Future
from typing import Any

from generaldomo.errors import RequestTimeout
from generaldomo.peers.app import Description, wire_description
from generaldomo.peers.client import Client, Payload, Reply
from generaldomo.peers.typed import TypedClient
from generaldomo.sansio.serializers import Serializer

_DONE = object()


async def _reply(client: Client, future: Future[Any], description: Description | bytes, timeout: float | None) -> Any:
    """The future's result within ``timeout`` seconds, or the :class:`RequestTimeout` that ``Client`` raises."""
    try:
        return await asyncio.wait_for(asyncio.wrap_future(future), timeout)
    except TimeoutError:
        if future.done() and not future.cancelled():  # its own error (RequestExpired), or a reply just in time
            return future.result()
        raise client.timeout_error(description, timeout) from None


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
    ) -> Future[Any]:
        if self.typed is not None:
            return self.typed.submit(description, payload, on_partial, **fields)
        return self.client.submit(wire_description(description), payload, on_partial, **fields)

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
        deadline = timeout if self.client.deadlines else None
        future = self._submit(description, payload, deadline=deadline, **fields)
        return await _reply(self.client, future, description, timeout)

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
            raise RequestTimeout(f"nothing from {description!r} for {timeout} s") from None
        yield future.result()

    async def status(self, timeout: float | None = 10.0) -> dict[str, Any]:
        """The broker's status report (``mmi.status``), without blocking the loop.

        Args:
            timeout: seconds to wait for the report.
        """
        reply: Reply = await _reply(self.client, self.client.submit("mmi.status", []), "mmi.status", timeout)
        answer: dict[str, Any] = json.loads(reply.payload)
        return answer

    def close(self) -> None:
        """Close the Client if this object made it (a short wait for its IO thread)."""
        if self._owned:
            self.client.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()

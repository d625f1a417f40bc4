"""A client that sends and receives Python objects: ``TypedClient(client, "json")``.

Rules: a description may be text or a mapping (sent as JSON, for the attributes resolver); each request goes
out as a typed payload of the serializer (a content-type frame and the body, see
:mod:`generaldomo.sansio.peer.serializers`); each reply, partial or final, must come back in the same content
type, or the caller gets :class:`~generaldomo.errors.ContentTypeError` (a worker serving raw
bytes, or another serializer) rather than a wrong value. A worker that gets the wrong content type answers
``415``, raised as :class:`~generaldomo.RequestFailed`. It wraps a :class:`~generaldomo.Client` and shares
its IO thread, and has what the Client has for later answers: ``submit(..., detached=True)``, the future's
``request_id``, :meth:`TypedClient.fetch` (same errors); it knows nothing of sockets.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from concurrent.futures import Future, InvalidStateError
from typing import Any

import generaldomo.errors as errors
from generaldomo.peers.app import Description, wire_description
from generaldomo.peers.client import DEFAULT, Client, Reply, RequestFuture, _Default
from generaldomo.sansio.peer import serializers
from generaldomo.sansio.peer.serializers import Serializer

__all__ = ["TypedClient", "TypedFuture"]


class TypedFuture(Future[Any]):
    """A typed request's future (of the decoded value), with the request's ``request_id``."""

    def __init__(self, request_id: bytes) -> None:
        super().__init__()
        self._request_id = request_id

    @property
    def request_id(self) -> bytes:
        """The request's id, as :meth:`TypedClient.fetch` and the broker's kept answers know it."""
        return self._request_id


class TypedClient:
    """Sends objects through ``serializer`` (``json``, ``msgpack``, ``pickle`` or a Serializer) on ``client``.

    Args:
        client: the :class:`Client` that carries the requests.
        serializer: ``json``, ``msgpack``, ``pickle`` or a Serializer.

    Example::

        with Client("tcp://127.0.0.1:5555") as client:
            typed = TypedClient(client, "json")
            typed.request("square", [1, 2, 3], timeout=10)  # [1, 4, 9]
    """

    def __init__(self, client: Client, serializer: str | Serializer) -> None:
        self.client = client
        self.serializer = serializers.get(serializer)

    def encode(self, value: Any) -> tuple[bytes, bytes]:
        """The payload frames of ``value``.

        Args:
            value: what to send.
        """
        return serializers.encode(self.serializer, value)

    def decode(self, reply: Reply) -> Any:
        """The value a reply carries; raises ContentTypeError or DecodeError.

        Args:
            reply: a :class:`Reply` of a typed service.
        """
        return serializers.decode(self.serializer, reply.frames, "partial reply" if reply.partial else "reply")

    def submit(
        self, description: Description | bytes, value: Any = None, on_partial: Callable[[Any], None] | None = None,
        **fields: Any,
    ) -> TypedFuture:  # fmt: skip
        """Send ``value``; the future gives the decoded result, and its ``request_id`` the request's id.
        ``on_partial`` gets each decoded partial result, on the client's IO thread (a partial that cannot be
        decoded is passed as the exception). ``fields``: ``deadline``, ``tenant``, ``priority``,
        ``fail_unknown`` and ``detached`` as for :meth:`Client.submit` (``detached=True``: the answer may be
        fetched later by its id, :meth:`fetch`).

        Args:
            description: the request description.
            value: what to send.
            on_partial: called with each decoded partial result.
            fields: the keywords of :meth:`Client.submit` (``tenant``, ``priority``, ``deadline``, ``detached``, ...).
        """
        partial = None if on_partial is None else self._partial_callback(on_partial)
        inner = self.client.submit(wire_description(description), self.encode(value), on_partial=partial, **fields)
        return self._decoding(inner)

    def fetch(self, request_id: bytes | str, timeout: float | _Default | None = DEFAULT) -> Any:
        """The decoded answer to the request ``request_id``, as :meth:`Client.fetch` gets it (same waiting, same
        errors: :class:`~generaldomo.NotFound`, :class:`~generaldomo.RequestTimeout`, the answer's
        :class:`~generaldomo.RequestFailed`), decoded as :meth:`decode` does.

        Args:
            request_id: the request's id (``future.request_id``, or its hex text).
            timeout: seconds to wait (default: the client's ``default_timeout``; None: no limit).
        """
        return self.decode(self.client.fetch(request_id, timeout))

    def submit_fetch(self, request_id: bytes | str) -> TypedFuture:
        """Ask for the answer to ``request_id`` without waiting (:meth:`Client.submit_fetch`); the future gives
        it decoded, and cancelling it stops waiting (the request runs on).

        Args:
            request_id: the request's id (bytes, or its hex text).
        """
        return self._decoding(self.client.submit_fetch(request_id))

    def _decoding(self, inner: RequestFuture) -> TypedFuture:
        """A future of ``inner``'s decoded result; cancelling it cancels ``inner``."""
        outer = TypedFuture(inner.request_id)
        outer.add_done_callback(lambda done: inner.cancel() if done.cancelled() else None)
        inner.add_done_callback(lambda done: self._settle(done, outer))
        return outer

    def request(
        self, description: Description | bytes, value: Any = None, timeout: float | None = None, **fields: Any
    ) -> Any:
        """Send ``value`` and wait up to ``timeout`` seconds for the decoded result (raises ``TimeoutError``);
        ``fields``: ``tenant``, ``priority`` as for :meth:`Client.request` (the timeout is the deadline).

        Args:
            description: the request description.
            value: what to send.
            timeout: seconds to wait (None: no limit).
            fields: as for :meth:`submit`.
        """
        return self.decode(self.client.request(wire_description(description), self.encode(value), timeout, **fields))

    def stream(
        self, description: Description | bytes, value: Any = None, timeout: float | None = None
    ) -> Iterator[Any]:
        """Yield the decoded partial results, then the decoded final result (see :meth:`Client.stream`).

        Args:
            description: the request description.
            value: what to send.
            timeout: the longest gap between two results (None: no limit).
        """
        for reply in self.client.stream(wire_description(description), self.encode(value), timeout):
            yield self.decode(reply)

    def _partial_callback(self, on_partial: Callable[[Any], None]) -> Callable[[Reply], None]:
        def deliver(reply: Reply) -> None:
            try:
                value = self.decode(reply)
            except (errors.ContentTypeError, errors.DecodeError) as error:
                value = error
            on_partial(value)

        return deliver

    def _settle(self, inner: Future[Reply], outer: Future[Any]) -> None:
        with contextlib.suppress(InvalidStateError):  # the caller may have cancelled ``outer``
            if inner.cancelled():
                outer.cancel()
            elif (error := inner.exception()) is not None:
                outer.set_exception(error)
            else:
                try:
                    outer.set_result(self.decode(inner.result()))
                except (errors.ContentTypeError, errors.DecodeError) as wrong:
                    outer.set_exception(wrong)

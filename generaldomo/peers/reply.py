"""A request's answer as the client's callers see it: the :class:`Reply`, the future that gives it, and the
session's resolution made into one or the other.

This module owns what a caller holds while a request is out: a :class:`RequestFuture` (a
``concurrent.futures.Future`` with the request's id) and, once the broker answered, its :class:`Reply` or
:class:`~generaldomo.errors.RequestFailed`. The future leaves waiting and withdrawing to its :class:`Owner`
(the client's IO shell, :mod:`generaldomo.peers.client_io`); it knows nothing of sockets or threads.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from concurrent.futures._base import CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED
from typing import Final, Protocol, TypeVar

import attrs

from generaldomo.errors import RequestFailed, RequestTimeout
from generaldomo.sansio.peer.session import Progress, Resolve
from generaldomo.sansio.wire import protocol

__all__ = ["Call", "OnPartial", "Owner", "Reply", "RequestFuture", "fetch_timeout", "partial", "resolve"]

X = TypeVar("X")
OnPartial = Callable[["Reply"], None]
_DONE_STATES: Final = frozenset((CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED))  # a Future's, once it is done


@attrs.frozen(slots=True)
class Reply:
    """A successful result: the frames the worker returned, and where the time went.

    ``queued``: seconds the request waited in the broker before a worker got it (including earlier attempts
    when it was reissued); ``served``: seconds from dispatch to result. ``sent`` and ``received`` are this
    client's ``time.monotonic()`` when the request left and the reply arrived. Together they draw a timeline.

    Args:
        frames: the result's frames (``payload`` is the one frame of a one-frame result).
        queued: see above; None when the broker sent no timing.
        served: see above; None when the broker sent no timing.
        sent: see above.
        received: see above.
        partial: True for a partial result a streaming worker sent before its final one.
        request_id: the id of the request this answers (``Future.request_id``).

    Example::

        reply = client.request("echo", b"hello", timeout=10)
        reply.payload, reply.queued, reply.served, reply.request_id.hex()
    """

    frames: tuple[bytes, ...]
    queued: float | None = None
    served: float | None = None
    sent: float | None = None
    received: float | None = None
    partial: bool = False
    request_id: bytes | None = None  # the id of the request this answers (see Future.request_id)

    @property
    def payload(self) -> bytes:
        """The result when it is one frame (the usual case)."""
        if len(self.frames) != 1:
            raise ValueError(f"the reply has {len(self.frames)} frames; read .frames")
        return self.frames[0]


class Owner(Protocol):
    """What a :class:`RequestFuture` asks of the client that made it."""

    def _cancel(self, request_id: bytes) -> None:
        """Withdraw the request (CANCEL to the broker)."""

    def _await(self, future: Future[Reply], timeout: float | None, get: Callable[[float | None], X]) -> X:
        """``get(timeout)`` once ``future`` is done, having read the socket meanwhile if it may."""


class RequestFuture(Future[Reply]):
    """A request's future (a ``concurrent.futures.Future`` of its :class:`Reply`) with its ``request_id``; a
    thread waiting for it reads the socket itself while it may (:mod:`generaldomo.peers.client_io`)."""

    def __init__(self, client: Owner, request_id: bytes) -> None:
        super().__init__()
        self._client = client
        self._request_id = request_id

    @property
    def request_id(self) -> bytes:
        """The request's id, as the broker and its kept answers know it (the ``Reply`` carries it too)."""
        return self._request_id

    def done(self) -> bool:
        """Whether the request was answered or cancelled: ``Future.done``'s test without its condition's lock (one
        attribute read needs none; the lock's Python ``__enter__``/``__exit__`` are two calls more per look, and a
        round trip looks twice)."""
        return self._state in _DONE_STATES

    def cancel(self) -> bool:
        """Withdraw the request (CANCEL to the broker) unless it is answered already."""
        if not super().cancel():
            return False
        self._client._cancel(self._request_id)
        return True

    def result(self, timeout: float | None = None) -> Reply:
        if self.done():
            return super().result()
        return self._client._await(self, timeout, super().result)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if self.done():
            return super().exception()
        return self._client._await(self, timeout, super().exception)


class Call:
    """Who waits for a request: its future and partial-result callback (the session's token). A plain class: one
    is made per request, and an attrs class's ``__init__`` sets a frozen record's fields one Python call each."""

    __slots__ = ("future", "on_partial")

    def __init__(self, future: Future[Reply], on_partial: OnPartial | None) -> None:
        self.future: Final = future
        self.on_partial: Final = on_partial

    def __repr__(self) -> str:
        return f"Call(future={self.future!r}, on_partial={self.on_partial!r})"


def fetch_timeout(request_id: bytes, timeout: float | None) -> RequestTimeout:
    """The :class:`RequestTimeout` of a fetch of ``request_id`` left unanswered for ``timeout`` seconds."""
    return RequestTimeout(f"no answer to request {request_id.hex()} within {timeout} s")


def partial(action: Progress[Call]) -> Reply:
    """The :class:`Reply` of a partial result."""
    return Reply(action.body, sent=action.sent, received=action.received, partial=True, request_id=action.request_id)


def resolve(action: Resolve[Call]) -> None:
    """Settle a request's future with its answer: a :class:`Reply`, or the :class:`RequestFailed` its status
    says (a future its caller cancelled stays as it is)."""
    future = action.token.future
    try:  # (not contextlib.suppress: three Python calls per reply)
        if action.status == protocol.OK:
            queued, served = action.timing or (None, None)
            reply = Reply(action.body, queued, served, action.sent, action.received, request_id=action.request_id)
            future.set_result(reply)
        else:
            reason = action.body[0].decode(errors="replace") if action.body else ""
            retry = protocol.parse_retry_after(action.body) if action.status == protocol.OVER_BUDGET else None
            future.set_exception(RequestFailed.of(action.status, reason, retry))
    except InvalidStateError:  # the caller may have cancelled it
        pass

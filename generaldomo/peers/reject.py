"""A handler's way to answer with an error status of its choosing.

Rule: a handler that raises :class:`Reject` gives the client that status (400 to 599) and reason; any other
exception gives ``500`` with the exception's type and message. ``Reject(429, reason, retry_after=seconds)`` is
"slow down": the broker does not answer the client but puts the task back at the head of its queue, holds
the service's dispatches for ``retry_after`` and lowers its dispatch rate (docs/protocol.rst, *Backpressure*).
``Reject(503, reason, retry=True)`` is "failed, but may succeed if tried again": the broker tries the task again,
after a backoff, as the service's retry policy allows, and the client gets this answer only once the task has had
its retries (docs/protocol.rst, *Retries*). It knows nothing of sockets.
"""

from __future__ import annotations

import math

from generaldomo.sansio.wire import protocol

__all__ = ["Reject"]


class Reject(Exception):
    """Raised by a handler: the client gets ``status`` (an int, 400 to 599) and ``reason``; a 429's
    ``retry_after`` (seconds) tells the broker how long to hold the service; a 503's ``retry`` asks the broker to
    try the task again, as the service's retry policy allows (by default 3 times, after 0.1 s, 0.2 s, 0.4 s, with
    jitter, within the request's deadline).

    Args:
        status: the status the client gets, 400 to 599.
        reason: the text it gets.
        retry_after: for a ``429``, the seconds the broker should hold the service back.
        retry: for a ``503``, the failure is transient: the broker tries the task again before answering.

    Example::

        def lookup(payload: bytes) -> bytes:
            if payload not in table:
                raise Reject(404, "no such item")
            return table[payload]


        def fetch(payload: bytes) -> bytes:
            try:
                return upstream.get(payload)
            except ConnectionError as error:  # transient: worth another try
                raise Reject(503, f"upstream unreachable: {error}", retry=True) from error
    """

    def __init__(self, status: int, reason: str, retry_after: float | None = None, *, retry: bool = False) -> None:
        if not 400 <= status <= 599:
            raise ValueError(f"a rejection's status is 400 to 599, not {status}")
        if retry_after is not None and (status != 429 or not 0 <= retry_after < math.inf):
            raise ValueError("retry_after goes with status 429, as a number of seconds of at least 0")
        if retry and status != 503:
            raise ValueError(f"retry=True goes with status 503 (the service is unavailable for now), not {status}")
        super().__init__(f"{status}: {reason}")
        self.status = status
        self.reason = reason
        self.retry_after = retry_after
        self.retry = retry

    @property
    def frames(self) -> tuple[bytes, ...]:
        """The result frames: the reason, then the retry-after frame or the retry mark if any."""
        if self.retry:
            return self.reason.encode(), protocol.RETRY_MARK
        if self.retry_after is None:
            return (self.reason.encode(),)
        return self.reason.encode(), protocol.retry_after_frame(self.retry_after)

    @property
    def status_bytes(self) -> bytes:
        """The status as it travels (ASCII digits)."""
        return str(self.status).encode()

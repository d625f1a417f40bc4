"""A handler's way to answer with an error status of its choosing.

Rule: a handler that raises :class:`Reject` gives the client that status (400 to 599) and reason; any other
exception gives ``500`` with the exception's type and message. ``Reject(429, reason, retry_after=seconds)`` is
"slow down": the broker does not answer the client but puts the task back at the head of its queue, holds
the service's dispatches for ``retry_after`` and lowers its dispatch rate (docs/protocol.rst, *Backpressure*).
It knows nothing of sockets.
"""

from __future__ import annotations

import math

from generaldomo.sansio.wire import protocol

__all__ = ["Reject"]


class Reject(Exception):
    """Raised by a handler: the client gets ``status`` (an int, 400 to 599) and ``reason``; a 429's
    ``retry_after`` (seconds) tells the broker how long to hold the service.

    Args:
        status: the status the client gets, 400 to 599.
        reason: the text it gets.
        retry_after: for a ``429``, the seconds the broker should hold the service back.

    Example::

        def lookup(payload: bytes) -> bytes:
            if payload not in table:
                raise Reject(404, "no such item")
            return table[payload]
    """

    def __init__(self, status: int, reason: str, retry_after: float | None = None) -> None:
        if not 400 <= status <= 599:
            raise ValueError(f"a rejection's status is 400 to 599, not {status}")
        if retry_after is not None and (status != 429 or not 0 <= retry_after < math.inf):
            raise ValueError("retry_after goes with status 429, as a number of seconds of at least 0")
        super().__init__(f"{status}: {reason}")
        self.status = status
        self.reason = reason
        self.retry_after = retry_after

    @property
    def frames(self) -> tuple[bytes, ...]:
        """The result frames: the reason, then the retry-after frame if any."""
        if self.retry_after is None:
            return (self.reason.encode(),)
        return self.reason.encode(), protocol.retry_after_frame(self.retry_after)

    @property
    def status_bytes(self) -> bytes:
        """The status as it travels (ASCII digits)."""
        return str(self.status).encode()

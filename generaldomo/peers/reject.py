"""A handler's way to answer with an error status of its choosing.

Rule: a handler that raises :class:`Reject` gives the client that status (400 to 599) and reason; any other
exception gives ``500`` with the exception's type and message. It knows nothing of sockets or the protocol.
"""

from __future__ import annotations


class Reject(Exception):
    """Raised by a handler: the client gets ``status`` (an int, 400 to 599) and ``reason``."""

    def __init__(self, status: int, reason: str) -> None:
        if not 400 <= status <= 599:
            raise ValueError(f"a rejection's status is 400 to 599, not {status}")
        super().__init__(f"{status}: {reason}")
        self.status = status
        self.reason = reason

    @property
    def status_bytes(self) -> bytes:
        """The status as it travels (ASCII digits)."""
        return str(self.status).encode()

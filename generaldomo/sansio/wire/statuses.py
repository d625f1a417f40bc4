"""The status codes a reply carries: in a generaldomo FINAL's status frame, and in every dialect's MMI replies.

This module owns the codes (see ``docs/protocol.rst``) and what a status frame is; it knows nothing of the
messages that carry one, nor of what the broker does on each.
"""

from __future__ import annotations

from typing import Final

from generaldomo.sansio.wire.limits import STATUS

__all__ = [
    "BAD_GATEWAY",
    "BAD_REQUEST",
    "EXPIRED",
    "FORBIDDEN",
    "NOT_FOUND",
    "NOT_IMPLEMENTED",
    "OK",
    "OVER_BUDGET",
    "TOO_LARGE",
    "UNAVAILABLE",
    "WORKER_ERROR",
    "is_status",
]

OK: Final = b"200"
BAD_REQUEST: Final = b"400"
NOT_FOUND: Final = b"404"
FORBIDDEN: Final = b"403"
TOO_LARGE: Final = b"413"
OVER_BUDGET: Final = b"429"
WORKER_ERROR: Final = b"500"
NOT_IMPLEMENTED: Final = b"501"
BAD_GATEWAY: Final = b"502"  # the bridge: the upstream broker's reply was malformed
UNAVAILABLE: Final = b"503"
EXPIRED: Final = b"504"


def is_status(frame: bytes) -> bool:
    """True when ``frame`` is a status: exactly 3 ASCII digits."""
    return len(frame) == STATUS.high and frame.isdigit() and frame.isascii()

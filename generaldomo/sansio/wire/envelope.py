"""Return addresses on the ROUTER link: a Majordomo envelope of one or more hops.

This module owns the envelope rule. The return address is every frame before the protocol header frame (one
of GDPC01, GDPW01, MDPC01, MDPW01, MDPC02, MDPW02), not counting an empty delimiter frame right before the
header: that frame belongs to the MDP/0.1 (and majortomo) message and stays with it. The ROUTER socket's own
identity frame is always the first hop. A direct peer (one hop) has its identity bytes as address, exactly as
before envelopes were handled; several hops (ROUTER/DEALER proxies in between) give a tuple, outermost first.
At most :data:`MAX_HOPS` hops of at most :data:`MAX_HOP` bytes each (:mod:`generaldomo.sansio.wire.limits`): a message
whose header is not within them, or with a longer hop, is handed on unchanged as a direct peer's, for the core
to find malformed. It knows nothing of sockets or of what the frames after the header mean.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from generaldomo.sansio.wire.dialects import HEADERS
from generaldomo.sansio.wire.events import Frame
from generaldomo.sansio.wire.limits import HOP, HOPS

__all__ = ["HEADER_FRAMES", "MAX_HOP", "MAX_HOPS", "Envelope", "join", "split"]

MAX_HOPS: Final = HOPS.high
MAX_HOP: Final = HOP.high
_MIN_HOP: Final = HOP.low
HEADER_FRAMES: Final = frozenset(header for _, header in HEADERS)

Envelope = bytes | tuple[bytes, ...]


def split(identity: bytes, frames: list[Frame]) -> tuple[Envelope, list[Frame]]:
    """``(address, message)`` for ``frames`` received from ROUTER peer ``identity`` (a large frame may be a
    buffer: a hop is copied, being short)."""
    first = frames[0] if frames else None
    if first in HEADER_FRAMES or (first == b"" and len(frames) > 1 and frames[1] in HEADER_FRAMES):
        return identity, frames  # a direct peer: the common case, decided in two looks
    for index in range(1, min(len(frames), MAX_HOPS + 1)):
        if frames[index] in HEADER_FRAMES:
            start = index - 1 if frames[index - 1] == b"" else index
            if start == 0 or start >= MAX_HOPS:
                break
            hops = frames[:start]
            if not all(_MIN_HOP <= len(hop) <= MAX_HOP for hop in hops):
                break
            return (identity, *(bytes(hop) for hop in hops)), frames[start:]
    return identity, frames


def join(address: Envelope) -> Sequence[bytes]:
    """The frames that route a message back to ``address`` through a ROUTER socket."""
    return (address,) if isinstance(address, bytes) else address

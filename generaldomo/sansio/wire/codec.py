"""Pack a list of frames into one message part and back.

This module owns the frame-packing layout used where a socket carries single-part messages only (CLIENT and
SERVER). It is CZMQ's ``zmsg_encode`` layout: each frame is prefixed by its length, one byte when the length is
below 255, otherwise a 0xFF byte and a 4-byte big-endian length; frames are concatenated. Decoding does bounded
work: it stops at ``max_frames`` frames, so that a part of 60 million zero bytes costs no more than a part of
``max_frames`` frames. It knows nothing of sockets or of what the frames mean.
"""

from __future__ import annotations

from collections.abc import Sequence

import generaldomo.errors as errors
from generaldomo.compat import moved_names
from generaldomo.sansio.wire.events import Frame

# the errors' old paths here: the same classes, with a DeprecationWarning (they live in generaldomo.errors)
__getattr__ = moved_names(__name__, "generaldomo", ["CodecError", "TooManyFrames"])

__all__ = ["decode", "encode"]

_LONG = 0xFF
_MAX_FRAME = 0xFFFFFFFF


def encode(frames: Sequence[Frame]) -> bytes:
    """Pack ``frames`` into one bytes object, in time linear in their total size."""
    parts: list[Frame] = []
    append = parts.append
    for frame in frames:
        size = len(frame)
        if size < _LONG:
            append(size.to_bytes(1, "big"))
        elif size <= _MAX_FRAME:
            append(b"\xff" + size.to_bytes(4, "big"))
        else:
            raise errors.CodecError(f"frame of {size} bytes is too large to encode")
        append(frame)
    return b"".join(parts)


def decode(data: bytes | memoryview, max_frames: int | None = None) -> list[bytes]:
    """Unpack bytes made by :func:`encode`; raise :class:`CodecError` if they are truncated or malformed, and
    :class:`TooManyFrames` as soon as they hold more than ``max_frames`` frames (None: no limit)."""
    frames: list[bytes] = []
    append = frames.append
    view = memoryview(data)
    end = len(data)
    pos = 0
    left = -1 if max_frames is None else max_frames
    while pos < end:
        if left == 0:
            raise errors.TooManyFrames(f"more than {max_frames} frames")
        left -= 1
        size = data[pos]
        pos += 1
        if size == _LONG:
            if pos + 4 > end:
                raise errors.CodecError(f"truncated length prefix at byte {pos - 1}")
            size = int.from_bytes(view[pos : pos + 4], "big")
            pos += 4
        if pos + size > end:
            raise errors.CodecError(f"frame of {size} bytes at byte {pos} runs past the end ({end} bytes)")
        append(bytes(view[pos : pos + size]))
        pos += size
    return frames

"""Pack a list of frames into one message part and back.

This module owns the frame-packing layout used where a socket carries single-part messages only (CLIENT and
SERVER). It is CZMQ's ``zmsg_encode`` layout: each frame is prefixed by its length, one byte when the length is
below 255, otherwise a 0xFF byte and a 4-byte big-endian length; frames are concatenated. It knows nothing of
sockets or of what the frames mean.
"""

from __future__ import annotations

from collections.abc import Sequence

_LONG = 0xFF
_MAX_FRAME = 0xFFFFFFFF


class CodecError(ValueError):
    """The bytes are not a well-formed sequence of length-prefixed frames."""


def encode(frames: Sequence[bytes]) -> bytes:
    """Pack ``frames`` into one bytes object, in time linear in their total size."""
    parts: list[bytes] = []
    append = parts.append
    for frame in frames:
        size = len(frame)
        if size < _LONG:
            append(size.to_bytes(1, "big"))
        elif size <= _MAX_FRAME:
            append(b"\xff" + size.to_bytes(4, "big"))
        else:
            raise CodecError(f"frame of {size} bytes is too large to encode")
        append(frame)
    return b"".join(parts)


def decode(data: bytes) -> list[bytes]:
    """Unpack bytes made by :func:`encode`; raise :class:`CodecError` if they are truncated or malformed."""
    frames: list[bytes] = []
    append = frames.append
    view = memoryview(data)
    end = len(data)
    pos = 0
    while pos < end:
        size = data[pos]
        pos += 1
        if size == _LONG:
            if pos + 4 > end:
                raise CodecError(f"truncated length prefix at byte {pos - 1}")
            size = int.from_bytes(view[pos : pos + 4], "big")
            pos += 4
        if pos + size > end:
            raise CodecError(f"frame of {size} bytes at byte {pos} runs past the end ({end} bytes)")
        append(bytes(view[pos : pos + size]))
        pos += size
    return frames

"""What the peers' callers hand over as payloads and names, made into frames and text.

This module owns the checks a client's and a worker's arguments pass before anything is sent: a payload is
bytes or a sequence of bytes frames (never ``str``), a description is text or bytes, a CURVE key pair is two
keys. It knows nothing of sockets, sessions or replies.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["Keys", "Payload", "as_bytes", "as_frames", "named"]

Payload = bytes | bytearray | memoryview | Sequence[bytes | bytearray | memoryview]
Keys = tuple[str | bytes, str | bytes]


def as_frames(payload: object, what: str = "payload") -> tuple[bytes, ...]:
    """One frame for bytes, or the given frames; ``TypeError`` for anything else (``str`` included)."""
    if isinstance(payload, bytes):
        return (payload,)
    if isinstance(payload, bytearray | memoryview):
        return (bytes(payload),)
    if isinstance(payload, str | dict) or not isinstance(payload, Sequence):
        raise TypeError(
            f"the {what} is a {type(payload).__name__}; it must be bytes or a sequence of bytes frames "
            "(encode text yourself, e.g. text.encode())"
        )
    frames = tuple(payload)
    for n, frame in enumerate(frames):
        if not isinstance(frame, bytes | bytearray | memoryview):
            raise TypeError(f"frame {n} of the {what} is a {type(frame).__name__}; frames must be bytes")
    return tuple(bytes(frame) for frame in frames)


def named(description: object) -> str:
    """A description as messages name it, whether given as text or bytes: ``'square'`` (bytes that are not
    UTF-8 keep their ``b'...'`` form)."""
    if isinstance(description, bytes):
        try:
            return repr(description.decode())
        except UnicodeDecodeError:
            return repr(description)
    return repr(description)


def as_bytes(text: str | bytes) -> bytes:
    """UTF-8 for text; bytes as they are (descriptions)."""
    return text.encode() if isinstance(text, str) else text

"""Serializers: Python objects to payload frames and back, with the serializer's name on the wire.

Rules (a convention between clients and workers; the broker carries the frames unchanged, see
docs/protocol.rst, "Typed payloads"):

- Bytes stay the default: a payload without a serializer is sent as given, with no marker.
- A typed payload (request, partial or final result) is exactly two frames: a *content-type frame*,
  ``b"\\x00content-type:" + name`` (name in ASCII, e.g. ``json``), then the encoded body.
- A receiver that expects serializer ``S`` and gets another content type, or raw bytes, raises
  :class:`ContentTypeError` (a worker answers ``415``); a body ``S`` cannot decode raises :class:`DecodeError`
  (``400``). Nothing is ever decoded with the wrong serializer.
- ``pickle`` is never chosen implicitly: it is used only where a caller names it (it runs code on load).

It must not know sockets, clocks or the broker; ``msgpack`` is imported on first use (the optional extra
``generaldomo[msgpack]``).
"""

from __future__ import annotations

import dataclasses
import json
import pickle
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import generaldomo.errors as errors
from generaldomo.compat import moved_names

# the errors' old paths here: the same classes, with a DeprecationWarning (they live in generaldomo.errors)
__getattr__ = moved_names(__name__, "generaldomo", ["ContentTypeError", "DecodeError"])

__all__ = [
    "JSON",
    "MARKER",
    "MAX_NAME",
    "PICKLE",
    "Codec",
    "Serializer",
    "content_type",
    "decode",
    "encode",
    "get",
    "names",
]


MARKER = b"\x00content-type:"
MAX_NAME = 64


class Serializer(Protocol):
    """What a serializer offers: a short ASCII ``name`` that travels on the wire, ``dumps`` and ``loads``."""

    @property
    def name(self) -> str: ...

    def dumps(self, value: Any) -> bytes: ...

    def loads(self, data: bytes) -> Any: ...


@dataclasses.dataclass(frozen=True, slots=True)
class Codec:
    """A serializer made of two functions."""

    name: str
    dumps: Callable[[Any], bytes]
    loads: Callable[[bytes], Any]


def _json_dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _pickle_dumps(value: Any) -> bytes:
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def _msgpack() -> Codec:
    try:
        import msgpack  # type: ignore[import-untyped,unused-ignore]
    except ImportError as missing:
        raise ImportError("the msgpack serializer needs msgpack: pip install 'generaldomo[msgpack]'") from missing
    return Codec(
        "msgpack",
        lambda value: bytes(msgpack.packb(value, use_bin_type=True)),
        lambda data: msgpack.unpackb(data, raw=False),
    )


JSON = Codec("json", _json_dumps, json.loads)
PICKLE = Codec("pickle", _pickle_dumps, pickle.loads)
_BUILT_IN: dict[str, Callable[[], Serializer]] = {"json": lambda: JSON, "pickle": lambda: PICKLE, "msgpack": _msgpack}


def names() -> list[str]:
    """The names of the built-in serializers."""
    return sorted(_BUILT_IN)


def get(serializer: str | Serializer) -> Serializer:
    """The serializer of a built-in name (``json``, ``msgpack``, ``pickle``), or the given serializer."""
    if not isinstance(serializer, str):
        _check_name(serializer.name)
        return serializer
    try:
        return _BUILT_IN[serializer]()
    except KeyError:
        raise ValueError(f"unknown serializer {serializer!r}; built in: {', '.join(sorted(_BUILT_IN))}") from None


def _check_name(name: str) -> None:
    if not name or len(name) > MAX_NAME or not name.isascii() or not name.isprintable():
        raise ValueError(f"a serializer's name must be 1 to {MAX_NAME} printable ASCII characters: {name!r}")


def content_type(frames: Sequence[bytes]) -> str | None:
    """The content type a payload names, or None for raw bytes."""
    if not frames or not frames[0].startswith(MARKER):
        return None
    return frames[0][len(MARKER) : len(MARKER) + MAX_NAME].decode("ascii", errors="replace")


def encode(serializer: Serializer, value: Any) -> tuple[bytes, bytes]:
    """The two frames of a typed payload."""
    return MARKER + serializer.name.encode("ascii"), serializer.dumps(value)


def decode(serializer: Serializer, frames: Sequence[bytes], what: str = "payload") -> Any:
    """The value a typed payload carries; raises :class:`ContentTypeError` or :class:`DecodeError`."""
    actual = content_type(frames)
    if actual != serializer.name:
        raise errors.ContentTypeError(serializer.name, actual, what)
    if len(frames) != 2:
        raise errors.DecodeError(f"a {actual} {what} has 2 frames (content type, body), not {len(frames)}")
    try:
        return serializer.loads(bytes(frames[1]))
    except Exception as error:  # any serializer's failure means the same: not a valid body
        raise errors.DecodeError(f"cannot decode the {what} as {actual}: {type(error).__name__}: {error}") from error

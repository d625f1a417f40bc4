"""The frames with a layout of their own inside a message: a worker's peer info, a FINAL's timing, a 429's
retry-after, a 503's retry mark.

This module owns these four layouts (see ``docs/protocol.rst``), each with its writer and its reader; readers
never raise and check every value against its bounds in :mod:`generaldomo.sansio.wire.limits`. It knows nothing
of the messages around the frames, of clocks or of sockets.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable, Sequence
from typing import Any, Final

from generaldomo.errors import WireJSONError
from generaldomo.sansio.wire.events import Frame
from generaldomo.sansio.wire.limits import HOST, PEER_INFO, PID, WORKER_ID
from generaldomo.sansio.wire.wirejson import loads as json_loads

__all__ = [
    "FEATURES",
    "MAX_HOST",
    "MAX_INFO",
    "MAX_RETRY_AFTER_FRAME",
    "RETRY_MARK",
    "marked_retry",
    "parse_retry_after",
    "parse_timing",
    "read_worker_info",
    "retry_after_frame",
    "timing",
    "worker_info",
]

# A plain generaldomo READY may end with one peer-info frame: a JSON object (limits.PEER_INFO), whose keys "host"
# (printable text, limits.HOST) and "pid" (a whole number, limits.PID) say where the worker runs.
MAX_INFO: Final = PEER_INFO.high
MAX_HOST: Final = HOST.high
# The key "features" lists the GDP additions the worker understands (other names are ignored). "fields": the
# broker may hand it a task as REQUEST+FIELDS (with the client's deadline); "cancel": it may send CANCEL.
FEATURES: Final = frozenset({"fields", "cancel"})
# The key "id" is the worker's own name for itself, the same across its reconnects (printable text,
# limits.WORKER_ID): a READY or RESUME with it from a new connection retires the registration of the old one.


def read_worker_info(frame: bytes | memoryview) -> tuple[str | None, int | None, frozenset[str], str | None] | None:
    """``(host, pid, features, id)`` of a peer-info frame (None for a host, pid or id that is absent or not valid;
    features: the known names among those listed), or None if the frame is not a JSON object within
    :data:`~generaldomo.sansio.wire.limits.PEER_INFO`; never raises."""
    if not PEER_INFO.fits(frame):
        return None
    data = bytes(frame)  # (the same object for bytes; a memoryview, which the links may hand over, copied)
    if not data.startswith(b"{"):
        return None
    try:
        info: Any = json_loads(data, PEER_INFO.high)
    except WireJSONError:
        return None
    if not isinstance(info, dict):
        return None
    host, pid, listed, name = info.get("host"), info.get("pid"), info.get("features"), info.get("id")
    valid_pid = isinstance(pid, int) and not isinstance(pid, bool) and PID.admits(pid)
    features = FEATURES.intersection(f for f in listed if isinstance(f, str)) if isinstance(listed, list) else ()
    return _text(host, HOST.admits), (pid if valid_pid else None), frozenset(features), _text(name, WORKER_ID.admits)


def _text(value: object, admits: Callable[[int], bool]) -> str | None:
    """``value`` if it is printable text of a length ``admits``, else None."""
    return value if isinstance(value, str) and admits(len(value)) and value.isprintable() else None


def worker_info(
    host: str | None, pid: int | None, features: frozenset[str] = FEATURES, name: str | None = None
) -> bytes:
    """The peer-info frame of a plain READY (and of a RESUME): the worker's host name and process id, and its
    ``name`` for itself across reconnects, its ``id`` (absent ones left out). A host or id the broker would not
    take (not printable, longer than its limit, or a host so long once escaped that the frame would exceed
    :data:`MAX_INFO`) is left out too, so that the frame never makes the READY malformed."""
    host, name = _text(host, HOST.admits), _text(name, WORKER_ID.admits)
    frame = _info_frame(host, pid, features, name)
    return frame if len(frame) <= MAX_INFO else _info_frame(None, pid, features, name)


def _info_frame(host: str | None, pid: int | None, features: frozenset[str], name: str | None) -> bytes:
    pairs = (("host", host), ("pid", pid), ("id", name))
    info: dict[str, object] = {key: value for key, value in pairs if value is not None}
    if features:
        info["features"] = sorted(features)
    return json.dumps(info, separators=(",", ":")).encode()


_TIMING: Final = struct.Struct(">dd")
MAX_RETRY_AFTER_FRAME: Final = 16  # bytes of a 429's retry-after frame


def parse_retry_after(body: Sequence[Frame]) -> float | None:
    """The seconds a worker's 429 asks the broker to wait (its second frame: decimal ASCII, at most
    :data:`MAX_RETRY_AFTER_FRAME` bytes, finite, not negative), or None if it gives none that is valid."""
    if len(body) < 2 or not 0 < len(body[1]) <= MAX_RETRY_AFTER_FRAME:
        return None
    text = bytes(body[1])
    if not all(c in b"0123456789." for c in text):
        return None
    try:
        seconds = float(text)
    except ValueError:
        return None
    return seconds if 0 <= seconds < float("inf") else None


def retry_after_frame(seconds: float) -> bytes:
    """The retry-after frame of a 429 result: ``seconds`` as decimal ASCII (milliseconds kept)."""
    if not 0 <= seconds < float("inf"):
        raise ValueError(f"retry_after is a number of seconds of at least 0, not {seconds!r}")
    return b"%.3f" % seconds


RETRY_MARK: Final = b"retry"  # the second frame of a worker's 503 whose task may be tried again


def marked_retry(status: bytes, body: Sequence[Frame]) -> bool:
    """True when a worker's result with ``status`` and ``body`` is a ``503`` marked for a retry: the reason, then
    the frame :data:`RETRY_MARK`, and nothing else."""
    return status == b"503" and len(body) == 2 and body[1] == RETRY_MARK


def timing(queued: float, served: float) -> bytes:
    """The timing frame of a generaldomo FINAL: seconds queued and seconds with the worker, as two doubles."""
    return _TIMING.pack(queued, served)


def parse_timing(frame: bytes) -> tuple[float, float] | None:
    """``(queued, served)`` seconds from a timing frame, or None if it carries none (empty, not 16 bytes, or
    values that are not finite and not negative: :data:`~generaldomo.sansio.wire.limits.TIMING`)."""
    if len(frame) != _TIMING.size:
        return None
    queued, served = _TIMING.unpack(frame)
    return (queued, served) if _duration(queued) and _duration(served) else None


def _duration(seconds: float) -> bool:
    return math.isfinite(seconds) and seconds >= 0.0

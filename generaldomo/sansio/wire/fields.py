"""The fields frame of a request: by when its sender needs the answer, not before when, its tenant, priority, flags
and trace context.

This module owns that frame's layout (see ``docs/protocol.rst``, "Request fields"), its writer and its reader,
used by the broker's reader (a GDP client's REQUEST+FIELDS), its writer (the REQUEST+FIELDS it hands a worker)
and the peers' side. Every field is checked against its bounds in :mod:`generaldomo.sansio.wire.limits`; the
trace context's values (:mod:`generaldomo.sansio.wire.tracecontext`) are the one exception to "malformed makes
the frame malformed": a malformed one is dropped from the request (and said why), the request goes on. It
knows nothing of the messages around the frame, of clocks or of sockets.
"""

from __future__ import annotations

import math
import struct
from typing import Final

from generaldomo.sansio.wire.limits import DEADLINE_MS, FIELDS_FRAME, NOT_BEFORE_MS, PRIORITY, TENANT
from generaldomo.sansio.wire.tracecontext import TraceContext, fit_tracestate, read_trace

__all__ = [
    "FIELD_DEADLINE",
    "FIELD_FLAGS",
    "FIELD_NOT_BEFORE",
    "FIELD_PRIORITY",
    "FIELD_TENANT",
    "FIELD_TRACEPARENT",
    "FIELD_TRACESTATE",
    "FLAGS",
    "FLAG_DETACHED",
    "FLAG_KNOWN_SERVICE",
    "MAX_DEADLINE_MS",
    "MAX_FIELDS",
    "MAX_NOT_BEFORE_MS",
    "MAX_PRIORITY",
    "MAX_TENANT",
    "MIN_PRIORITY",
    "Fields",
    "deadline_field",
    "parse_fields",
    "request_fields",
    "trace_entries",
]

# A request's fields (a GDP REQUEST+FIELDS, and the broker's REQUEST+FIELDS to a worker): entries of one tag
# byte, one length byte and that many value bytes, each tag at most once; unknown tags are skipped, so that
# fields can be added without a new layout.
FIELD_DEADLINE: Final = 0x01  # 4 bytes, unsigned big-endian: milliseconds the sender still waits for the answer
FIELD_PRIORITY: Final = 0x02  # 1 byte, signed: MIN_PRIORITY..MAX_PRIORITY, higher first (absent: 0)
FIELD_TENANT: Final = 0x03  # 1..MAX_TENANT bytes of printable UTF-8: who the request is for
FIELD_FLAGS: Final = 0x04  # 1 byte of FLAG_* bits; bits not listed are ignored (absent: 0)
FIELD_NOT_BEFORE: Final = 0x05  # 4 bytes, unsigned big-endian: milliseconds before the task may be dispatched
FIELD_TRACEPARENT: Final = 0x10  # 55..255 ASCII characters: the W3C traceparent of the span that sent it
FIELD_TRACESTATE: Final = 0x11  # 1..255 ASCII characters: the W3C tracestate beside it (trimmed to fit the frame)
FLAG_DETACHED: Final = 0x01  # kept queued while its client is silent: the answer is fetched later (by its id)
FLAG_KNOWN_SERVICE: Final = 0x02  # 404 at once for a service with no worker now and none recently
FLAGS: Final = FLAG_DETACHED | FLAG_KNOWN_SERVICE  # the bits this version knows
MAX_FIELDS: Final = FIELDS_FRAME.high  # bytes of a fields frame (these bounds: generaldomo.sansio.wire.limits)
MIN_PRIORITY: Final = PRIORITY.low
MAX_PRIORITY: Final = PRIORITY.high
MAX_TENANT: Final = TENANT.high
MAX_DEADLINE_MS: Final = DEADLINE_MS.high
MAX_NOT_BEFORE_MS: Final = NOT_BEFORE_MS.high
_DEADLINE = struct.Struct(">I")
# (deadline in seconds, tenant, priority, flags, not before: seconds from now, trace context, why a trace context
# sent was dropped)
Fields = tuple[float | None, str | None, int, int, float | None, TraceContext | None, str | None]


def request_fields(
    deadline: float | None = None, tenant: str | None = None, priority: int | bool = 0, flags: int = 0,
    not_before: float | None = None, trace: TraceContext | None = None,
) -> bytes:  # fmt: skip
    """The fields frame of a request: ``deadline`` seconds from now (rounded up to a millisecond, clamped at
    :data:`MAX_DEADLINE_MS`; 0 or less: already past), ``tenant``, ``priority``, ``flags`` (``FLAG_*``
    bits), ``not_before``: seconds from now before which it is not dispatched (rounded up to a millisecond,
    clamped at :data:`MAX_NOT_BEFORE_MS`; 0 or less: left out) and ``trace`` (its tracestate trimmed to the room
    left in the frame); ValueError on a tenant, priority (a bool too: the annotation names it so that the
    compiled build keeps it a bool to refuse), flag or delay the broker would refuse. Empty when
    nothing is set (a plain REQUEST then does)."""
    frame = b"" if deadline is None else deadline_field(deadline)
    if not_before is not None:
        if not_before != not_before:
            raise ValueError("a delay is a number of seconds, not NaN")
        if not_before > 0:
            ms = MAX_NOT_BEFORE_MS if not_before * 1000 >= MAX_NOT_BEFORE_MS else math.ceil(not_before * 1000)
            frame += _NOT_BEFORE_TAG + _DEADLINE.pack(ms)
    if flags:
        if flags & ~FLAGS:
            raise ValueError(f"unknown request flags {flags & ~FLAGS:#x}")
        frame += bytes((FIELD_FLAGS, 1, flags))
    if priority:
        if isinstance(priority, bool) or not isinstance(priority, int) or not MIN_PRIORITY <= priority <= MAX_PRIORITY:
            raise ValueError(f"a priority is a whole number from {MIN_PRIORITY} to {MAX_PRIORITY}, not {priority!r}")
        frame += bytes((FIELD_PRIORITY, 1)) + priority.to_bytes(1, "big", signed=True)
    if tenant is not None:
        encoded = tenant.encode()
        if not _good_tenant(tenant, encoded):
            raise ValueError(f"a tenant is 1 to {MAX_TENANT} bytes of printable text, not {tenant!r}")
        frame += bytes((FIELD_TENANT, len(encoded))) + encoded
    if trace is not None:  # last: its tracestate takes the room the others left
        frame += trace_entries(trace, MAX_FIELDS - len(frame))
    return frame


def trace_entries(trace: TraceContext, room: int) -> bytes:
    """The entries of ``trace`` in at most ``room`` bytes: its traceparent, and its tracestate trimmed to fit (see
    :func:`~generaldomo.sansio.wire.tracecontext.fit_tracestate`); empty when even the traceparent does not fit."""
    parent = trace.traceparent.encode()
    room -= 2 + len(parent)
    if room < 0:
        return b""
    entries = bytes((FIELD_TRACEPARENT, len(parent))) + parent
    state = fit_tracestate(trace.tracestate, room - 2).encode() if trace.tracestate and room > 2 else b""
    return entries + bytes((FIELD_TRACESTATE, len(state))) + state if state else entries


def deadline_field(seconds: float) -> bytes:
    """The fields frame that carries a deadline alone: ``seconds`` from now (see :func:`request_fields`)."""
    if seconds != seconds:
        raise ValueError("a deadline is a number of seconds, not NaN")
    ms = 0 if seconds <= 0 else MAX_DEADLINE_MS if seconds * 1000 >= MAX_DEADLINE_MS else math.ceil(seconds * 1000)
    return _DEADLINE_TAG + _DEADLINE.pack(ms)


_DEADLINE_TAG = bytes((FIELD_DEADLINE, 4))
_NOT_BEFORE_TAG = bytes((FIELD_NOT_BEFORE, 4))


def _good_tenant(tenant: str, encoded: bytes) -> bool:
    return 0 < len(encoded) <= MAX_TENANT and tenant.isprintable()


def parse_fields(frame: bytes) -> Fields | str:
    """``(deadline seconds, tenant, priority, flags, not before seconds, trace context, why a trace context was
    dropped)`` of a fields frame, or the reason it is malformed; never raises. Flag bits this version does not
    know are dropped (a newer client's, ignored); a malformed trace context is dropped from the request, with the
    reason."""
    if len(frame) == 6 and frame[:2] == _DEADLINE_TAG:  # the deadline alone: what clients send by default
        return _DEADLINE.unpack_from(frame, 2)[0] / 1000.0, None, 0, 0, None, None, None
    if len(frame) > MAX_FIELDS:
        return f"request fields of {len(frame)} bytes (at most {MAX_FIELDS})"
    deadline: float | None = None
    not_before: float | None = None
    tenant: str | None = None
    priority = flags = 0
    traceparent: bytes | None = None
    tracestate: bytes | None = None
    seen: set[int] = set()
    at, end = 0, len(frame)
    while at < end:
        if end - at < 2 or end - at - 2 < frame[at + 1]:
            return "truncated request field"
        tag, size = frame[at], frame[at + 1]
        value = frame[at + 2 : at + 2 + size]
        at += 2 + size
        if tag in seen:
            return f"request field {tag} given twice"
        seen.add(tag)
        if tag == FIELD_DEADLINE:
            if size != 4:
                return "a deadline field has 4 bytes"
            deadline = _DEADLINE.unpack(value)[0] / 1000.0
        elif tag == FIELD_PRIORITY:
            if size != 1:
                return "a priority field has 1 byte"
            priority = int.from_bytes(value, "big", signed=True)
            if not MIN_PRIORITY <= priority <= MAX_PRIORITY:
                return f"priority {priority} outside {MIN_PRIORITY}..{MAX_PRIORITY}"
        elif tag == FIELD_TENANT:
            try:
                tenant = bytes(value).decode()
            except UnicodeDecodeError:
                return "a tenant field is not UTF-8"
            if not _good_tenant(tenant, value):
                return f"a tenant field is not 1 to {MAX_TENANT} bytes of printable text"
        elif tag == FIELD_FLAGS:
            if size != 1:
                return "a flags field has 1 byte"
            flags = value[0] & FLAGS
        elif tag == FIELD_NOT_BEFORE:
            if size != 4:
                return "a not-before field has 4 bytes"
            not_before = _DEADLINE.unpack(value)[0] / 1000.0
        elif tag == FIELD_TRACEPARENT:
            traceparent = bytes(value)
        elif tag == FIELD_TRACESTATE:
            tracestate = bytes(value)
    if traceparent is None and tracestate is None:
        return deadline, tenant, priority, flags, not_before, None, None
    return (deadline, tenant, priority, flags, not_before, *read_trace(traceparent, tracestate))

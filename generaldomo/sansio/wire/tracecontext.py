"""W3C trace context in a request: its ``traceparent`` and ``tracestate``, checked, carried and trimmed to fit.

This module owns the format of the two values (the W3C Trace Context recommendation, level 1: a version, a
trace id, a parent id and trace flags; a list of at most 32 ``key=value`` members), the record that carries
them (:class:`TraceContext`), the reader every side uses on what a peer sent (:func:`read_trace`: a malformed
value is a reason, never an exception), and the trimming of a ``tracestate`` to the room a fields frame has
left (:func:`fit_tracestate`, members over 128 characters dropped first, then from the end, as the
recommendation says). Its bounds are in :mod:`generaldomo.sansio.wire.limits`; the tags that carry the values
are in :mod:`generaldomo.sansio.wire.fields`. It knows nothing of OpenTelemetry, of the messages around the
fields frame, of clocks or of sockets.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Final

from generaldomo.sansio.wire.limits import TRACEPARENT, TRACESTATE, TRACESTATE_MEMBERS

__all__ = [
    "LONG_MEMBER",
    "MAX_TRACESTATE",
    "TraceContext",
    "fit_tracestate",
    "read_trace",
    "traceparent_error",
    "tracestate_error",
]

MAX_TRACESTATE: Final = TRACESTATE.high  # bytes of a tracestate a request carries (one field entry)
LONG_MEMBER: Final = 128  # characters: the members a trimmed tracestate loses first

# version "-" trace id "-" parent id "-" flags, lowercase hex; a later version may add "-" and more
_TRACEPARENT: Final = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-[\x21-\x7e]*)?\Z")
_KEY: Final = re.compile(
    r"(?:[a-z][a-z0-9_\-*/]{0,255}|[a-z0-9][a-z0-9_\-*/]{0,240}@[a-z][a-z0-9_\-*/]{0,13})\Z"
)  # fmt: skip
_VALUE: Final = re.compile(r"[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]\Z")
_ZERO_TRACE: Final = "0" * 32
_ZERO_PARENT: Final = "0" * 16


@dataclasses.dataclass(frozen=True, slots=True)
class TraceContext:
    """A request's W3C trace context: ``traceparent`` (``00-<trace id>-<parent id>-<flags>``) and
    ``tracestate`` (vendors' ``key=value`` list; empty: none). Make one checked with :meth:`of`; give it to
    ``Client.submit(trace=...)``; a handler reads its request's as ``TaskContext.trace``.

    Example:
        >>> from generaldomo import TraceContext
        >>> TraceContext.of("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").parent_id
        '00f067aa0ba902b7'
    """

    traceparent: str
    tracestate: str = ""

    @classmethod
    def of(cls, traceparent: str, tracestate: str = "") -> TraceContext:
        """The trace context of these values; ValueError saying what is wrong with a malformed one.

        Args:
            traceparent: the W3C ``traceparent``: ``00-<trace id>-<parent id>-<flags>``.
            tracestate: the W3C ``tracestate`` (empty: none).

        Example:
            >>> from generaldomo.sansio.wire.tracecontext import TraceContext
            >>> context = TraceContext.of("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "rojo=1")
            >>> context.trace_id, context.sampled
            ('4bf92f3577b34da6a3ce929d0e0e4736', True)
        """
        wrong = traceparent_error(traceparent) or tracestate_error(tracestate)
        if wrong is not None:
            raise ValueError(wrong)
        return cls(traceparent, tracestate)

    @property
    def trace_id(self) -> str:
        """The trace's id: 32 lowercase hex digits."""
        return self.traceparent[3:35]

    @property
    def parent_id(self) -> str:
        """The id of the span that sent the request: 16 lowercase hex digits."""
        return self.traceparent[36:52]

    @property
    def sampled(self) -> bool:
        """True when the sender's trace flags say it records the trace (flag 0x01)."""
        return bool(int(self.traceparent[53:55], 16) & 1)

    def child(self, span_id: str) -> TraceContext:
        """The same trace with ``span_id`` (16 lowercase hex digits, not all zero) as its parent: what a hop that
        makes a span of its own passes on (version ``00``, the same flags and tracestate)."""
        return TraceContext(f"00-{self.trace_id}-{span_id}-{self.traceparent[53:55]}", self.tracestate)


def traceparent_error(value: str) -> str | None:
    """Why ``value`` is not a ``traceparent`` a request may carry, or None when it is one."""
    if not TRACEPARENT.low <= len(value) <= TRACEPARENT.high:
        return TRACEPARENT.refusal(len(value))
    match = _TRACEPARENT.match(value)
    if match is None:
        return "a traceparent is version-traceid-parentid-flags in lowercase hex"
    version, trace_id, parent_id, _, more = match.groups()
    if version == "ff":
        return "traceparent version ff is invalid"
    if version == "00" and more is not None:
        return "a version 00 traceparent has 55 characters"
    if trace_id == _ZERO_TRACE or parent_id == _ZERO_PARENT:
        return "a traceparent's trace id and parent id are not all zero"
    return None


def tracestate_error(value: str) -> str | None:
    """Why ``value`` is not a ``tracestate`` a request may carry (empty: none), or None when it is one."""
    if not value:
        return None
    if len(value) > TRACESTATE.high:
        return TRACESTATE.refusal(len(value))
    members = [member.strip(" \t") for member in value.split(",")]
    if len(members) > TRACESTATE_MEMBERS.high:
        return TRACESTATE_MEMBERS.refusal(len(members))
    keys: set[str] = set()
    for member in members:
        if not member:
            continue  # empty members are allowed
        key, equals, item = member.partition("=")
        if not equals or _KEY.match(key) is None or _VALUE.match(item) is None:
            return "a tracestate member is key=value (W3C trace context)"
        if key in keys:
            return f"tracestate key {key!r} given twice"
        keys.add(key)
    return None


def read_trace(traceparent: bytes | None, tracestate: bytes | None) -> tuple[TraceContext | None, str | None]:
    """The trace context of a request's two field values as a peer sent them (None: absent), and the reason for
    what was dropped (None: nothing): a malformed ``traceparent`` drops both (a ``tracestate`` alone means
    nothing), a malformed ``tracestate`` drops itself only. Never raises."""
    if traceparent is None:
        return None, None if tracestate is None else "a tracestate without a traceparent"
    parent = _text(traceparent)
    wrong = "a traceparent is ASCII" if parent is None else traceparent_error(parent)
    if parent is None or wrong is not None:
        return None, wrong
    if tracestate is None:
        return TraceContext(parent), None
    state = _text(tracestate)
    wrong = "a tracestate is ASCII" if state is None else tracestate_error(state)
    if state is None or wrong is not None:
        return TraceContext(parent), wrong
    return TraceContext(parent, state), None


def _text(value: bytes) -> str | None:
    try:
        return bytes(value).decode("ascii")
    except UnicodeDecodeError:
        return None


def fit_tracestate(tracestate: str, room: int) -> str:
    """``tracestate`` trimmed to at most ``room`` bytes (and :data:`MAX_TRACESTATE`): members longer than
    :data:`LONG_MEMBER` characters go first, then members from the end; empty when none fits.

    Example:
        >>> from generaldomo.sansio.wire.tracecontext import fit_tracestate
        >>> fit_tracestate("a=1,b=2,c=3", 7)
        'a=1,b=2'
    """
    room = min(room, MAX_TRACESTATE)
    if len(tracestate) <= room:
        return tracestate
    members = [member.strip(" \t") for member in tracestate.split(",")]
    members = [member for member in members if member]
    while members and len(",".join(members)) > room:
        long = next((i for i, member in enumerate(members) if len(member) > LONG_MEMBER), None)
        del members[len(members) - 1 if long is None else long]
    return ",".join(members)

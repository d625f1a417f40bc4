"""The W3C trace context fields of a request: the parser never raises, keeps what is valid and says why it dropped
the rest; the writer trims a tracestate to the frame's room as the recommendation says."""

from __future__ import annotations

import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from generaldomo.sansio.wire import protocol
from generaldomo.sansio.wire.limits import FIELDS_FRAME
from generaldomo.sansio.wire.tracecontext import (
    TraceContext,
    fit_tracestate,
    read_trace,
    traceparent_error,
    tracestate_error,
)

pytestmark = pytest.mark.pure

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
HEX = "0123456789abcdef"

hex_digits = lambda n: st.text(HEX, min_size=n, max_size=n)  # noqa: E731
traceparents = st.builds(
    lambda v, t, p, f: f"{v}-{t}-{p}-{f}", hex_digits(2).filter(lambda v: v != "ff"),
    hex_digits(32).filter(lambda t: t != "0" * 32), hex_digits(16).filter(lambda p: p != "0" * 16), hex_digits(2),
).filter(lambda tp: True)  # fmt: skip
keys = st.from_regex(r"\A[a-z][a-z0-9_\-*/]{0,15}\Z") | st.from_regex(r"\A[a-z0-9]{1,8}@[a-z][a-z0-9]{0,5}\Z")
values = st.from_regex(r"\A[\x21-\x2b\x2d-\x3c\x3e-\x7e]{1,20}\Z")
tracestates = st.dictionaries(keys, values, max_size=32).map(lambda d: ",".join(f"{k}={v}" for k, v in d.items()))


def entry(tag: int, value: bytes) -> bytes:
    return bytes((tag, len(value))) + value


@given(traceparents, tracestates)
def test_valid_trace_contexts_travel_unchanged(parent: str, state: str) -> None:
    state = state if len(state) <= 255 else ""
    frame = protocol.request_fields(2.0, trace=TraceContext(parent, state))
    parsed = protocol.parse_fields(frame)
    assert not isinstance(parsed, str)
    trace, dropped = parsed[5], parsed[6]
    assert dropped is None and trace is not None and trace.traceparent == parent
    assert trace.tracestate == fit_tracestate(state, FIELDS_FRAME.high - 6 - 2 - len(parent) - 2)
    assert len(frame) <= FIELDS_FRAME.high


@given(st.binary(max_size=300), st.none() | st.binary(max_size=300))
def test_any_bytes_in_the_trace_fields_are_kept_or_dropped_with_a_reason_never_raised(
    parent: bytes, state: bytes | None
) -> None:
    trace, dropped = read_trace(parent, state)
    if trace is None:
        assert dropped is not None
    else:
        assert traceparent_error(trace.traceparent) is None and tracestate_error(trace.tracestate) is None
        assert (dropped is None) == (trace.tracestate == ("" if state is None else state.decode()))


@given(st.binary(max_size=FIELDS_FRAME.high))
def test_any_fields_frame_parses_to_fields_or_a_reason(frame: bytes) -> None:
    parsed = protocol.parse_fields(frame)
    if not isinstance(parsed, str):
        trace, dropped = parsed[5], parsed[6]
        assert trace is None or traceparent_error(trace.traceparent) is None
        assert dropped is None or isinstance(dropped, str)


@pytest.mark.parametrize(
    "parent",
    [
        PARENT.upper(),  # uppercase hex
        "ff" + PARENT[2:],  # version ff
        PARENT[:3] + "0" * 32 + PARENT[35:],  # all-zero trace id
        PARENT[:36] + "0" * 16 + PARENT[52:],  # all-zero parent id
        PARENT + "-extra",  # version 00 has 55 characters
        PARENT[:-1],  # short
        "00_" + PARENT[3:],  # separator
    ],
)
def test_malformed_traceparents_are_dropped_with_the_tracestate_and_the_request_goes_on(parent: str) -> None:
    frame = protocol.request_fields(3.0) + entry(0x10, parent.encode()) + entry(0x11, b"a=1")
    parsed = protocol.parse_fields(frame)
    assert not isinstance(parsed, str) and parsed[0] == 3.0
    assert parsed[5] is None and parsed[6]


def test_a_later_version_may_carry_more_and_a_malformed_tracestate_is_dropped_alone() -> None:
    later = "cc" + PARENT[2:] + "-what-comes-next"
    assert read_trace(later.encode(), None) == (TraceContext(later), None)
    for state in (b"A=1", b"a=1,a=2", b"a=b=c", b"a=1 ,=2", ",".join(f"k{i}=v" for i in range(33)).encode(), b"\xff"):
        trace, dropped = read_trace(PARENT.encode(), state)
        assert trace == TraceContext(PARENT) and dropped, state
    assert read_trace(None, b"a=1") == (None, "a tracestate without a traceparent")
    assert read_trace(PARENT.encode(), b"a=1 , ,b@c=2") == (TraceContext(PARENT, "a=1 , ,b@c=2"), None)


def test_a_tracestate_is_trimmed_long_members_first_then_from_the_end() -> None:
    long = "big=" + "x" * 130
    assert fit_tracestate(f"a=1,{long},b=2", 20) == "a=1,b=2"
    assert fit_tracestate("a=1,b=2,c=3", 8) == "a=1,b=2"
    assert fit_tracestate("a=1", 2) == ""
    state = ",".join(f"k{i:02}={string.ascii_letters[:20]}" for i in range(12))  # 299 characters
    frame = protocol.request_fields(1.0, "tenant", 2, protocol.FLAG_DETACHED, trace=TraceContext(PARENT, state))
    parsed = protocol.parse_fields(frame)
    assert len(frame) <= FIELDS_FRAME.high and not isinstance(parsed, str)
    kept = parsed[5]
    assert kept is not None and state.startswith(kept.tracestate) and kept.tracestate.count(",") < 11


def test_trace_context_of_checks_and_names_its_parts() -> None:
    context = TraceContext.of(PARENT, "rojo=00f067aa0ba902b7")
    assert (context.trace_id, context.parent_id, context.sampled) == (PARENT[3:35], PARENT[36:52], True)
    child = context.child("b7ad6b7169203331")
    assert child.traceparent == f"00-{context.trace_id}-b7ad6b7169203331-01" and child.tracestate == context.tracestate
    with pytest.raises(ValueError, match="lowercase hex"):
        TraceContext.of(PARENT.upper())
    with pytest.raises(ValueError, match="key=value"):
        TraceContext.of(PARENT, "no equals")

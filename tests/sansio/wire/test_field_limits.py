"""Issue 20 item 2, sans-IO: one table of field limits, each field checked when it is parsed, JSON from the wire
read within bounds, flow limits within their ranges; the table in docs/protocol.rst and the status report."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from core_harness import Harness, client, worker
from fuzz_strategies import bounds
from hypothesis import given
from hypothesis import strategies as st

from generaldomo import errors
from generaldomo.sansio.broker.flow.adaptive import AdaptiveLimits
from generaldomo.sansio.broker.flow.flow import FlowLimits
from generaldomo.sansio.broker.services.resolvers.attributes import AttributeResolver
from generaldomo.sansio.wire import limits, protocol, wirejson
from generaldomo.sansio.wire.events import ClientCancel, ClientHeartbeat, ClientRequest, Dialect, Malformed, WorkerReply
from generaldomo.sansio.wire.peer_events import FinalReply, HeartbeatAnswer, TaskRequest

PROTOCOL = (Path(__file__).resolve().parents[3] / "docs" / "protocol.rst").read_text()


just_within_and_beyond = bounds


def test_the_edges_of_each_bound_are_within_and_beyond_it() -> None:
    assert bounds(limits.REQUEST_ID) == [(0, False), (1, True), (255, True), (256, False)]
    assert bounds(limits.STATUS) == [(2, False), (3, True), (4, False)]
    assert bounds(limits.RATE)[:2] == [(-1, False), (0, False)]  # more than 0
    assert all(any(within for _, within in bounds(f)) and not all(w for _, w in bounds(f))
               for f in limits.FIELDS)  # fmt: skip


def test_docs_show_the_table_as_the_code_has_it() -> None:
    assert limits.rst_table() in PROTOCOL
    assert len({field.name for field in limits.FIELDS}) == len(limits.FIELDS)  # each field has a name of its own


def test_the_status_report_lists_the_table_in_its_settings() -> None:
    h = Harness()
    report = json.loads(h.core.report(0.0).to_json())
    assert report["broker"]["settings"]["field_limits"] == json.loads(json.dumps(limits.as_settings()))
    assert report["broker"]["settings"]["field_limits"]["request_id"] == {"min": 1, "max": 255, "unit": "bytes"}
    wirejson.loads(h.core.report(0.0).to_json(), None)  # the report is JSON a bounded reader takes


@pytest.mark.parametrize(("size", "within"), just_within_and_beyond(limits.REQUEST_ID))
def test_request_ids_are_parsed_within_their_bounds(size: int, within: bool) -> None:
    rid = b"r" * size
    for frames, kind in (
        (protocol.gdp_request(rid, b"echo", [b"x"]), ClientRequest),
        (protocol.gdp_cancel(rid), ClientCancel),
        (protocol.gdp_client_heartbeat(ids=[b"ok", rid]), ClientHeartbeat),
    ):
        event = protocol.parse(frames)
        assert isinstance(event, kind if within else Malformed), (frames[:3], event)
        if not within:
            assert isinstance(event, Malformed) and event.request_id is None  # cannot be answered
    reply = protocol.read_client_message([protocol.GDP_CLIENT, b"\x03", rid, b"200", b""])
    assert isinstance(reply, FinalReply if within else Malformed)


@pytest.mark.parametrize(("size", "within"), just_within_and_beyond(limits.DESCRIPTION))
def test_descriptions_are_parsed_within_their_bounds(size: int, within: bool) -> None:
    description = b"d" * size
    request = protocol.parse(protocol.gdp_request(b"id", description, []))
    ready = protocol.parse(protocol.gdp_ready(description))
    mdp = protocol.parse([b"", b"MDPC01", description, b"body"])
    task = protocol.read_worker_message([protocol.GDP_WORKER, b"\x02", b"t" * 16, description])
    if within:
        assert isinstance(request, ClientRequest) and isinstance(mdp, ClientRequest)
        assert isinstance(task, TaskRequest)
    else:
        assert request == Malformed(limits.DESCRIPTION.refusal(size), request_id=b"id")  # answerable: 400
        assert isinstance(ready, Malformed) and ready.worker is Dialect.GDP
        assert isinstance(mdp, Malformed) and mdp.request_id is None
        assert isinstance(task, Malformed)


@pytest.mark.parametrize(("size", "within"), just_within_and_beyond(limits.TASK_ID))
def test_task_ids_are_parsed_within_their_bounds(size: int, within: bool) -> None:
    task_id = b"t" * size
    for frames in (
        protocol.gdp_ready(b"echo", (task_id, b"200", [b"r"])),
        protocol.gdp_partial(task_id, [b"p"]),
        [b"", b"MDPW01", b"\x03", task_id, b"", b"r"],
    ):
        event = protocol.parse(frames)
        assert isinstance(event, WorkerReply if within else Malformed), event
    assert isinstance(protocol.read_worker_message([protocol.GDP_WORKER, b"\x02", task_id, b"echo"]),
                      TaskRequest if within else Malformed)  # fmt: skip


@given(st.binary(max_size=8))
def test_a_status_is_exactly_three_ascii_digits(status: bytes) -> None:
    valid = len(status) == 3 and all(48 <= byte <= 57 for byte in status)
    assert protocol.is_status(status) == valid
    from_worker = protocol.parse(protocol.gdp_ready(b"echo", (b"t" * 16, status, [b"r"])))
    assert isinstance(from_worker, WorkerReply if valid else Malformed)
    to_client = protocol.read_client_message([protocol.GDP_CLIENT, b"\x03", b"id", status, b""])
    assert isinstance(to_client, FinalReply if valid else Malformed)


def test_a_five_thousand_digit_status_is_malformed_on_both_sides() -> None:
    status = b"5" * 5000
    assert isinstance(protocol.parse(protocol.gdp_ready(b"echo", (b"t" * 16, status, [b"r"]))), Malformed)
    assert isinstance(protocol.read_client_message([protocol.GDP_CLIENT, b"\x03", b"id", status, b""]), Malformed)


@pytest.mark.parametrize(("size", "within"), just_within_and_beyond(limits.INSTANCE))
def test_a_broker_instance_is_read_within_its_bounds(size: int, within: bool) -> None:
    answer = protocol.read_client_message(protocol.gdp_client_heartbeat(b"i" * size))
    assert isinstance(answer, HeartbeatAnswer if within else Malformed)


@pytest.mark.parametrize("timing", [b"", b"x" * 15, protocol.timing(math.nan, 1.0), protocol.timing(1.0, -1.0),
                                    protocol.timing(math.inf, 0.0)])  # fmt: skip
def test_a_timing_frame_that_is_not_two_finite_durations_gives_no_timing(timing: bytes) -> None:
    assert protocol.parse_timing(timing) is None
    assert protocol.parse_timing(protocol.timing(0.5, 0.25)) == (0.5, 0.25)


def test_hops_are_within_their_bounds() -> None:
    from generaldomo.sansio.wire import envelope

    message = [b"GDPC01", b"\x04"]
    assert envelope.split(b"id", [b"h" * 255, *message]) == ((b"id", b"h" * 255), message)
    too_long = [b"h" * 256, *message]
    assert envelope.split(b"id", too_long) == (b"id", too_long)  # for the core to find malformed
    assert isinstance(protocol.parse(too_long), Malformed)


# ------------------------------------------------------------------------------------------------ JSON


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


@pytest.mark.parametrize(
    "text",
    [
        nested(100_000),
        nested(limits.JSON_DEPTH.high + 1),
        b'{"rate": ' + b"9" * 400 + b"}",
        b'{"rate": 1e999}',
        b'{"rate": NaN}',
        b'{"rate": Infinity}',
        b'{"rate": -Infinity}',
        b'{"rate": 9007199254740993}',
        b'{"a": "\xff"}',
        b'{"a": 1',
        b"\xfe\xff\x00{",
        b" " * (limits.JSON_BYTES.high + 1),
    ],
)
def test_wire_json_refuses_what_is_outside_its_bounds_with_one_error(text: bytes) -> None:
    with pytest.raises(errors.WireJSONError):
        wirejson.loads(text)


def test_wire_json_takes_what_is_within_its_bounds() -> None:
    assert wirejson.loads(nested(limits.JSON_DEPTH.high)) == json.loads(nested(limits.JSON_DEPTH.high))
    assert wirejson.loads(b'{"a": "[[[[[[[[[[[[[[[[[[[[", "n": -9007199254740992}') == {"a": "[" * 20, "n": -(2**53)}
    assert wirejson.loads(b'{"x": 1e300}') == {"x": 1e300}
    with pytest.raises(errors.WireJSONError):
        wirejson.loads(b'{"x": 1.1e301}')


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(-1e300, 1e300) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=12,
)


@given(json_values)
def test_wire_json_reads_what_json_writes_within_the_bounds(value: object) -> None:
    text = json.dumps(value)
    if len(text.encode()) <= limits.JSON_BYTES.high and wirejson.nesting(text, 0) <= limits.JSON_DEPTH.high:
        assert wirejson.loads(text.encode()) == json.loads(text)


@given(st.binary(max_size=64) | st.text(max_size=64).map(str.encode))
def test_wire_json_raises_nothing_but_its_own_error(data: bytes) -> None:
    try:
        wirejson.loads(data)
    except errors.WireJSONError:
        pass


@given(st.integers(0, 40), st.text(alphabet='[]{}"\\ ,:1a', max_size=40))
def test_nesting_counts_only_brackets_outside_strings(depth: int, noise: str) -> None:
    text = "[" * depth + json.dumps(noise) + "]" * depth
    assert wirejson.nesting(text, 0) == depth


# ------------------------------------------------------------------------------------------------ flow limits


@pytest.mark.parametrize(
    "limits_given",
    [
        {"rate": math.nan},
        {"rate": math.inf},
        {"rate": 0},
        {"rate": 10**400},
        {"rate": 1e10},
        {"burst": 10**400},
        {"burst": 0},
        {"concurrency": 2.5},
        {"concurrency": 10**10},
        {"bytes_in_flight": 2**60},
        {"rate": True},
    ],
)
def test_flow_limits_outside_their_ranges_are_refused(limits_given: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        FlowLimits().merged(limits_given)


def test_adaptive_bounds_outside_their_range_are_refused() -> None:
    with pytest.raises(ValueError):
        AdaptiveLimits(1, 10**400)
    assert AdaptiveLimits(1, limits.ADAPTIVE.high).max == limits.ADAPTIVE.high


@pytest.mark.parametrize(
    "body",
    [
        b'{"rate": ' + b"9" * 400 + b"}",
        b'{"rate": NaN}',
        b'{"rate": Infinity}',
        b'{"burst": 1e308}',
        nested(100_000),
        b'{"adaptive": {"min": 1, "max": ' + b"9" * 30 + b"}}",
    ],
)
def test_mmi_flow_answers_400_to_numbers_and_nesting_out_of_bounds(body: bytes) -> None:
    h = Harness()
    h.feed(client(0), protocol.gdp_request(b"1", b"mmi.flow", [b"echo", body]))
    ((rid, status, reply),) = h.replies_of(client(0))
    assert (rid, status) == (b"1", b"400"), reply
    assert h.core.flow_limits("echo") == FlowLimits()
    h.ready(worker(0))
    h.request(client(0), b"2", body=b"still")  # and the next dispatch works
    assert len(h.tasks_of(worker(0))) == 1
    json.loads(h.core.report(h.now).to_json(), parse_constant=lambda name: pytest.fail(f"{name} in the report"))


def test_mmi_service_with_attributes_answers_400_to_deep_nesting() -> None:
    h = Harness()
    h.core.resolver = AttributeResolver()
    h.feed(client(0), protocol.gdp_request(b"1", b"mmi.service", [nested(100_000)]))
    h.feed(client(0), protocol.gdp_request(b"2", b"mmi.service", [b'{"service": "x", "a": ' + nested(20) + b"}"]))
    assert [(rid, status) for rid, status, _ in h.replies_of(client(0))] == [(b"1", b"400"), (b"2", b"400")]


def test_a_request_with_a_description_too_long_is_answered_400() -> None:
    h = Harness()
    h.feed(client(0), protocol.gdp_request(b"1", b"x" * (limits.DESCRIPTION.high + 1), [b"p"]))
    ((rid, status, body),) = h.replies_of(client(0))
    assert (rid, status) == (b"1", b"400") and b"description" in body[0]
    assert h.core.counters["malformed"] == 1 and not h.core.tasks


def test_a_registered_worker_that_sends_a_malformed_result_is_dropped_and_its_task_reissued() -> None:
    h = Harness()
    h.ready(worker(0))
    h.ready(worker(1))
    h.request(client(0), b"1", body=b"x")
    ((task_id, _, _),) = h.tasks_of(worker(0)) or h.tasks_of(worker(1))
    holder = worker(0) if h.tasks_of(worker(0)) else worker(1)
    other = worker(1) if holder == worker(0) else worker(0)
    h.feed(holder, protocol.gdp_ready(b"echo", (task_id, b"5" * 5000, [b"forged"])))
    assert h.core.counters["workers_malformed"] == 1 and holder not in h.core.workers
    assert [frames[-1] for frames in h.inbox[holder]][-1] == b"\x06"  # told DISCONNECT
    ((reissued, _, _),) = h.tasks_of(other)
    assert reissued == task_id

"""READY's peer-info frame (host, pid) and the flow limits mmi.flow and mmi.status show: sans-IO, no sockets."""

from __future__ import annotations

import json
from typing import Any

from core_harness import Harness, client, worker
from hypothesis import given
from hypothesis import strategies as st

from generaldomo.io.hub.metrics import MAX_HOSTS, StatusCollector
from generaldomo.sansio.broker.report import FlowReport, StatusReport, as_data
from generaldomo.sansio.config.settings import PeerSettings
from generaldomo.sansio.peer.session import ToBroker, WorkerSession
from generaldomo.sansio.wire import protocol
from generaldomo.sansio.wire.events import Dialect, Malformed, WorkerReady, WorkerReply

frames = st.binary(max_size=24)
# Frames a peer-info frame might be mistaken for, or mistaken as: JSON objects among arbitrary bytes.
info_like = st.one_of(
    frames,
    st.builds(protocol.worker_info, st.none() | st.text(max_size=8), st.none() | st.integers(-5, 2**33)),
    st.just(b"{}"),
)
statuses = st.one_of(info_like, st.sampled_from([b"200", b"500", b"429", b"999", b"20", b"2000", b"2\xd9\xa0"]))


@given(frames, info_like, statuses, st.lists(info_like, max_size=4))
def test_a_ready_with_a_result_is_never_taken_for_one_with_peer_info(
    description: bytes, task_id: bytes, status: bytes, body: list[bytes]
) -> None:
    event = protocol.parse(protocol.gdp_ready(description, (task_id, status, body)))
    if protocol.is_status(status) and task_id:
        assert event == WorkerReply(Dialect.GDP, task_id, status, tuple(body), True, description)
    else:  # a status of 3 digits, a task id of 1 to 255 bytes (generaldomo.sansio.wire.limits)
        assert isinstance(event, Malformed) and event.worker is Dialect.GDP
    with_info = protocol.parse(protocol.gdp_ready(description, (task_id, status, body), info=b'{"pid": 7}'))
    assert with_info == event  # a READY carrying a result carries no peer info


@given(frames, st.none() | st.text(min_size=1, max_size=300), st.none() | st.integers(-5, 2**33))
def test_peer_info_round_trips_and_bad_values_are_left_out(
    description: bytes, host: str | None, pid: int | None
) -> None:
    info = protocol.worker_info(host, pid)
    event = protocol.parse(protocol.gdp_ready(description, info=info))
    valid = host is not None and len(host) <= protocol.MAX_HOST and host.isprintable()
    sent: dict[str, object] = {key: value for key, value in (("host", host), ("pid", pid)) if value is not None}
    sent["features"] = sorted(protocol.FEATURES)
    fits = len(json.dumps(sent, separators=(",", ":"))) <= protocol.MAX_INFO
    good_host = host if valid and fits else None  # a host escaped past MAX_INFO is left out, never malformed
    good_pid = pid if pid is not None and 0 < pid < 2**32 else None
    assert len(info) <= protocol.MAX_INFO
    assert event == WorkerReady(Dialect.GDP, description, good_host, good_pid, protocol.FEATURES)


def host_and_pid(frame: bytes) -> tuple[str | None, int | None] | None:
    """``(host, pid)`` of a peer-info frame, or None if the frame is not one (its features left out)."""
    info = protocol.read_worker_info(frame)
    return None if info is None else info[:2]


def test_a_printable_host_that_escapes_past_the_info_limit_is_left_out() -> None:
    host = "\U0001f600" * protocol.MAX_HOST  # printable; each escapes to 12 bytes of JSON
    assert host_and_pid(protocol.worker_info(host, 7)) == (None, 7)


@given(frames, frames)
def test_a_second_frame_that_is_not_a_json_object_is_malformed(description: bytes, extra: bytes) -> None:
    event = protocol.parse([*protocol.gdp_ready(description), extra])
    if host_and_pid(extra) is None:
        assert isinstance(event, Malformed)
    else:
        assert isinstance(event, WorkerReady) and event.description == description


def test_peer_info_that_is_too_long_or_too_deep_is_refused_without_raising() -> None:
    assert host_and_pid(b'{"host": "' + b"h" * protocol.MAX_INFO + b'"}') is None
    assert host_and_pid(b'{"a":' + b"[" * (protocol.MAX_INFO - 5)) is None
    assert host_and_pid(b'{"host": true, "pid": true, "other": 1}') == (None, None)
    assert host_and_pid(b'{"host": "a\\u001bb", "pid": 3.0}') == (None, None)


def test_the_core_reports_what_each_worker_said_and_none_for_an_old_ready() -> None:
    h = Harness()
    h.feed(worker(1), protocol.gdp_ready(b"echo", info=protocol.worker_info("node-7", 4321)))
    h.feed(worker(2), protocol.gdp_ready(b"echo"))  # an old generaldomo worker: registers as it always did
    h.feed(worker(3), [b"", b"MDPW01", b"\x01", b"echo"])  # MDP workers have no way to say
    workers = {(w.dialect, w.host, w.pid) for w in h.core.report(h.now).workers}
    assert workers == {("generaldomo/1", "node-7", 4321), ("generaldomo/1", None, None), ("MDP/0.1", None, None)}
    echo = h.core.report(h.now).service("echo")
    assert echo is not None and echo.workers == 3


def test_a_worker_that_changes_description_with_its_result_keeps_its_host_and_pid() -> None:
    h = Harness()
    h.feed(worker(1), protocol.gdp_ready(b"echo", info=protocol.worker_info("node-7", 4321)))
    h.request(client(0), b"r1")
    (task_id, _, _), *_ = h.tasks_of(worker(1))
    h.feed(worker(1), protocol.gdp_ready(b"other", (task_id, protocol.OK, [b"done"])))
    assert h.replies_of(client(0)) == [(b"r1", b"200", (b"done",))]
    (moved,) = h.core.report(h.now).workers
    assert (moved.service, moved.host, moved.pid) == ("other", "node-7", 4321)


def flow_reply(h: Harness, name: bytes, change: dict[str, Any] | None = None) -> dict[str, Any]:
    body = [name] if change is None else [name, json.dumps(change).encode()]
    h.feed(client(0), protocol.gdp_request(b"f", b"mmi.flow", body))
    _rid, status, reply = h.replies_of(client(0))[-1]
    assert status == protocol.OK, reply
    answer: dict[str, Any] = json.loads(reply[0])
    assert answer.pop("service") == name.decode()
    return answer


limit_changes = st.dictionaries(
    st.sampled_from(["rate", "burst", "concurrency"]),
    st.none() | st.integers(1, 5),
    max_size=3,
)


@given(st.booleans(), st.lists(limit_changes, max_size=6))
def test_mmi_flow_and_the_status_report_show_the_same_limits(live_first: bool, changes: list[dict[str, Any]]) -> None:
    h = Harness()
    if live_first:
        h.ready(worker(1))
    for change in changes:
        shown = flow_reply(h, b"echo", change)
        assert shown == flow_reply(h, b"echo")  # reading again shows what the change answered
        echo = StatusReport.from_json(h.core.report(h.now).to_json()).service("echo")
        if echo is not None:
            assert limits(echo.flow) == shown
    h.ready(worker(2))  # the service appears now if it had not: it gets the limits mmi.flow showed
    echo = h.core.report(h.now).service("echo")
    assert echo is not None and limits(echo.flow) == flow_reply(h, b"echo")


def limits(flow: FlowReport) -> dict[str, Any]:
    """The limits of a report's flow, as mmi.flow shows them (the newer limits only when set)."""
    shown = {key: value for key, value in as_data(flow).items() if key not in ("in_flight", "in_flight_bytes")}
    return {key: value for key, value in shown.items() if value is not None or key in ("rate", "burst", "concurrency")}


def test_metrics_count_workers_per_host_with_few_label_values() -> None:
    h = Harness()
    for n in range(MAX_HOSTS + 10):
        h.feed(worker(n), protocol.gdp_ready(b"echo", info=protocol.worker_info(f"node-{n % (MAX_HOSTS + 5)}", n + 1)))
    h.feed(worker(1000), protocol.gdp_ready(b"echo"))
    families = {f.name: f for f in StatusCollector(lambda: h.core.report(h.now)).collect()}
    by_host = {s.labels["host"]: s.value for s in families["generaldomo_workers_by_host"].samples}
    assert len(by_host) == MAX_HOSTS + 1 and sum(by_host.values()) == MAX_HOSTS + 11
    assert by_host["other"] >= 1 and by_host.get("unknown", 0) <= 1


def test_the_worker_session_sends_peer_info_in_each_plain_ready_only() -> None:
    info = protocol.worker_info("node-7", 4321)
    session = WorkerSession(b"echo", PeerSettings(), 0.0, info)
    assert [a.frames for a in session.start() if isinstance(a, ToBroker)] == [protocol.gdp_ready(b"echo", info=info)]
    session.receive(protocol.worker_request(Dialect.GDP, b"t1", b"echo", [b"x"]), 0.1)
    result = [a.frames for a in session.finish(protocol.OK, [b"x"], 0.2) if isinstance(a, ToBroker)]
    assert result == [protocol.gdp_ready(b"echo", (b"t1", protocol.OK, [b"x"]))]
    again = session.receive(protocol.gdp_worker_command(protocol.DISCONNECT), 0.3)
    assert [a.frames for a in again if isinstance(a, ToBroker)] == [
        protocol.gdp_ready(b"echo", info=info),
        protocol.gdp_handover(b"t1", protocol.OK, [b"x"]),  # held: no heartbeat said the broker takes no hand-over
    ]


def test_a_worker_refused_before_it_was_answered_tries_the_other_form_of_ready() -> None:
    info = protocol.worker_info("node-7", 4321)
    session = WorkerSession(b"echo", PeerSettings(), 0.0, info)
    disconnect = protocol.gdp_worker_command(protocol.DISCONNECT)

    def sent(actions: list[Any]) -> list[list[bytes]]:
        return [a.frames for a in actions if isinstance(a, ToBroker)]

    assert sent(session.start()) == [protocol.gdp_ready(b"echo", info=info)]
    # An older broker takes that READY as malformed and answers the first heartbeat with DISCONNECT: a refusal,
    # after whose wait (1 s) the other form goes out.
    assert sent(session.receive(disconnect, 2.5)) == [] and session.deadline() == 3.5
    assert sent(session.tick(3.5)) == [protocol.gdp_ready(b"echo")]
    session.receive(protocol.gdp_worker_command(protocol.HEARTBEAT), 4.0)  # registered: answered
    assert sent(session.receive(disconnect, 5.0)) == [protocol.gdp_ready(b"echo")]  # a restart: at once, same form
    assert sent(session.receive(disconnect, 6.0)) == []  # refused: the first wait again, then the other form
    assert sent(session.tick(7.0)) == [protocol.gdp_ready(b"echo", info=info)]


def test_a_worker_with_peer_info_registers_with_an_older_core() -> None:
    """An older core: one whose parser takes a READY with peer info as malformed."""
    h = Harness()
    session = WorkerSession(b"echo", PeerSettings(heartbeat_interval=1.0), 0.0, protocol.worker_info("n", 1))
    peer = worker(1)

    def carry_out(actions: list[Any]) -> None:
        for action in actions:
            if isinstance(action, ToBroker):  # READY, description, peer info: an older core read it as malformed
                with_info = len(action.frames) == 4 and action.frames[1] == b"\x01"
                h.feed(peer, [*action.frames[:3], b"not peer info"] if with_info else action.frames)

    carry_out(session.start())
    assert not h.core.workers and h.core.counters["malformed"] == 1
    for step in range(1, 20):
        carry_out(session.tick(step * 0.5))
        while h.inbox[peer]:
            carry_out(session.receive(h.inbox[peer].pop(0), step * 0.5))
        if h.core.workers:
            break
    (registered,) = h.core.workers.values()
    assert registered.host is None and session.plain

"""Parsing and building every dialect's frames."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from worker_commands import parse_worker_command

from generaldomo.sansio.wire import protocol
from generaldomo.sansio.wire.events import (
    ClientRequest,
    Dialect,
    Malformed,
    WorkerDisconnect,
    WorkerHeartbeat,
    WorkerReady,
    WorkerReply,
)


def test_gdp_client_request_round_trip() -> None:
    frames = protocol.gdp_request(b"rid", b"echo", [b"a", b""])
    assert frames == [b"GDPC01", b"\x01", b"rid", b"echo", b"a", b""]
    assert protocol.parse(frames) == ClientRequest(Dialect.GDP, b"rid", b"echo", (b"a", b""))


def test_gdp_ready_with_and_without_result() -> None:
    assert protocol.parse(protocol.gdp_ready(b"svc")) == WorkerReady(Dialect.GDP, b"svc")
    frames = protocol.gdp_ready(b"svc", (b"task", protocol.OK, [b"r1", b""]))
    assert protocol.parse(frames) == WorkerReply(Dialect.GDP, b"task", b"200", (b"r1", b""), True, b"svc")


@pytest.mark.parametrize(
    ("frames", "event"),
    [
        ([b"", b"MDPC01", b"echo", b"hi"], ClientRequest(Dialect.MDP01, None, b"echo", (b"hi",))),
        ([b"MDPC02", b"\x01", b"echo", b"hi"], ClientRequest(Dialect.MDP02, None, b"echo", (b"hi",))),
        ([b"", b"MDPC02", b"\x02", b"echo", b"hi"], ClientRequest(Dialect.MAJORTOMO, None, b"echo", (b"hi",))),
        ([b"", b"MDPW01", b"\x01", b"echo"], WorkerReady(Dialect.MDP01, b"echo")),
        ([b"", b"MDPW01", b"\x03", b"t", b"", b"r"], WorkerReply(Dialect.MDP01, b"t", b"200", (b"r",), True)),
        ([b"", b"MDPW01", b"\x04"], WorkerHeartbeat(Dialect.MDP01)),
        ([b"", b"MDPW01", b"\x05"], WorkerDisconnect(Dialect.MDP01)),
        ([b"MDPW02", b"\x01", b"echo"], WorkerReady(Dialect.MDP02, b"echo")),
        ([b"MDPW02", b"\x03", b"t", b"", b"p"], WorkerReply(Dialect.MDP02, b"t", b"200", (b"p",), False)),
        ([b"MDPW02", b"\x04", b"t", b"", b"f"], WorkerReply(Dialect.MDP02, b"t", b"200", (b"f",), True)),
        ([b"MDPW02", b"\x05"], WorkerHeartbeat(Dialect.MDP02)),
        ([b"MDPW02", b"\x06"], WorkerDisconnect(Dialect.MDP02)),
        ([b"", b"MDPW02", b"\x04", b"t", b"", b"f"], WorkerReply(Dialect.MAJORTOMO, b"t", b"200", (b"f",), True)),
        ([b"GDPW01", b"\x03", b"t", b"p"], WorkerReply(Dialect.GDP, b"t", b"200", (b"p",), False)),
        ([b"GDPW01", b"\x05"], WorkerHeartbeat(Dialect.GDP)),
        ([b"GDPW01", b"\x06"], WorkerDisconnect(Dialect.GDP)),
    ],
)
def test_parse_each_dialect(frames: list[bytes], event: object) -> None:
    assert protocol.parse(frames) == event


@pytest.mark.parametrize(
    "frames",
    [
        [],
        [b""],
        [b"HTTP/1.1"],
        [b"", b"MDPC01"],
        [b"MDPC02", b"\x09", b"x"],
        [b"GDPC01", b"\x01", b"rid"],
        [b"", b"MDPW01", b"\x01"],
        [b"", b"MDPW01", b"\x01", b"a", b"b"],
        [b"", b"MDPW01", b"\x03", b"t", b"not-empty", b"r"],
        [b"", b"MDPW01", b"\x09"],
        [b"", b"MDPW01"],
        [b"GDPW01", b"\x01", b"svc", b"task-without-status"],
        [b"GDPW01", b"\x04", b"t", b"r"],
        [b"GDPW01", b"\x03"],
    ],
)
def test_malformed(frames: list[bytes]) -> None:
    assert isinstance(protocol.parse(frames), Malformed)


@given(st.lists(st.binary(max_size=8), max_size=6))
def test_parse_never_raises(frames: list[bytes]) -> None:
    protocol.parse(frames)


@given(
    st.lists(
        st.sampled_from(
            [
                b"",
                b"MDPC01",
                b"MDPW01",
                b"MDPC02",
                b"MDPW02",
                b"GDPC01",
                b"GDPW01",
                b"\x01",
                b"\x02",
                b"\x03",
                b"\x04",
                b"\x05",
                b"\x06",
                b"x",
            ]
        ),
        max_size=7,
    )
)
def test_parse_never_raises_on_near_misses(frames: list[bytes]) -> None:
    protocol.parse(frames)


@pytest.mark.parametrize(
    ("dialect", "final", "expected"),
    [
        (Dialect.GDP, True, [b"GDPC01", b"\x03", b"rid", b"200", b"", b"r"]),
        (Dialect.GDP, False, [b"GDPC01", b"\x02", b"rid", b"r"]),
        (Dialect.MDP01, True, [b"", b"MDPC01", b"echo", b"r"]),
        (Dialect.MDP01, False, None),
        (Dialect.MDP02, True, [b"MDPC02", b"\x03", b"echo", b"r"]),
        (Dialect.MDP02, False, [b"MDPC02", b"\x02", b"echo", b"r"]),
        (Dialect.MAJORTOMO, True, [b"", b"MDPC02", b"\x04", b"r"]),
        (Dialect.MAJORTOMO, False, [b"", b"MDPC02", b"\x03", b"r"]),
    ],
)
def test_client_reply(dialect: Dialect, final: bool, expected: list[bytes] | None) -> None:
    assert protocol.client_reply(dialect, b"rid", b"echo", protocol.OK, [b"r"], final) == expected


def test_mdp_error_reply_carries_status_in_body() -> None:
    frames = protocol.client_reply(Dialect.MDP01, None, b"echo", protocol.UNAVAILABLE, [b"why"], True)
    assert frames == [b"", b"MDPC01", b"echo", b"503", b"why"]


@pytest.mark.parametrize(
    ("dialect", "expected"),
    [
        (Dialect.GDP, [b"GDPW01", b"\x02", b"tid", b"echo", b"body"]),
        (Dialect.MDP01, [b"", b"MDPW01", b"\x02", b"tid", b"", b"body"]),
        (Dialect.MDP02, [b"MDPW02", b"\x02", b"tid", b"", b"body"]),
        (Dialect.MAJORTOMO, [b"", b"MDPW02", b"\x02", b"tid", b"", b"body"]),
    ],
)
def test_worker_request(dialect: Dialect, expected: list[bytes]) -> None:
    assert protocol.worker_request(dialect, b"tid", b"echo", [b"body"]) == expected


def test_worker_commands() -> None:
    assert protocol.worker_command(Dialect.MDP01, protocol.HEARTBEAT) == [b"", b"MDPW01", b"\x04"]
    assert protocol.worker_command(Dialect.MDP02, protocol.DISCONNECT) == [b"MDPW02", b"\x06"]
    assert protocol.worker_command(Dialect.GDP, protocol.HEARTBEAT) == [b"GDPW01", b"\x05"]


def test_peer_side_parsers() -> None:
    meta = protocol.timing(1.5, 0.25)
    final = protocol.client_reply(Dialect.GDP, b"rid", b"echo", protocol.OK, [b"r", b""], True, meta)
    assert protocol.parse_client_reply(final) == (b"rid", b"200", meta, (b"r", b""))
    assert protocol.parse_timing(meta) == (1.5, 0.25) and protocol.parse_timing(b"") is None
    partial = protocol.client_reply(Dialect.GDP, b"rid", b"echo", protocol.OK, [b"p"], False)
    assert protocol.parse_client_reply(partial) == (b"rid", None, b"", (b"p",))
    assert protocol.parse_client_reply([b"MDPC02", b"\x03", b"x"]) is None
    request = protocol.worker_request(Dialect.GDP, b"tid", b"echo", [b"b"])
    assert parse_worker_command(request) == (protocol.REQUEST, (b"tid", b"echo", b"b"))
    assert parse_worker_command([b"GDPW01", b"\x02", b"tid"]) is None
    assert parse_worker_command([b"GDPW01", b"\x01", b"x"]) is None


def test_a_peer_info_frame_handed_over_as_a_memoryview_reads_as_bytes() -> None:
    info = protocol.worker_info("h", 3)
    assert protocol.read_worker_info(memoryview(info)) == ("h", 3, protocol.FEATURES, None)
    resume = protocol.parse([*protocol.gdp_resume(b"svc", b"task"), memoryview(info)])  # type: ignore[list-item]
    assert resume == protocol.parse(protocol.gdp_resume(b"svc", b"task", info))
    assert protocol.parse([*protocol.gdp_resume(b"svc", b"task"), memoryview(b"[1]")]).reason  # type: ignore[list-item, union-attr]

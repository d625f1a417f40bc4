"""Serializers: round trips (hypothesis), the content-type frame, and mismatches end to end (415, not garbage)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from generaldomo import App, Client, ContentTypeError, DecodeError, RequestFailed, TypedClient
from generaldomo.peers.app import Bound
from generaldomo.sansio.peer import serializers

scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text()
json_values = st.recursive(
    scalars | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=20,
)
msgpack_values = st.recursive(
    scalars | st.binary() | st.floats(allow_nan=False),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=20,
)


@given(json_values)
def test_json_round_trip(value: Any) -> None:
    frames = serializers.encode(serializers.get("json"), value)
    assert serializers.content_type(frames) == "json"
    assert serializers.decode(serializers.get("json"), frames) == value


@given(msgpack_values)
def test_msgpack_round_trip(value: Any) -> None:
    codec = serializers.get("msgpack")
    assert serializers.decode(codec, serializers.encode(codec, value)) == value


@given(st.lists(st.binary(max_size=64), max_size=3), st.sampled_from(["json", "msgpack", "pickle"]))
def test_raw_bytes_are_never_decoded(frames: list[bytes], name: str) -> None:
    if frames and frames[0].startswith(serializers.MARKER):
        frames[0] = b"not " + frames[0]
    assert serializers.content_type(frames) is None
    with pytest.raises(ContentTypeError, match="raw bytes"):
        serializers.decode(serializers.get(name), frames)


def test_mismatch_and_corrupt_bodies_are_errors() -> None:
    json, msgpack = serializers.get("json"), serializers.get("msgpack")
    with pytest.raises(ContentTypeError, match="'msgpack' but content type 'json' was expected"):
        serializers.decode(json, serializers.encode(msgpack, 1))
    with pytest.raises(DecodeError, match="cannot decode the payload as json"):
        serializers.decode(json, [serializers.MARKER + b"json", b"{not json"])
    with pytest.raises(DecodeError, match="2 frames"):
        serializers.decode(json, [serializers.MARKER + b"json", b"1", b"2"])
    with pytest.raises(ValueError, match="unknown serializer 'yaml'"):
        serializers.get("yaml")
    assert math.isnan(serializers.decode(msgpack, serializers.encode(msgpack, float("nan"))))


def test_a_custom_serializer_travels_by_its_name() -> None:
    upper = serializers.Codec("upper-text", lambda value: str(value).upper().encode(), bytes.decode)
    frames = serializers.encode(serializers.get(upper), "hi")
    assert frames == (b"\x00content-type:upper-text", b"HI")
    with pytest.raises(ValueError, match="printable ASCII"):
        serializers.get(serializers.Codec("bad name\n", bytes, bytes))


typed = App("typed")


@typed.service("json-echo", serializer="json")
def json_echo(value: Any) -> Any:
    return {"got": value}


@typed.service("msgpack-echo", serializer="msgpack")
def msgpack_echo(value: Any) -> Any:
    return {"got": value}


@typed.service("json-set", serializer="json")
def json_set(value: Any) -> Any:
    return set(value)


@typed.service("raw")
def raw(payload: bytes) -> bytes:
    return payload[::-1]


@pytest.fixture
def typed_broker(transport: str, brokers, workers) -> str:
    broker = brokers(transport, ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint(transport, "tcp")
    for service in typed.services:
        workers(endpoint, transport, service.description.decode(), Bound(service))
    return endpoint


def test_json_and_msgpack_round_trips_end_to_end(transport: str, typed_broker: str) -> None:
    with Client(typed_broker, transport) as client:
        assert TypedClient(client, "json").request("json-echo", {"a": [1, "two"]}, timeout=30) == {
            "got": {"a": [1, "two"]}
        }
        value = {"bytes": b"\x00\xff", "nested": [1.5, None, True]}
        assert TypedClient(client, "msgpack").request("msgpack-echo", value, timeout=30) == {"got": value}
        future = TypedClient(client, "msgpack").submit("msgpack-echo", [1, 2])
        assert future.result(30) == {"got": [1, 2]}


def test_a_mismatch_is_a_415_naming_both_sides_and_the_worker_serves_on(transport: str, typed_broker: str) -> None:
    with Client(typed_broker, transport) as client:
        cases = [
            (TypedClient(client, "json"), "msgpack-echo", "content type 'json' but content type 'msgpack'"),
            (TypedClient(client, "msgpack"), "raw", "takes raw bytes but the request is 'msgpack'"),
        ]
        for sender, service, message in cases:
            with pytest.raises(RequestFailed, match=message) as failure:
                sender.request(service, {"x": 1}, timeout=30)
            assert int(failure.value.status) == 415
        with pytest.raises(RequestFailed, match="raw bytes \\(no content type\\)") as failure:
            client.request("json-echo", b"{}", timeout=30)
        assert int(failure.value.status) == 415
        with pytest.raises(RequestFailed, match="cannot decode the request as json") as failure:
            client.request("json-echo", [serializers.MARKER + b"json", b"{oops"], timeout=30)
        assert int(failure.value.status) == 400
        with pytest.raises(ContentTypeError, match="reply is raw bytes"):  # a raw worker's answer is not decoded
            TypedClient(client, "json").decode(client.request("raw", b"abc", timeout=30))
        with pytest.raises(RequestFailed, match="500: TypeError: Object of type set is not JSON serializable"):
            TypedClient(client, "json").request("json-set", [1], timeout=30)
        assert TypedClient(client, "json").request("json-echo", 7, timeout=30) == {"got": 7}
        assert client.request("raw", b"abc", timeout=30).payload == b"cba"

"""generaldomo::Bridge (cpp/include/generaldomo/bridge.hpp) in front of the Python broker's ROUTER link.

``tests/cpp/gd_bridge.cpp`` runs the C++ bridge as a process with the Python bridge command's flags. The Python
bridge's tests that drive a bridge through the ``bridge`` fixture run here again, against it (imported below:
pytest runs them with this module's fixture); the others are written again for the C++ bridge: the bound on
requests in flight and one connection's share of them (429), a malformed upstream reply (502), a CANCEL, garbage
from a client; and one runs against both bridges: a request the bridge forgot is sent again when its client asks
about it.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq
from bridge_cases import (  # noqa: F401  (run again here, against the C++ bridge)
    test_dealers_are_reused_and_management_requests_pass_through,
    test_silent_client_is_forgotten,
    test_threads_sharing_a_client_through_the_bridge,
)
from hostile import RawPeer, ask, statuses_of_answers
from waiting import eventually

from cpp.test_cpp import WAIT, Programs, tagged
from generaldomo import Client, RequestFailed
from generaldomo.io import bridge as bridge_module
from generaldomo.io.bridge import Bridge
from generaldomo.sansio.wire import codec, limits, protocol


class CppBridge:
    """gd_bridge, started and bound: its endpoints, and its counters asked for on stdin."""

    def __init__(self, run: Programs, broker: str, *args: str) -> None:
        self.process = run.start(
            run.programs["gd_bridge"], "--server", "tcp://127.0.0.1:*", *args, broker, stdin=True, name="gd_bridge"
        )
        self.process.wait_for(" -> MDP/0.1 broker ")
        lines = self.process.output().splitlines()
        self.endpoints = [line.split()[3] for line in lines if line.startswith("generaldomo bridge: server ")]
        self._asked = itertools.count()

    def stats(self) -> dict[str, int]:
        tag = next(self._asked)
        self.process.send_line(f"stats {tag}")
        self.process.wait_for(f"stats {tag} ")
        line = next(line for line in self.process.output().splitlines() if line.startswith(f"stats {tag} "))
        words = line.split()[2:]
        return {name: int(value) for name, value in zip(words[::2], words[1::2], strict=True)}

    @property
    def forwarded(self) -> int:
        return self.stats()["forwarded"]

    @property
    def dealers(self) -> int:
        return self.stats()["dealers"]

    def stop(self) -> list[str]:
        self.process.send_line("stop")
        return self.process.finish(WAIT)


@pytest.fixture
def run(programs: dict[str, Path], tmp_path: Path) -> Iterator[Programs]:
    started = Programs(programs, tmp_path)
    yield started
    started.close()


@pytest.fixture
def bridge(brokers, run: Programs) -> Iterator[tuple[object, CppBridge]]:
    """The Python bridge tests' fixture: an MDP broker (the Python broker's ROUTER link) and a bridge before it."""
    broker = brokers("router", ["tcp://127.0.0.1:*"])
    device = CppBridge(run, broker.endpoint("router"), "--heartbeat-ms", "1000")
    yield broker, device
    assert device.stop()[-1] == "stopped"


def test_requests_beyond_the_bound_get_429_and_the_bridge_serves_on(brokers, workers, run: Programs) -> None:
    broker = brokers("router", ["tcp://127.0.0.1:*"])
    device = CppBridge(  # one place per connection, and no room in its queue
        run, broker.endpoint("router"), "--max-in-flight", "2", "--connection-queue-bytes", "0"
    )
    with (
        Client(device.endpoints[0], "server", backpressure=False) as client,
        Client(device.endpoints[0], "server") as other,
    ):
        held = [client.submit("nobody-serves-this-yet", b"0"), other.submit("nobody-serves-this-yet", b"1")]
        eventually(lambda: device.forwarded == 2, WAIT, "two requests forwarded")
        with pytest.raises(RequestFailed) as refused:
            client.request("echo", b"third", timeout=WAIT)
        assert refused.value.status == 429 and "connection_queue_bytes" in refused.value.reason
        assert refused.value.retry_after == 0.25  # the Client waits that long and sends it again by default
        workers(broker.endpoint("router"), "router", "nobody-serves-this-yet", tagged(b"late:"))
        assert [future.result(WAIT).payload for future in held] == [b"late:0", b"late:1"]
        workers(broker.endpoint("router"), "router", "echo", tagged(b"py:"))
        assert client.request("echo", b"fourth", timeout=WAIT).payload == b"py:fourth"
    stats = device.stats()
    assert (stats["refused"], stats["forwarded"], stats["errors"]) == (1, 3, 0)


def test_one_client_cannot_take_every_place_in_flight(brokers, workers, run: Programs) -> None:
    """As the Python bridge: one connection's requests for a service nobody serves take at most its share (14 of
    16 places), the rest wait in its queue (not refused); another client is served meanwhile."""
    broker = brokers("router", ["tcp://127.0.0.1:*"])
    device = CppBridge(run, broker.endpoint("router"), "--max-in-flight", "16")
    with RawPeer("server", device.endpoints[0]) as hog:
        ask(hog, 40)
        assert statuses_of_answers(hog) == {}  # 14 wait upstream, 26 in the hog's queue
        workers(broker.endpoint("router"), "router", "echo", tagged(b"py:"))
        with Client(device.endpoints[0], "server") as client:
            assert [client.request("echo", b"%d" % n, timeout=WAIT).payload for n in range(3)] == [
                b"py:0",
                b"py:1",
                b"py:2",
            ]
    stats = device.stats()
    assert (stats["refused"], stats["forwarded"], stats["errors"]) == (0, 17, 0)


def test_malformed_upstream_reply_is_a_502(run: Programs) -> None:
    with zmq.Context() as context:
        upstream = context.socket(zmq.ROUTER)  # a broken "MDP broker" answering garbage
        upstream.linger = 0
        port = upstream.bind_to_random_port("tcp://127.0.0.1")
        device = CppBridge(run, f"tcp://127.0.0.1:{port}")
        with Client(device.endpoints[0], "server") as client:
            future = client.submit("echo", b"x")
            assert upstream.poll(WAIT * 1000), "the bridge forwarded nothing"
            dealer, *request = upstream.recv_multipart()
            assert request == protocol.mdp_client_request(b"echo", [b"x"])
            upstream.send_multipart([dealer, b"", b"MDPC01", b"not-echo", b"x"])
            with pytest.raises(RequestFailed) as failed:
                future.result(WAIT)
            assert (failed.value.status, failed.value.reason) == (502, "malformed reply from the upstream broker")
        upstream.close()


def test_a_cancel_closes_the_requests_dealer(brokers, run: Programs) -> None:
    broker = brokers("router", ["tcp://127.0.0.1:*"])
    device = CppBridge(run, broker.endpoint("router"))
    with Client(device.endpoints[0], "server") as client:
        for n in range(3):
            client.submit("nobody-serves-this", b"%d" % n)
        eventually(lambda: device.dealers == 3, WAIT, "three DEALERs in flight")
        doomed = client.submit("nobody-serves-this", b"3")
        eventually(lambda: device.dealers == 4, WAIT, "the fourth request forwarded")
        assert doomed.cancel()
        eventually(lambda: device.dealers == 3, WAIT, "the cancelled request's DEALER closed")
    assert device.forwarded == 4


def test_garbage_from_a_client_is_dropped_and_counted(bridge, workers) -> None:
    broker, device = bridge
    workers(broker.endpoint("router"), "router", "echo", tagged(b"py:"))
    with zmq.Context() as context:
        rogue = context.socket(zmq.CLIENT)
        rogue.linger = 0
        rogue.connect(device.endpoints[0])
        for garbage in (
            b"\xff\x00",  # a length running past the end
            codec.encode([b"GDPC01"]),
            codec.encode([b"NOTGDP", b"\x01", b"id", b"echo"]),
            codec.encode([b"GDPC01", b"\x01", b"", b"echo", b"empty id"]),
            codec.encode([b"GDPC01", b"\x01", b"i" * 256, b"echo", b"long id"]),
            codec.encode([b"GDPC01", b"\x06", b"id", b"echo", b"\x01\x09x", b"truncated fields"]),
            codec.encode([b"GDPC01", b"\x05", b"id", b"extra"]),
            codec.encode([b"x"] * 2000),  # more frames than a message may have
        ):
            rogue.send(garbage)
        rogue.send(codec.encode([b"GDPC01", b"\x01", b"r" * 16, b"e" * 4097, b"long description"]))
        assert rogue.poll(WAIT * 1000)
        request_id, status, _, body = protocol.parse_client_reply(codec.decode(rogue.recv()))
        assert (request_id, status) == (b"r" * 16, protocol.BAD_REQUEST), body
        rogue.close()
    eventually(lambda: device.stats()["dropped"] == 8, WAIT, "the eight garbage messages dropped")
    with Client(device.endpoints[0], "server") as client:
        assert client.request("echo", b"after", timeout=WAIT).payload == b"py:after"
    assert device.stats()["errors"] == 0


@pytest.fixture(params=["python", "cpp"])
def any_bridge(request: pytest.FixtureRequest, brokers, run: Programs) -> Iterator[tuple[object, object]]:
    """Either bridge, with 0.2 s heartbeats, in front of the Python broker's ROUTER link."""
    broker = brokers("router", ["tcp://127.0.0.1:*"])
    if request.param == "python":
        device: object = Bridge(["tcp://127.0.0.1:*"], broker.endpoint("router"), heartbeat_interval=0.2).start()
        yield broker, device
        device.stop()  # type: ignore[attr-defined]
    else:
        device = CppBridge(run, broker.endpoint("router"), "--heartbeat-ms", "200")
        yield broker, device
        device.stop()  # type: ignore[attr-defined]


def test_a_request_the_bridge_forgot_is_sent_again_when_its_client_asks(any_bridge, workers) -> None:
    """A client heartbeating less often than the bridge expects is forgotten with its request between heartbeats;
    when it asks about that request, the bridge says it does not know it, and the client sends it again."""
    broker, device = any_bridge
    with Client(device.endpoints[0], "server", heartbeat_interval=1.0, reask_after=1.5) as client:
        future = client.submit("later", b"x")
        eventually(lambda: device.forwarded >= 2, WAIT, "the request sent again after the client asked about it")
        workers(broker.endpoint("router"), "router", "later", tagged(b"py:"))
        assert future.result(WAIT).payload == b"py:x"
        assert client.resent >= 1 and client.replies_dropped == 0


def test_the_cpp_bridge_bounds_are_the_python_ones() -> None:
    """bridge.hpp restates the field bounds of generaldomo/sansio/wire/limits.py and the bridge's client share (C++
    cannot import them): the header's constants must be the same values."""
    header = (Path(__file__).resolve().parents[2] / "cpp/include/generaldomo/bridge.hpp").read_text()
    stated = dict(
        re.findall(r"\b(max_request_id|max_description|max_reasked|max_fields|client_share) = ([\d.]+)", header)
    )
    assert {name: float(value) for name, value in stated.items()} == {
        "max_request_id": limits.REQUEST_ID.high,
        "max_description": limits.DESCRIPTION.high,
        "max_reasked": limits.REASKED.high,
        "max_fields": limits.FIELDS_FRAME.high,
        "client_share": bridge_module.CLIENT_SHARE,
    }

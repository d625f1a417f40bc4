"""Bounded work per message through real sockets: frame bombs and oversized messages are dropped while they
are read, counted, logged once, and the broker serves other clients meanwhile."""

from __future__ import annotations

import logging
import threading

import pytest
import zmq
from hypothesis import given
from hypothesis import strategies as st
from waiting import eventually

from generaldomo import Client, errors
from generaldomo.io.hub import links
from generaldomo.io.hub.links import RouterLink, ServerLink
from generaldomo.sansio.broker.core import Settings
from generaldomo.sansio.wire import codec

pytestmark = pytest.mark.pure  # runs again in env pure, on the pure-Python path


class RoundTrips(threading.Thread):
    """Echo round trips by another client, as many as fit until stopped (bounded), all checked."""

    def __init__(self, endpoint: str, transport: str) -> None:
        super().__init__(daemon=True)
        self.client = Client(endpoint, transport)
        self.done = 0
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stopping.is_set() and self.done < 100_000:
                assert self.client.request("echo", b"%d" % self.done, timeout=60).payload == b"%d" % self.done
                self.done += 1
        except BaseException as error:  # reported by finish()
            self.error = error

    def finish(self) -> int:
        eventually(lambda: self.done > 0, 60, "a round trip")
        self.stopping.set()
        self.join(90)
        self.client.close()
        assert self.error is None and not self.is_alive()
        return self.done


def send_bomb(endpoint: str, frames: int) -> None:
    attacker = zmq.Context.instance().socket(zmq.DEALER)
    attacker.setsockopt(zmq.LINGER, 2000)
    attacker.connect(endpoint)
    for _ in range(frames - 1):
        attacker.send(b"", zmq.SNDMORE)
    attacker.send(b"")
    attacker.close()


def test_router_frame_bomb_is_dropped_once_while_others_are_served(brokers, workers, caplog) -> None:
    broker = brokers("router", ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint("router", "tcp")
    workers(endpoint, "router")
    others = RoundTrips(endpoint, "router")
    others.start()
    eventually(lambda: others.done > 0, 60, "a first round trip")
    with caplog.at_level(logging.WARNING, logger="generaldomo.io.hub.links"):
        send_bomb(endpoint, 300_000)
        eventually(lambda: broker.core.counters["dropped_too_many_frames"] == 1, 60, "the bomb to be dropped")
        before = others.done
        eventually(lambda: others.done > before, 60, "round trips after the bomb")
    assert others.finish() > before
    assert caplog.text.count("dropped a message of 300000 frames") == 1
    assert broker.core.counters["malformed"] == 0  # nothing of it reached the core


def test_router_byte_limit_holds_across_frames(brokers, workers) -> None:
    broker = brokers("router", ["tcp://127.0.0.1:*"], settings=Settings(max_message=100_000))
    endpoint = broker.endpoint("router", "tcp")
    workers(endpoint, "router")
    attacker = zmq.Context.instance().socket(zmq.DEALER)
    attacker.setsockopt(zmq.LINGER, 0)
    attacker.connect(endpoint)
    try:
        # each frame is under libzmq's per-frame limit; together they are far above the broker's
        attacker.send_multipart([b"GDPC01", b"\x01", b"id", b"echo", *[b"x" * 90_000] * 16])
        eventually(lambda: broker.core.counters["dropped_too_large"] == 1, 30, "the message to be dropped")
        with Client(endpoint, "router") as client:
            assert client.request("echo", b"x" * 50_000, timeout=30).payload == b"x" * 50_000
    finally:
        attacker.close()
    assert broker.core.counters["requests"] == 1


@pytest.mark.needs_draft
def test_server_part_of_zeros_stops_decoding_at_the_frame_limit(brokers, workers, caplog) -> None:
    broker = brokers("server", ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint("server", "tcp")
    workers(endpoint, "server")
    others = RoundTrips(endpoint, "server")
    others.start()
    attacker = zmq.Context.instance().socket(zmq.CLIENT)
    attacker.setsockopt(zmq.LINGER, 2000)
    attacker.connect(endpoint)
    with caplog.at_level(logging.WARNING, logger="generaldomo.io.hub.links"):
        attacker.send(bytes(20_000_000))  # 20 million empty frames, packed
        eventually(lambda: broker.core.counters["dropped_too_many_frames"] == 1, 60, "the part to be dropped")
    attacker.close()
    assert others.finish() > 0
    assert caplog.text.count("dropped a message of 1024+ frames") == 1


@pytest.mark.parametrize("drain", ["native", "python"])
@pytest.mark.parametrize("link_type", [RouterLink, ServerLink])
def test_links_count_each_limit(link_type, drain, monkeypatch) -> None:
    if drain == "python":  # what a stock libzmq (without zmq_generaldomo_drain) gets
        monkeypatch.setattr(links, "_NATIVE_DRAIN", None)
    elif links._NATIVE_DRAIN is None:
        pytest.skip("this libzmq lacks zmq_generaldomo_drain (tools/draft_pyzmq.py adds it)")
    context = zmq.Context.instance()
    link = link_type(context, ["tcp://127.0.0.1:*"], 1000, max_frames=4)
    router = link_type is RouterLink
    peer = context.socket(zmq.DEALER if router else zmq.CLIENT)
    peer.setsockopt(zmq.LINGER, 0)
    peer.connect(link.endpoints[0])

    def send(frames: list[bytes]) -> None:
        peer.send_multipart(frames) if router else peer.send(codec.encode(frames))

    # a SERVER message is one part, which libzmq's MAXMSGSIZE bounds (it cuts off the peer beyond it)
    too_large = [[b"x" * 600, b"x" * 600]] if router else []
    try:
        for message in ([b"a"] * 5, [b"b"] * 4, *too_large, [b"x" * 490, b"y" * 489]):
            send(message)
        got = []
        while len(got) < 2:
            assert link.socket.poll(5000)
            while (message := link.recv()) is not None:
                got.append(message[1])
        assert got == [[b"b"] * 4, [b"x" * 490, b"y" * 489]]
        expected = {"dropped_too_many_frames": 1, "dropped_too_large": 1} if router else {"dropped_too_many_frames": 1}
        assert link.take_counts() == expected
    finally:
        peer.close()
        link.close()


@given(st.lists(st.binary(max_size=300), max_size=40), st.integers(min_value=0, max_value=50))
def test_codec_decodes_up_to_the_frame_limit(frames: list[bytes], limit: int) -> None:
    data = codec.encode(frames)
    if len(frames) <= limit:
        assert codec.decode(data, limit) == frames
    else:
        with pytest.raises(errors.TooManyFrames):
            codec.decode(data, limit)

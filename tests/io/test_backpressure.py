"""A peer whose pipe is full never stalls anybody else; drops are counted and logged a few lines at a time."""

from __future__ import annotations

import logging

import pytest
import zmq
from waiting import eventually

from generaldomo import Client
from generaldomo.sansio.wire import codec

pytestmark = pytest.mark.pure  # runs again in env pure, on the pure-Python path

BODY = b"x" * 65536


def request(transport: str, n: int) -> list[bytes]:
    return [b"GDPC01", b"\x01", b"%d" % n, b"echo", BODY]


def test_a_peer_that_never_reads_costs_others_nothing(transport, brokers, workers, caplog) -> None:
    broker = brokers(transport, ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint(transport, "tcp")
    workers(endpoint, transport)
    sink = zmq.Context.instance().socket(zmq.DEALER if transport == "router" else zmq.CLIENT)
    sink.setsockopt(zmq.LINGER, 0)
    sink.setsockopt(zmq.RCVHWM, 1)
    sink.setsockopt(zmq.RCVBUF, 4096)
    sink.connect(endpoint)
    with caplog.at_level(logging.WARNING, logger="generaldomo.io.hub.links"), Client(endpoint, transport) as other:
        try:
            n = 0
            # 64 KiB answers the sink never reads: the broker's queue to it fills, then each answer is dropped
            while not broker.core.counters["sends_dropped_full"] and n < 20_000:
                for _ in range(100):
                    message = request(transport, n)
                    sink.send_multipart(message) if transport == "router" else sink.send(codec.encode(message))
                    n += 1
                assert other.request("echo", b"meanwhile", timeout=30).payload == b"meanwhile"
            eventually(lambda: broker.core.counters["sends_dropped_full"] > 0, 60, "a send to the full pipe to drop")
            for k in range(50):
                assert other.request("echo", b"%d" % k, timeout=30).payload == b"%d" % k
        finally:
            sink.close()
    assert caplog.text.count("its queue is full") == 1


def test_undecodable_parts_are_counted_and_logged_a_few_times(brokers, workers, caplog) -> None:
    broker = brokers("server", ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint("server", "tcp")
    attacker = zmq.Context.instance().socket(zmq.CLIENT)
    attacker.setsockopt(zmq.LINGER, 1000)
    attacker.connect(endpoint)
    with caplog.at_level(logging.WARNING, logger="generaldomo.io.hub.links"):
        for _ in range(2000):
            attacker.send(b"\x05ab")
        attacker.close()
        eventually(lambda: broker.core.counters["dropped_undecodable"] == 2000, 60, "every part to be dropped")
        workers(endpoint, "server")
        with Client(endpoint, "server") as client:
            assert client.request("echo", b"still here", timeout=30).payload == b"still here"
    assert caplog.text.count("does not unpack") == 1

"""Garbage through real sockets: the broker logs, drops or answers, and keeps serving."""

from __future__ import annotations

import logging
import socket
import time

import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from waiting import eventually

from generaldomo import Client, RequestFailed
from generaldomo.sansio.broker.core import Settings
from generaldomo.sansio.wire import codec

pytestmark = pytest.mark.pure  # runs again in env pure, on the pure-Python path

frames = st.lists(
    st.one_of(
        st.binary(max_size=40),
        st.sampled_from([b"", b"MDPC01", b"MDPW01", b"MDPC02", b"MDPW02", b"GDPC01", b"GDPW01", b"\x01", b"\x03"]),
    ),
    max_size=8,
)


def test_random_frames_from_peers_do_not_hurt_the_broker(transport, brokers, workers) -> None:
    broker = brokers(transport, ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint(transport, "tcp")
    workers(endpoint, transport)
    context = zmq.Context.instance()
    attacker = context.socket(zmq.DEALER if transport == "router" else zmq.CLIENT)
    attacker.setsockopt(zmq.LINGER, 0)
    attacker.connect(endpoint)

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
    @given(frames)
    def send_garbage(message: list[bytes]) -> None:
        if transport == "router":
            attacker.send_multipart(message or [b""])
        else:
            attacker.send(codec.encode(message))

    try:
        send_garbage()
        if transport == "server":
            attacker.send(b"\xff\x00\x00\xff\xff")  # a length prefix running past the end
        with Client(endpoint, transport) as client:
            assert client.request("echo", b"still serving", timeout=30).payload == b"still serving"
    finally:
        attacker.close()
    assert broker.core.counters["malformed"] > 0
    # Garbage that happens to be a well-formed request waits for a worker of its service, or went to a worker
    # that garbage registered (envelope frames let one connection claim many): never to the echo worker.
    echo = [w for w in broker.core.workers.values() if w.description == b"echo"]
    assert len(echo) == 1
    assert all(task.worker is not echo[0] for task in broker.core.tasks.values())
    assert all(task.worker is not None or not task.service.waiting for task in broker.core.tasks.values())


def test_raw_tcp_garbage_and_port_scan(transport, brokers, workers, caplog) -> None:
    broker = brokers(transport, ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint(transport, "tcp")
    workers(endpoint, transport)
    port = int(endpoint.rsplit(":", 1)[1])
    payloads = [b"", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", bytes(range(256)) * 40, b"\xff" + b"\x00" * 8 + b"\x7f"]
    with caplog.at_level(logging.WARNING, logger="generaldomo.io.hub.links"):
        for payload in payloads:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
                raw.sendall(payload)
                time.sleep(0.05)
        with Client(endpoint, transport) as client:
            assert client.request("echo", b"after the scan", timeout=30).payload == b"after the scan"
        # at least the HTTP request and the binary junk fail the handshake
        eventually(lambda: broker.core.counters["connections_refused"] >= 2, what="refusals to be logged")
    refused = broker.core.counters["connections_refused"]
    assert refused >= 2
    assert caplog.text.count("link refused a connection on tcp://127.0.0.1:") == refused  # one line each


def test_oversized_request_is_refused_and_the_broker_goes_on(transport, brokers, workers) -> None:
    broker = brokers(transport, ["tcp://127.0.0.1:*"], settings=Settings(max_message=10_000))
    endpoint = broker.endpoint(transport, "tcp")
    workers(endpoint, transport)
    with Client(endpoint, transport) as client:
        with pytest.raises(RequestFailed) as refused:
            client.request("echo", b"x" * 20_000, timeout=30)
        assert refused.value.status == 413
        assert client.request("echo", b"small", timeout=30).payload == b"small"

"""Partial results: generator handlers stream, clients read them as they come."""

from __future__ import annotations

import threading

import zmq

from generaldomo import Client


def counting(payload: bytes):
    for n in range(3):
        yield b"%s-%d" % (payload, n)
    return b"done"


def test_generator_handler_streams_to_stream_and_callbacks(transport, brokers, workers) -> None:
    broker = brokers(transport, ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint(transport, "tcp")
    workers(endpoint, transport, "count", counting)
    with Client(endpoint, transport) as client:
        parts = list(client.stream("count", b"x", timeout=30))
        assert [(p.partial, p.payload) for p in parts] == [
            (True, b"x-0"),
            (True, b"x-1"),
            (True, b"x-2"),
            (False, b"done"),
        ]
        seen: list[bytes] = []
        got_all = threading.Event()

        def on_partial(reply) -> None:
            seen.append(reply.payload)
            if len(seen) == 3:
                got_all.set()

        final = client.submit("count", b"y", on_partial=on_partial).result(30)
        assert final.payload == b"done" and got_all.wait(10) and seen == [b"y-0", b"y-1", b"y-2"]


def test_mdp01_clients_get_only_the_final_result(brokers, workers) -> None:
    broker = brokers("router", ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint("router", "tcp")
    workers(endpoint, "router", "count", counting)
    dealer = zmq.Context.instance().socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(endpoint)
    try:
        dealer.send_multipart([b"", b"MDPC01", b"count", b"z"])
        assert dealer.poll(30_000) and dealer.recv_multipart() == [b"", b"MDPC01", b"count", b"done"]
        assert not dealer.poll(300)
    finally:
        dealer.close()

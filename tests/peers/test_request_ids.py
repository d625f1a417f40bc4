"""Issue 20 item 5: request ids nobody can predict, and kept answers handed out only for the request they answer.

The attack of the issue, over real sockets in plaintext, both transports: a peer that saw one of a client's
request ids on the wire sends the ids it predicts the client will use next, with requests of its own; then
the client sends its requests. Before, the ids were a random prefix and a counter, and the broker handed out
the answer kept (or due) for an id whatever was asked: the client's requests were answered with the attacker's
payloads. Now the ids are 16 random bytes each, and the broker checks a kept answer or a live task against
the description and payload of the request."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from hostile import RawPeer
from waiting import eventually

from generaldomo import Broker, Client, Worker
from generaldomo.sansio.wire import protocol

NEXT = 20  # ids the attacker pre-sends
REQUESTS = (b"\x01", b"\x06")  # REQUEST, REQUEST+FIELDS (request() sends its timeout as a deadline)


def predicted(seen: bytes, count: int) -> list[bytes]:
    """The next ids of a client whose ids are an 8-byte prefix and an 8-byte counter (the scheme before)."""
    prefix, serial = seen[:8], int.from_bytes(seen[8:16], "big")
    return [prefix + (serial + n).to_bytes(8, "big") for n in range(1, count + 1)]


def final_body(peer: RawPeer) -> tuple[bytes, bytes]:
    reply = protocol.parse_client_reply(peer.recv() or [])
    assert reply is not None and reply[1] is not None
    return reply[0], reply[3][0] if reply[3] else b""


def test_an_attacker_that_saw_one_id_cannot_capture_the_next_answers(
    transport: str, brokers: Callable[..., Broker], workers: Callable[..., Worker]
) -> None:
    broker = brokers(transport, ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint(transport, "tcp")
    workers(endpoint, transport)
    with Client(endpoint, transport) as victim, RawPeer(transport, endpoint) as attacker:
        wire: list[list[bytes]] = []
        send = victim._channel.send
        victim._channel.send = lambda frames: (wire.append(list(frames)), send(frames))[1]  # an eavesdropper
        assert victim.request("echo", b"first", timeout=30).payload == b"first"
        seen = next(frames[2] for frames in wire if frames[1] in REQUESTS)
        for rid in predicted(seen, NEXT):
            attacker.send(protocol.gdp_request(rid, b"echo", [b"the attacker's"]))
        for _ in range(NEXT):
            final_body(attacker)  # its own tasks ran: their answers are kept under the predicted ids
        answers = [victim.request("echo", b"mine %d" % n, timeout=30).payload for n in range(NEXT)]
        assert answers == [b"mine %d" % n for n in range(NEXT)]
        ids = [frames[2] for frames in wire if frames[1] in REQUESTS]
    assert len(set(ids)) == len(ids) == NEXT + 1 and all(len(rid) == 16 for rid in ids)
    assert not set(ids) & set(predicted(seen, NEXT))


@pytest.mark.parametrize("answered", [True, False], ids=["kept answer", "live task"])
def test_a_pre_sent_id_captures_nothing(transport: str, brokers: Callable[..., Broker], answered: bool) -> None:
    """Whatever the ids, a request is answered for what it asked: an id sent first by another peer, with a
    request of its own that is already answered (kept) or still running, is not this request's answer."""
    broker = brokers(transport, ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint(transport, "tcp")
    release = threading.Event()

    def echo(payload: bytes | tuple[bytes, ...]) -> bytes | tuple[bytes, ...]:
        if payload == b"the attacker's" and not answered:
            release.wait(30)  # the attacker's task still runs when the victim asks
        return payload

    worker = Worker(endpoint, "echo", echo, transport)
    thread = threading.Thread(target=worker.serve, daemon=True)
    thread.start()
    second = Worker(endpoint, "echo", echo, transport)  # serves the victim while the first is held
    second_thread = threading.Thread(target=second.serve, daemon=True)
    second_thread.start()
    try:
        with RawPeer(transport, endpoint) as attacker, RawPeer(transport, endpoint) as victim:
            eventually(lambda: len(broker.core.workers) == 2, 30, "both workers to register")
            attacker.send(protocol.gdp_request(b"victim's id", b"echo", [b"the attacker's"]))
            if answered:
                assert final_body(attacker) == (b"victim's id", b"the attacker's")
            else:
                eventually(lambda: broker.core.tasks and all(t.worker for t in broker.core.tasks.values()), 30,
                           "the attacker's task to run")  # fmt: skip
            victim.send(protocol.gdp_request(b"victim's id", b"echo", [b"mine"]))
            assert final_body(victim) == (b"victim's id", b"mine")
            release.set()
            if not answered:
                assert final_body(attacker) == (b"victim's id", b"the attacker's")  # each got its own
            victim.send(protocol.gdp_request(b"victim's id", b"echo", [b"mine"]))  # a true retry: the kept answer
            assert final_body(victim) == (b"victim's id", b"mine")
        counters = broker.core.counters
        assert counters["request_id_conflicts"] == 1 and counters["answers_resent"] == 1
    finally:
        release.set()
        for each in (worker, second):
            each.stop()
        thread.join(20)
        second_thread.join(20)

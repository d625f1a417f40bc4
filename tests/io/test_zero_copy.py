"""Large payloads cross the broker without a copy: the links keep frames of ``KEEP`` bytes or more in the message
libzmq received and send them on by reference (the C accelerator's path, which ``tox -e py`` uses).

The broker runs in this process, its peers are bare pyzmq sockets (which the accelerator does not count), so the
accelerator's process-wide ``traffic()`` counts the broker's links alone.
"""

from __future__ import annotations

import gc
import hashlib
import os
from collections.abc import Iterator

import pytest
import zmq
from waiting import eventually

from generaldomo import Broker, Settings
from generaldomo.io import speedups
from generaldomo.io.hub.links import KEEP
from generaldomo.sansio.wire import codec, protocol
from generaldomo.sansio.wire.limits import DESCRIPTION

MIB = 1024 * 1024
WAIT = 60.0
LARGE = Settings(
    max_message=256 * MIB, queue_bytes=512 * MIB, service_queue_bytes=512 * MIB, keep_answers=0.0,
    held_bytes=1024 * MIB, connection_bytes=512 * MIB,
)  # fmt: skip

pytestmark = pytest.mark.skipif(speedups.native is None, reason="the pure-Python path copies (tox -e pure)")


@pytest.fixture
def broker(endpoint_for) -> Iterator[Broker]:
    broker = Broker(settings=LARGE)
    broker.add_link("server", [endpoint_for("inproc")])
    broker.add_link("router", ["tcp://127.0.0.1:*", endpoint_for("inproc")])
    with broker.start():
        yield broker


class MdpWorker:
    """A bare MDP/0.1 worker on a DEALER socket: answers each request with the digest of its body."""

    def __init__(self, context: zmq.Context, endpoint: str) -> None:
        self.socket = context.socket(zmq.DEALER)
        self.socket.linger = 0
        self.socket.connect(endpoint)
        self.socket.send_multipart([b"", b"MDPW01", b"\x01", b"echo"])

    def serve_one(self) -> bytes:
        """Answer one request (heartbeats skipped); return its body's first frame."""
        for _ in range(1000):
            assert self.socket.poll(WAIT * 1000), "no request came"
            frames = self.socket.recv_multipart(copy=False)
            if bytes(frames[2]) != b"\x02":
                continue  # a heartbeat
            client, body = frames[3].bytes, [frame.buffer for frame in frames[5:]]
            digest = hashlib.sha256(b"".join(body)).hexdigest().encode()
            self.socket.send_multipart([b"", b"MDPW01", b"\x03", client, b"", digest])
            return bytes(body[0][:16])
        pytest.fail("only heartbeats")


def delta(before: dict[str, int]) -> dict[str, int]:
    return {key: value - before[key] for key, value in speedups.native.traffic().items() if key != "held"}


def held() -> int:
    """Received messages kept now, once stopped brokers of earlier tests (in reference cycles) are collected."""
    gc.collect()
    return int(speedups.native.traffic()["held"])


@pytest.mark.needs_draft
def test_a_large_request_from_a_server_client_reaches_a_router_worker_uncopied(broker: Broker) -> None:
    context = zmq.Context.instance()
    worker = MdpWorker(context, broker.endpoint("router", "tcp"))
    eventually(lambda: broker.core.workers, WAIT, "the worker registered")
    client = context.socket(zmq.CLIENT)
    client.linger = 0
    client.connect(broker.endpoint("server", "inproc"))
    payload = os.urandom(1024) * (64 * 1024)  # 64 MiB
    kept = held()
    before = speedups.native.traffic()
    client.send(codec.encode(protocol.gdp_request(b"r" * 16, b"echo", [payload])), copy=False)
    assert worker.serve_one() == payload[:16]
    assert client.poll(WAIT * 1000)
    request_id, status, _, body = protocol.parse_client_reply(codec.decode(client.recv()))
    assert (request_id, status, body) == (b"r" * 16, protocol.OK, (hashlib.sha256(payload).hexdigest().encode(),))
    moved = delta(before)
    assert moved["received_kept"] == moved["sent_by_reference"] == len(payload)
    assert moved["received_copied"] < 1024 and moved["sent_copied"] < 1024, moved
    eventually(lambda: held() <= kept, WAIT, "every kept message released")
    client.close()
    worker.socket.close()


def test_large_frames_from_a_router_client_pass_by_reference_and_intact(broker: Broker) -> None:
    """Frames of all sizes around the threshold, in one request and back: each arrives whole and unchanged."""
    context = zmq.Context.instance()
    worker = context.socket(zmq.DEALER)  # an MDP worker that echoes the body
    worker.linger = 0
    worker.connect(broker.endpoint("router", "inproc"))
    worker.send_multipart([b"", b"MDPW01", b"\x01", b"echo"])
    eventually(lambda: broker.core.workers, WAIT, "the worker registered")
    client = context.socket(zmq.DEALER)
    client.linger = 0
    client.connect(broker.endpoint("router", "tcp"))
    body = [os.urandom(size) for size in (0, 1, KEEP - 1, KEEP, KEEP + 1, 3 * MIB, 10)]
    kept = held()
    before = speedups.native.traffic()
    for n in range(3):
        client.send_multipart([b"", b"MDPC01", b"echo", *body])
        assert worker.poll(WAIT * 1000)
        frames = worker.recv_multipart()
        while frames[2] != b"\x02":  # heartbeats
            assert worker.poll(WAIT * 1000)
            frames = worker.recv_multipart()
        assert frames[5:] == body, f"round {n}: the worker got other bytes"
        worker.send_multipart([b"", b"MDPW01", b"\x03", frames[3], b"", *frames[5:]])
        assert client.poll(WAIT * 1000)
        assert client.recv_multipart() == [b"", b"MDPC01", b"echo", *body], f"round {n}: the client got other bytes"
    large = sum(len(frame) for frame in body if len(frame) >= KEEP)
    moved = delta(before)
    assert moved["received_kept"] == moved["sent_by_reference"] == 2 * 3 * large, moved  # both ways, 3 rounds
    assert moved["sent_copied"] < 3 * 2 * (KEEP + 1024), moved
    eventually(lambda: held() <= kept, WAIT, "every kept message released")
    client.close()
    worker.close()


def test_a_large_description_is_read_as_bytes(broker: Broker) -> None:
    """Only bodies pass by reference: a description is a field the broker reads (here an unknown ``mmi.``
    service, answered 501 as MMI says); one of KEEP bytes or more is beyond the bounds of a description
    (:mod:`generaldomo.sansio.wire.limits`) and answered 400."""
    client = zmq.Context.instance().socket(zmq.CLIENT)
    client.linger = 0
    client.connect(broker.endpoint("server", "inproc"))
    longest = b"mmi." + b"x" * (DESCRIPTION.high - 4)
    client.send(codec.encode(protocol.gdp_request(b"r" * 16, longest, [b"body"])))
    assert client.poll(WAIT * 1000)
    assert protocol.parse_client_reply(codec.decode(client.recv()))[::3] == (b"r" * 16, (protocol.NOT_IMPLEMENTED,))
    client.send(codec.encode(protocol.gdp_request(b"r" * 16, b"mmi." + b"x" * (2 * KEEP), [b"body"])))
    assert client.poll(WAIT * 1000)
    _, status, _, body = protocol.parse_client_reply(codec.decode(client.recv()))
    assert status == protocol.BAD_REQUEST and b"description of" in body[0]
    client.close()

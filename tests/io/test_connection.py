"""Peer connections: sending from many threads, read by one IO thread."""

from __future__ import annotations

import select
import threading
import time

import pytest
import zmq
from zmq.utils import z85

from generaldomo import Client
from generaldomo.io.peer.connection import BrokerChannel, Curve, connect
from generaldomo.sansio.peer.session import Reconnect, ToBroker
from generaldomo.sansio.wire import codec

pytestmark = pytest.mark.pure  # runs again in env pure, on the pure-Python path


def test_sends_from_many_threads_all_arrive_intact(transport: str) -> None:
    context = zmq.Context.instance()
    server = context.socket(zmq.ROUTER if transport == "router" else zmq.SERVER)
    server.bind("tcp://127.0.0.1:*")
    connection = connect(server.getsockopt(zmq.LAST_ENDPOINT).decode(), transport, context)
    done = threading.Event()

    def io_loop() -> None:  # what Client and Worker do: one thread owns the socket
        poller = connection.adopt()
        while not done.is_set():
            poller.poll(100)
            connection.flush()
        connection.close(linger_ms=1000)

    io = threading.Thread(target=io_loop)
    io.start()
    senders = [
        threading.Thread(target=lambda n=n: [connection.send([b"%d" % n, b"%d" % i, b""]) for i in range(300)])
        for n in range(8)
    ]
    for thread in senders:
        thread.start()
    received = []
    deadline = time.monotonic() + 30
    while len(received) < 8 * 300 and time.monotonic() < deadline:
        if server.poll(100):
            received.append(server.recv_multipart()[1:] if transport == "router" else codec.decode(server.recv()))
    done.set()
    io.join(10)
    for thread in senders:
        thread.join(10)
    server.close(0)
    assert sorted(map(tuple, received)) == sorted((b"%d" % n, b"%d" % i, b"") for n in range(8) for i in range(300))
    for n in range(8):  # each thread's messages stay in its own order
        mine = [int(m[1]) for m in received if m[0] == b"%d" % n]
        assert mine == sorted(mine)


def test_curve_options_take_z85_text_or_raw_bytes() -> None:
    public, secret = zmq.curve_keypair()
    as_text = Curve(public.decode(), public, secret.decode())
    as_raw = Curve(z85.decode(public), z85.decode(public), z85.decode(secret))
    assert as_text.server_key == public and len(as_raw.server_key) == 32
    with pytest.raises(ValueError, match="32 raw bytes or 40 characters"):
        Curve(b"short", public, secret)
    with pytest.raises(ValueError, match="server_key"):
        Curve.of(None, (public, secret))
    assert Curve.of(None, None) is None
    fresh = Curve.of(public, None)  # a key pair of its own
    assert fresh is not None and fresh.public_key != public and len(fresh.secret_key) == 40
    channel = BrokerChannel("tcp://127.0.0.1:9", "router", zmq.Context.instance(), as_raw)
    assert channel.connection.socket.getsockopt(zmq.MECHANISM) == zmq.CURVE
    channel.adopt()
    channel.perform([Reconnect("a test", silent=True)])
    assert channel.connection.socket.getsockopt(zmq.MECHANISM) == zmq.CURVE  # a reconnect keeps it
    channel.close()


def test_a_curve_client_reaches_a_curve_server(transport: str) -> None:
    public, secret = zmq.curve_keypair()
    server = zmq.Context.instance().socket(zmq.ROUTER if transport == "router" else zmq.SERVER)
    server.setsockopt(zmq.LINGER, 0)
    server.curve_server = True
    server.curve_secretkey = secret
    server.bind("tcp://127.0.0.1:*")
    endpoint = server.getsockopt(zmq.LAST_ENDPOINT).decode()
    try:
        with Client(
            endpoint, transport, server_key=public.decode(), keys=zmq.curve_keypair(), fail_unknown=False
        ) as client:  # a plain REQUEST: no fields
            client.submit("echo", b"secret")
            frames: list[bytes] = []
            for _ in range(20):  # heartbeats may come first
                assert server.poll(20_000), "nothing arrived over CURVE"
                frames = server.recv_multipart()[1:] if transport == "router" else codec.decode(server.recv())
                if frames[1] == b"\x01":
                    break
            assert frames[0] == b"GDPC01" and frames[3:] == [b"echo", b"secret"]
    finally:
        server.close()


def test_client_and_worker_curve_arguments_against_a_curve_broker(transport: str, brokers, workers, tmp_path) -> None:
    """Needs the broker side of CURVE (generaldomo.io.keys and generaldomo.io.auth, round 2); skips without."""
    keys = pytest.importorskip("generaldomo.io.keys", reason="needs the broker side of CURVE")
    auth = pytest.importorskip("generaldomo.io.auth", reason="needs the broker side of CURVE")
    secrets = tmp_path / "secrets"
    for role in ("clients", "workers"):
        (tmp_path / role).mkdir()
    made = {}
    for name, role, meta in (("broker", None, None), ("client", "clients", None), ("worker", "workers", "echo")):
        public, made[name] = keys.keygen(secrets, name, {"services": meta} if meta else None)
        if role:
            (tmp_path / role / public.name).write_bytes(public.read_bytes())
    security = auth.BrokerSecurity.from_files(made["broker"], tmp_path / "clients", tmp_path / "workers")
    broker = brokers(transport, ["tcp://127.0.0.1:*"], security=security)
    endpoint = broker.endpoint(transport, "tcp")
    server_key = keys.load_public(made["broker"])
    workers(endpoint, transport, server_key=server_key, keys=keys.load_secret(made["worker"]))
    public, secret = keys.load_secret(made["client"])
    with Client(endpoint, transport, server_key=server_key.decode(), keys=(public.decode(), secret)) as client:
        assert client.request("echo", b"secret", timeout=30).payload == b"secret"


def test_a_wait_that_found_a_message_leaves_later_waits_woken_by_senders() -> None:
    """ROUTER transport: a wait that returns at once because a message was already waiting must leave the count of
    blocked readers as it was; otherwise a later blocked wait is not counted, and a sender whose write took the
    edge-triggered signal of an arriving reply does not kick it: the reader sleeps until its deadline (clients
    stalled for a heartbeat interval, 2.5 s, in bench part ``scale``)."""
    context = zmq.Context.instance()
    broker = context.socket(zmq.ROUTER)
    broker.bind("tcp://127.0.0.1:*")
    channel = BrokerChannel(broker.getsockopt(zmq.LAST_ENDPOINT).decode(), "router", context, None)
    channel.adopt()  # this thread is the IO thread
    connection = channel.connection
    signal = connection.readable_item  # the socket's ZMQ_FD: readable once a command waits (select takes none)
    try:
        channel.send([b"hello"])
        assert broker.poll(30_000)
        peer = broker.recv_multipart()[0]
        broker.send_multipart([peer, b"early"])
        deadline = time.monotonic() + 30
        while not connection.begin_wait() and time.monotonic() < deadline:  # until it waits (begin_wait says so)
            connection.end_wait()
            time.sleep(0.01)
        channel.wait(time.monotonic() + 30, time.monotonic())  # returns at once: a message waits
        assert channel.recv_batch(1) == [[b"early"]]
        assert not connection.begin_wait()  # the IO thread is about to block: nothing waits (its pipe sleeps now)
        try:
            broker.send_multipart([peer, b"reply"])
            assert select.select([signal], [], [], 30)[0]  # the reply's signal is in the socket's mailbox
            sender = threading.Thread(target=channel.send, args=([b"another request"],))  # a caller's send
            sender.start()
            sender.join(30)
            assert select.select([connection.kick_item], [], [], 0)[0], "the sender did not kick the blocked reader"
        finally:
            connection.end_wait()
        assert channel.recv_batch(1) == [[b"reply"]]
    finally:
        connection.close()
        broker.close(0)


def test_a_reconnect_with_a_farewell_sends_it_on_the_old_socket_then_talks_on_a_new_one(transport: str) -> None:
    """A worker registering again says DISCONNECT on its old socket first, for a broker that may still hear it."""
    server = zmq.Context.instance().socket(zmq.ROUTER if transport == "router" else zmq.SERVER)
    server.setsockopt(zmq.LINGER, 0)
    server.bind("tcp://127.0.0.1:*")
    endpoint = server.getsockopt(zmq.LAST_ENDPOINT).decode()

    def receive() -> tuple[object, list[bytes]]:
        assert server.poll(20_000), "nothing arrived"
        if transport == "router":
            peer, *frames = server.recv_multipart()
            return peer, frames
        message = server.recv(copy=False)
        return message.routing_id, codec.decode(message.bytes)

    channel = BrokerChannel(endpoint, transport, zmq.Context.instance(), None)
    channel.adopt()
    try:
        channel.perform([ToBroker([b"hello"])])
        old, frames = receive()
        assert frames == [b"hello"]
        channel.perform([Reconnect("a test", farewell=(b"GDPW01", b"\x06")), ToBroker([b"again"])])
        arrived = {tuple(frames): peer for peer, frames in (receive(), receive())}  # (in either order)
        assert arrived[(b"GDPW01", b"\x06")] == old and arrived[(b"again",)] != old
    finally:
        channel.close()
        server.close()

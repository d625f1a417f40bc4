"""Issue 16's attacks over real sockets, on both transports, with and without CURVE: forged results, a hijacked
request id; and the bridge over CURVE on both of its sides."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
import zmq
from curve_keys import Keyring
from waiting import eventually

from generaldomo import Client, HandshakeFailed
from generaldomo.io import keys
from generaldomo.io.auth import BrokerSecurity
from generaldomo.io.bridge import Bridge
from generaldomo.io.peer.connection import Curve
from generaldomo.sansio.wire import codec, protocol

SWEEP = 64  # guessed task ids the forger tries besides the real one


@pytest.fixture
def keyring(tmp_path: Path) -> Keyring:
    ring = Keyring(tmp_path)
    ring.make("client2", "clients")
    ring.make("bridge", "clients")  # the bridge is a client of the broker
    return ring


class RawPeer:
    """A DEALER (router transport) or CLIENT (server transport) socket, plaintext or with a key of the ring."""

    def __init__(self, transport: str, endpoint: str, keyring: Keyring | None, name: str) -> None:
        self.transport = transport
        self.context = keyring.context(name) if keyring is not None else zmq.Context()
        self.socket = self.context.socket(zmq.DEALER if transport == "router" else zmq.CLIENT)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.RCVTIMEO, 30_000)
        self.socket.connect(endpoint)

    def send(self, frames: list[bytes]) -> None:
        self.socket.send_multipart(frames) if self.transport == "router" else self.socket.send(codec.encode(frames))

    def final(self) -> tuple[bytes, bytes, tuple[bytes, ...]]:
        """The next final reply: ``(request id, status, body)``."""
        for _ in range(100):
            raw = self.socket.recv_multipart() if self.transport == "router" else codec.decode(self.socket.recv())
            parsed = protocol.parse_client_reply(raw)
            if parsed is not None and parsed[1] is not None:
                return parsed[0], parsed[1], parsed[3]
        raise AssertionError("no final reply among 100 messages")

    def close(self) -> None:
        self.socket.close()
        self.context.term()


class Gate:
    """A worker handler that holds every task until :meth:`open`, and records what it ran."""

    def __init__(self) -> None:
        self.opened = threading.Event()
        self.ran: list[bytes] = []

    def __call__(self, payload: bytes) -> bytes:
        self.ran.append(payload)
        self.opened.wait(60)
        return payload

    def open(self) -> None:
        self.opened.set()


def setup(keyring: Keyring, curve: bool, transport: str, brokers, workers):
    broker = brokers(transport, ["tcp://127.0.0.1:*"], security=keyring.security() if curve else None)
    endpoint = broker.endpoint(transport, "tcp")
    gate = Gate()
    worker_context = keyring.context("worker") if curve else None
    workers(endpoint, transport, "echo", gate, **({"context": worker_context} if curve else {}))
    eventually(lambda: broker.core.workers, 30, "the worker to register")
    return broker, endpoint, gate, (keyring if curve else None)


def running_task(broker) -> bytes:
    return eventually(
        lambda: next((tid for tid, task in list(broker.core.tasks.items()) if task.worker is not None), None),
        30,
        "the task to be dispatched",
    )


@pytest.mark.parametrize("curve", [False, True], ids=["plaintext", "curve"])
def test_forged_results_are_refused_and_the_real_one_delivered(keyring, curve, transport, brokers, workers) -> None:
    broker, endpoint, gate, ring = setup(keyring, curve, transport, brokers, workers)
    with Client(endpoint, transport, context=ring.context("client") if ring else None) as client:
        future = client.submit("echo", b"real")
        real = running_task(broker)
        forger = RawPeer(transport, endpoint, ring, "worker")  # with CURVE: an authorised worker key
        try:
            forger.send(protocol.gdp_ready(b"echo-side"))  # a registered worker of a service it may serve
            guesses = [real, *(os.urandom(16) for _ in range(SWEEP))]
            for task_id in guesses:
                forger.send(protocol.gdp_partial(task_id, [b"forged"]))
                forger.send(protocol.gdp_ready(b"echo-side", (task_id, protocol.OK, [b"forged"])))
            counters = broker.core.counters  # the real id: refused; guessed ids name no live task
            eventually(lambda: counters["results_refused"] == 2 and counters["duplicates_dropped"] == 2 * SWEEP, 30)
            assert not future.done() and broker.core.tasks[real].worker is not None
            gate.open()
            reply = future.result(30)
        finally:
            gate.open()
            forger.close()
    assert reply.payload == b"real" and gate.ran == [b"real"]
    assert broker.core.counters["results_refused"] == 2 and broker.core.counters["completed"] == 1


@pytest.mark.parametrize("curve", [False, True], ids=["plaintext", "curve"])
def test_a_second_client_resending_a_request_id(keyring, curve, transport, brokers, workers) -> None:
    broker, endpoint, gate, ring = setup(keyring, curve, transport, brokers, workers)
    victim, thief = RawPeer(transport, endpoint, ring, "client"), RawPeer(transport, endpoint, ring, "client2")
    try:
        victim.send(protocol.gdp_request(b"rid", b"echo", [b"mine"]))
        running_task(broker)
        thief.send(protocol.gdp_request(b"rid", b"echo", [b"theirs"]))  # the id, seen on the wire
        if curve:  # scoped to the key: the thief's is a task of its own, and gets its own answer
            eventually(lambda: broker.core.counters["requests"] == 2, 30, "the thief's request")
            gate.open()
            assert victim.final() == (b"rid", protocol.OK, (b"mine",))
            assert thief.final() == (b"rid", protocol.OK, (b"theirs",))
            assert broker.core.counters["retries_absorbed"] == 0 and gate.ran == [b"mine", b"theirs"]
        else:  # matched by id alone, but a REQUEST only for the same content: the thief's is a task of its own
            eventually(lambda: broker.core.counters["request_id_conflicts"] == 1, 30, "the thief's request")
            assert broker.core.counters["retries_absorbed"] == 0
            thief.send(protocol.gdp_client_heartbeat(ids=[b"rid"]))  # a re-ask carries the id alone: its own task
            # heard before the task can finish: a re-ask heard after it would be answered again from the kept answer
            # (a Client drops the repeat; this raw peer would read it as its next answer)
            eventually(lambda: broker.core.counters["reasked"] == 1, 30, "the thief's re-ask")
            gate.open()
            assert victim.final() == (b"rid", protocol.OK, (b"mine",))
            assert thief.final() == (b"rid", protocol.OK, (b"theirs",))
            assert gate.ran == [b"mine", b"theirs"]
            # the documented residual risk: a re-ask of an id seen on the wire gets that request's answer
            victim.send(protocol.gdp_request(b"rid2", b"echo", [b"mine too"]))
            eventually(lambda: broker.core.counters["completed"] == 3, 30, "the second request to be answered")
            assert victim.final() == (b"rid2", protocol.OK, (b"mine too",))
            thief.send(protocol.gdp_client_heartbeat(ids=[b"rid2"]))
            assert thief.final() == (b"rid2", protocol.OK, (b"mine too",))
    finally:
        gate.open()
        victim.close()
        thief.close()


def test_the_bridge_over_curve_on_both_sides(keyring, brokers, workers) -> None:
    broker = brokers("router", ["tcp://127.0.0.1:*"], security=keyring.security())
    upstream = broker.endpoint("router", "tcp")
    workers(upstream, "router", context=keyring.context("worker"))
    broker_key = keys.load_public(keyring.secret("broker"))
    bridge_security = BrokerSecurity.from_files(keyring.secret("bridge"), clients=keyring.root / "clients")
    bridge = Bridge(
        ["tcp://127.0.0.1:*"],
        upstream,
        heartbeat_interval=0.2,
        security=bridge_security,
        upstream=Curve(broker_key, *keys.load_secret(keyring.secret("bridge"))),
    ).start()
    try:
        endpoint = bridge.endpoints[0]
        bridge_key = keys.load_public(keyring.secret("bridge"))
        client_keys = keys.load_secret(keyring.secret("client"))
        with Client(endpoint, "server", server_key=bridge_key, keys=client_keys, heartbeat_interval=0.2) as client:
            for n in range(5):
                assert client.request("echo", b"through %d" % n, timeout=30).payload == b"through %d" % n
        worker_keys = keys.load_secret(keyring.secret("worker"))  # admitted nowhere by the bridge: refused
        with Client(endpoint, "server", server_key=bridge_key, keys=worker_keys) as refused:
            with pytest.raises(HandshakeFailed, match="refused this peer's CURVE key"):  # named at once
                refused.request("echo", b"no", timeout=30)
        eventually(lambda: bridge.link.counters["connections_refused"] >= 1, 30, "the unknown key to be refused")
    finally:
        bridge.stop()
    assert bridge.forwarded == 5 and broker.core.counters["connections_refused"] == 0

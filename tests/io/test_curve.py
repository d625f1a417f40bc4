"""CURVE on both links: keys from certificate files, ZAP allowlists by role, refusals counted and logged."""

from __future__ import annotations

import inspect
import logging
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import zmq
from curve_keys import Keyring
from transports import TRANSPORTS
from waiting import eventually

from generaldomo import Client, RequestFailed, errors
from generaldomo.io import keys, speedups
from generaldomo.io.auth import BrokerSecurity, ZapHandler
from generaldomo.io.hub.links import LINKS, Link, Received
from generaldomo.io.transport import Transport
from generaldomo.sansio.broker.access import Credential, Role
from generaldomo.sansio.broker.core import BrokerCore
from generaldomo.sansio.wire import codec, protocol

# Role checks are the core's (BrokerCore.receive's credential); the links hand it over when the core takes it.
needs_role_checks = pytest.mark.skipif(
    "credential" not in inspect.signature(BrokerCore.receive).parameters, reason="this core does not check roles"
)


@pytest.fixture
def keyring(tmp_path: Path) -> Keyring:
    return Keyring(tmp_path)


def test_key_files_round_trip(keyring: Keyring) -> None:
    public, secret = keys.load_secret(keyring.secret("worker"))
    assert len(public) == len(secret) == 40 and zmq.curve_public(secret) == public
    assert keys.load_allowlist(keyring.root / "workers") == {public.decode(): ("echo*",)}
    assert oct(os.stat(keyring.secret("worker")).st_mode & 0o777) == "0o600"
    with pytest.raises(errors.KeyFileError):
        keys.load_secret(keyring.root / "workers" / "worker.key")  # a public certificate has no secret


def test_roles_come_from_the_directories_a_key_is_listed_in(keyring: Keyring) -> None:
    security = keyring.security()
    by_name = {name: keys.load_public(keyring.secret(name)).decode() for name in ("client", "worker", "admin")}
    assert security.credentials[by_name["client"]].roles == {Role.CLIENT}
    assert security.credentials[by_name["admin"]].roles == {Role.ADMIN, Role.CLIENT}
    worker = security.credentials[by_name["worker"]]
    assert worker.roles == {Role.WORKER} and worker.may_serve("echo-fast") and not worker.may_serve("other")
    assert len(security.credentials) == 3  # the stranger is in no directory


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_links_hand_over_each_messages_credential(keyring: Keyring, transport: str) -> None:
    security = keyring.security()
    context = zmq.Context()
    zap = ZapHandler(context, security).start()
    link = LINKS[Transport.of(transport)](context, ["tcp://127.0.0.1:*"], security=security)
    peers = {name: keyring.context(name) for name in ("client", "admin")}
    sockets = []
    try:
        for name, peer_context in peers.items():
            sock = peer_context.socket(zmq.DEALER if transport == "router" else zmq.CLIENT)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(link.endpoints[0])
            frames = [b"GDPC01", b"\x04", name.encode()]
            sock.send_multipart(frames) if transport == "router" else sock.send(codec.encode(frames))
            sockets.append(sock)
        got = {}
        while len(got) < 2:
            assert link.socket.poll(10_000), "nothing arrived"
            while (message := link.recv()) is not None:
                _, frames, credential = message
                got[frames[-1].decode()] = credential
        assert got["client"].roles == {Role.CLIENT} and got["admin"].roles == {Role.ADMIN, Role.CLIENT}
        assert got["client"].key == keys.load_public(keyring.secret("client")).decode()
    finally:
        for sock in sockets:
            sock.close()
        link.close(0)
        zap.stop()
        for peer_context in peers.values():
            peer_context.term()
        context.term()


def test_echo_over_curve(keyring: Keyring, transport, brokers, workers) -> None:
    broker = brokers(transport, ["tcp://127.0.0.1:*"], security=keyring.security())
    endpoint = broker.endpoint(transport, "tcp")
    workers(endpoint, transport, context=keyring.context("worker"))
    with Client(endpoint, transport, context=keyring.context("client")) as client:
        for n in range(10):
            assert client.request("echo", b"secret %d" % n, timeout=30).payload == b"secret %d" % n
    assert broker.core.counters["connections_refused"] == 0


def test_plaintext_and_unknown_keys_are_refused(keyring: Keyring, transport, brokers, workers, caplog) -> None:
    broker = brokers(transport, ["tcp://127.0.0.1:*"], security=keyring.security())
    endpoint = broker.endpoint(transport, "tcp")
    workers(endpoint, transport, context=keyring.context("worker"))
    kind = zmq.DEALER if transport == "router" else zmq.CLIENT
    request = [b"GDPC01", b"\x01", b"r1", b"echo", b"forged"]
    intruders = [zmq.Context.instance().socket(kind), keyring.context("stranger").socket(kind)]
    with caplog.at_level(logging.WARNING, logger="generaldomo.io.hub.links"):
        for sock in intruders:
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(endpoint)
            sock.send_multipart(request) if transport == "router" else sock.send(codec.encode(request))
        eventually(lambda: broker.core.counters["connections_refused"] >= 2, 30, "both intruders to be refused")
        with Client(endpoint, transport, context=keyring.context("client")) as client:
            assert client.request("echo", b"served", timeout=30).payload == b"served"
    for sock in intruders:
        sock.close()
    assert broker.core.counters["requests"] == 1  # nothing of the intruders reached the core
    assert 2 <= caplog.text.count("refused a connection") <= broker.core.counters["connections_refused"]
    assert "handshake failed: authentication" in caplog.text  # the unknown key, turned away by ZAP


def _read_curve(link: Link, ends: int, counted: Callable[[Counter[str]], bool]) -> tuple[list[Received], Counter[str]]:
    """What ``link`` reads through its batch read (the accelerator's where it is used) until ``ends`` messages whose
    last frame is ``end`` (not kept) arrived and its counts (summed) satisfy ``counted``; and those counts."""
    got: list[Received] = []
    counts: Counter[str] = Counter()
    for _ in range(300):  # 30 s at most
        for message in link.recv_batch(64):
            if message[1][-1:] == [b"end"]:
                ends -= 1
            else:
                got.append(message)
        counts += link.take_counts()
        if ends <= 0 and counted(counts):
            return got, counts
        link.socket.poll(100)
    raise AssertionError(f"not all arrived: {len(got)} messages, {ends} ends missing, counted {dict(counts)}")


@pytest.mark.pure  # runs again in env pure, on the pure-Python path
@pytest.mark.parametrize("accelerate", [True, False])
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_curve_links_read_each_credential_on_both_paths(
    keyring: Keyring, transport: str, accelerate: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """A CURVE link is accelerated where the accelerator is in use; either path hands over each message's
    credential, and drops (counts, logs) the messages of a key that ZAP admitted but the link has no credential
    for, alongside the limits' drops."""
    security = keyring.security()
    stranger = keys.load_public(keyring.secret("stranger")).decode()
    admitted = dict(security.credentials) | {stranger: Credential(stranger, frozenset({Role.CLIENT}))}
    context = zmq.Context()  # ZAP lets the stranger in; the link's security does not list it
    zap = ZapHandler(context, BrokerSecurity(security.public_key, security.secret_key, admitted)).start()
    link = LINKS[Transport.of(transport)](
        context, ["tcp://127.0.0.1:*"], 2000, max_frames=4, security=security, accelerate=accelerate
    )
    pure = os.environ.get(speedups.PURE_PYTHON, "") not in ("", "0")
    assert link.accelerated == (accelerate and not pure), speedups.description  # built, unless pure Python forced
    router = transport == "router"
    peers = {name: keyring.context(name) for name in ("stranger", "client", "admin")}
    sockets = {}
    try:
        for name, peer_context in peers.items():
            sock = peer_context.socket(zmq.DEALER if router else zmq.CLIENT)
            sock.setsockopt(zmq.LINGER, 0)
            if router:
                sock.setsockopt(zmq.IDENTITY, b"\xff" + name.encode())
            sock.connect(link.endpoints[0])
            sockets[name] = sock
        too_many = [b"GDPC01", *[b"f"] * 5]  # over max_frames
        too_large = [b"GDPC01", b"x" * 1500, b"y" * 1500]  # over the 2000 bytes (ROUTER: the limit across frames)
        sent = {
            "stranger": [[b"GDPC01", b"\x04", b"a"], too_large if router else too_many, [b"GDPC01", b"\x04", b"b"]],
            "client": [[b"GDPC01", b"\x04", b"client"], too_many],
            "admin": [too_many, [b"GDPC01", b"\x04", b"admin"]],
        }
        for name, messages in sent.items():
            for frames in [*messages, [b"GDPC01", b"end"]]:
                sockets[name].send_multipart(frames) if router else sockets[name].send(codec.encode(frames))
        # the stranger's two greetings and end, and on a ROUTER its oversized message too (counted both ways, its
        # credential first, as the pure path reads the first frame's User-Id before the limits end the read)
        expected = Counter(dropped_unauthenticated=4, dropped_too_large=1, dropped_too_many_frames=2)
        if not router:  # a part that does not unpack is dropped before its credential is looked at
            expected = Counter(dropped_unauthenticated=3, dropped_too_many_frames=3)
        with caplog.at_level(logging.WARNING, logger="generaldomo.io.hub.links"):
            got, counts = _read_curve(link, 2, lambda counts: counts == expected)
        assert counts == expected
        assert "without a known CURVE key" in caplog.text
        credentials = {name: security.credential(keys.load_public(keyring.secret(name)).decode()) for name in peers}
        assert credentials["stranger"] is None
        assert sorted((frames, credential.key) for _, frames, credential in got if credential is not None) == sorted(
            ([b"GDPC01", b"\x04", name.encode()], credentials[name].key) for name in ("client", "admin")
        )
        assert all(credential == credentials[frames[-1].decode()] for _, frames, credential in got)
        if router:
            assert sorted(address for address, _, _ in got) == [b"\xffadmin", b"\xffclient"]
    finally:
        for sock in sockets.values():
            sock.close()
        link.close(0)
        zap.stop()
        for peer_context in peers.values():
            peer_context.term()
        context.term()


def raw_peer(keyring: Keyring, name: str, transport: str, endpoint: str) -> zmq.Socket:
    sock = keyring.context(name).socket(zmq.DEALER if transport == "router" else zmq.CLIENT)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 30_000)
    sock.connect(endpoint)
    return sock


def exchange(sock: zmq.Socket, transport: str, frames: list[bytes]) -> list[bytes]:
    sock.send_multipart(frames) if transport == "router" else sock.send(codec.encode(frames))
    return sock.recv_multipart() if transport == "router" else codec.decode(sock.recv())


@needs_role_checks
@pytest.mark.parametrize("key, service", [("client", b"echo"), ("worker", b"other")])
def test_workers_register_only_as_their_key_allows(keyring, transport, brokers, key, service) -> None:
    broker = brokers(transport, ["tcp://127.0.0.1:*"], security=keyring.security())
    sock = raw_peer(keyring, key, transport, broker.endpoint(transport, "tcp"))
    try:
        assert exchange(sock, transport, [b"GDPW01", b"\x01", service]) == [b"GDPW01", b"\x06"]  # DISCONNECT
    finally:
        sock.close()
    assert not broker.core.workers


@needs_role_checks
def test_a_worker_key_that_learnt_another_workers_id_cannot_retire_its_registration(
    keyring, transport, brokers, workers
) -> None:
    """A READY giving a live worker's id (the id that retires a worker's old registration when it reconnects) counts
    only under the key that worker registered with: another worker key registers beside it; the same key retires it."""
    keyring.make("intruder", "workers", services="echo*")
    broker = brokers(transport, ["tcp://127.0.0.1:*"], security=keyring.security())
    endpoint = broker.endpoint(transport, "tcp")
    worker = workers(endpoint, transport, context=keyring.context("worker"))
    eventually(lambda: worker.registered, what="the worker to register")
    info = worker._session.info  # (the id is never reported: the test reads it where the worker keeps it)
    assert info is not None
    stolen = protocol.read_worker_info(info)
    assert stolen is not None and stolen[3] is not None
    forged = protocol.gdp_ready(b"echo", info=protocol.worker_info("elsewhere", 1, name=stolen[3]))

    def more_than(registered: int) -> Callable[[], bool]:
        return lambda: broker.core.counters["workers_registered"] > registered

    for key in ("intruder", "worker"):
        sock = raw_peer(keyring, key, transport, endpoint)
        registered = broker.core.counters["workers_registered"]
        try:
            sock.send_multipart(forged) if transport == "router" else sock.send(codec.encode(forged))
            eventually(more_than(registered), what="the READY to be heard")
            if key == "intruder":  # beside it, the worker's own registration untouched
                assert broker.core.counters["workers_replaced"] == 0
                assert len(broker.core.workers) == 2 and worker.reconnects == 0
            else:  # (the worker itself then hears DISCONNECT on its next heartbeat, and registers again)
                assert broker.core.counters["workers_replaced"] >= 1
        finally:
            sock.close()


@needs_role_checks
def test_only_admins_change_flow_limits(keyring, transport, brokers) -> None:
    broker = brokers(transport, ["tcp://127.0.0.1:*"], security=keyring.security())
    endpoint = broker.endpoint(transport, "tcp")
    change = [b"echo", b'{"rate": 5}']
    for name in ("client", "worker"):  # a worker key may not even send requests
        with Client(endpoint, transport, context=keyring.context(name)) as client:
            with pytest.raises(RequestFailed) as refused:
                client.request("mmi.flow", change, timeout=30)
            assert getattr(refused.value, "status_bytes", refused.value.status) == b"403"
    assert broker.core.flow_limits("echo").rate is None
    with Client(endpoint, transport, context=keyring.context("admin")) as admin:
        assert b'"rate": 5' in admin.request("mmi.flow", change, timeout=30).payload

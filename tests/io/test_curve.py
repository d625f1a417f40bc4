"""CURVE on both links: keys from certificate files, ZAP allowlists by role, refusals counted and logged."""

from __future__ import annotations

import inspect
import logging
import os
from pathlib import Path

import pytest
import zmq
from curve_keys import Keyring
from transports import TRANSPORTS
from waiting import eventually

from generaldomo import Client, RequestFailed
from generaldomo.io import keys
from generaldomo.io.auth import ZapHandler
from generaldomo.io.links import LINKS
from generaldomo.io.transport import Transport
from generaldomo.sansio import codec
from generaldomo.sansio.access import Role
from generaldomo.sansio.core import BrokerCore

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
    with pytest.raises(keys.KeyFileError):
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
    with caplog.at_level(logging.WARNING, logger="generaldomo.io.links"):
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

"""Discovery by UDP beacon, on loopback only."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from generaldomo import Client
from generaldomo.errors import DiscoveryError
from generaldomo.io.beacon import Announcement, Listener, announceable, decode, encode, find_broker
from generaldomo.sansio.broker.access import Credential, Role


def test_datagram_round_trip_and_foreign_datagrams() -> None:
    datagram = encode("b1", "abcd", [("router", "tcp://127.0.0.1:5555")])
    assert decode(datagram, "127.0.0.1") == Announcement(
        "b1", "abcd", (("router", "tcp://127.0.0.1:5555"),), "127.0.0.1"
    )
    for foreign in (b"", b"GDBEACON", b"GDBEACON\x02{}", b"GDBEACON\x01not json", b"GDBEACON\x01{}", b"hello"):
        assert decode(foreign) is None


def test_wildcards_become_concrete_and_inproc_is_left_out() -> None:
    endpoints = [("router", "tcp://0.0.0.0:5555"), ("server", "tcp://*:5556"), ("router", "inproc://x"),
                 ("router", "ipc:///tmp/b.sock"), ("server", "tcp://127.0.0.1:7")]  # fmt: skip
    assert announceable(endpoints, "127.0.0.1") == [
        ("router", "tcp://127.0.0.1:5555"),
        ("server", "tcp://127.0.0.1:5556"),
        ("router", "ipc:///tmp/b.sock"),
        ("server", "tcp://127.0.0.1:7"),
    ]


def test_broker_beacon_is_heard_and_used(transport, brokers, workers, monkeypatch) -> None:
    with Listener(port=0, bind="127.0.0.1") as listener:
        broker = brokers(transport, ["tcp://127.0.0.1:*"])
        broker.announce("test-broker", destination="127.0.0.1", port=listener.port, interval=0.05)
        heard = listener.wait(10, name="test-broker")
        assert heard.endpoint(transport) == broker.endpoint(transport, "tcp")
        assert heard.instance == broker.core.instance.hex()
        with pytest.raises(DiscoveryError):
            listener.wait(0.3, name="some-other-broker")
    # A client and a worker with no endpoint find the broker by its beacon.
    monkeypatch.delenv("GENERALDOMO_BROKER", raising=False)
    with Listener(port=0, bind="127.0.0.1") as probe:
        port = probe.port
    monkeypatch.setenv("GENERALDOMO_BEACON_PORT", str(port))
    monkeypatch.setenv("GENERALDOMO_BEACON_BIND", "127.0.0.1")
    broker.announce("test-broker", destination="127.0.0.1", port=port, interval=0.05)
    workers(None, transport)
    with Client(None, transport) as client:
        assert client.endpoint == broker.endpoint(transport, "tcp")
        assert client.request("echo", b"found you", timeout=30).payload == b"found you"


def test_order_explicit_then_environment_then_beacon(monkeypatch) -> None:
    monkeypatch.setenv("GENERALDOMO_BROKER", "tcp://127.0.0.1:1")
    assert find_broker("router", "ipc:///explicit") == "ipc:///explicit"
    assert find_broker("router") == "tcp://127.0.0.1:1"
    monkeypatch.delenv("GENERALDOMO_BROKER")
    monkeypatch.setenv("GENERALDOMO_BEACON_BIND", "127.0.0.1")
    monkeypatch.setenv("GENERALDOMO_BEACON_PORT", "0")
    with pytest.raises(DiscoveryError):
        find_broker("router", timeout=0.2)


def test_cli_beacon_and_discover(transport) -> None:
    with Listener(port=0, bind="127.0.0.1") as probe:
        port = probe.port
    base = [sys.executable, "-m", "generaldomo"]
    broker = subprocess.Popen(
        [*base, "broker", "--transport", transport, "--bind", "tcp://127.0.0.1:*", "--beacon", "--beacon-to",
         "127.0.0.1", "--beacon-port", str(port), "--beacon-interval", "0.05", "--name", "cli-broker"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    worker = None
    try:
        broker.stdout.readline()
        environment = {"GENERALDOMO_BEACON_PORT": str(port), "GENERALDOMO_BEACON_BIND": "127.0.0.1"}
        env = {**os.environ, **environment}
        env.pop("GENERALDOMO_BROKER", None)
        worker = subprocess.Popen(
            [*base, "worker", "--transport", transport, "--discover", "--name", "cli-broker"],
            stdout=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        assert "serving 'echo'" in worker.stdout.readline()
        result = subprocess.run(
            [*base, "client", "--transport", transport, "--discover", "echo", "beaconed"],
            capture_output=True, text=True, timeout=60, env=env,
        )  # fmt: skip
        assert result.returncode == 0 and result.stdout.strip() == "beaconed", result.stderr
    finally:
        for process in (worker, broker):
            if process is not None:
                process.terminate()
                process.wait(10)


def test_a_curve_brokers_beacon_announces_its_public_key_never_its_secret(monkeypatch) -> None:
    import zmq

    from generaldomo import Broker
    from generaldomo.io.auth import BrokerSecurity
    from generaldomo.io.beacon import locate

    public, secret = zmq.curve_keypair()
    client_key = zmq.curve_keypair()[0].decode()
    security = BrokerSecurity(public, secret, {client_key: Credential(client_key, frozenset({Role.CLIENT}))})
    with Listener(port=0, bind="127.0.0.1") as probe:
        port = probe.port
    monkeypatch.delenv("GENERALDOMO_BROKER", raising=False)
    monkeypatch.delenv("GENERALDOMO_BROKER_FILE", raising=False)
    monkeypatch.setenv("GENERALDOMO_BEACON_PORT", str(port))
    monkeypatch.setenv("GENERALDOMO_BEACON_BIND", "127.0.0.1")
    with Broker("router", ["tcp://127.0.0.1:*"], security=security) as broker:
        beacon = broker.announce("curve-broker", destination="127.0.0.1", port=port, interval=0.05)
        assert secret not in beacon.datagram
        found = locate("router", timeout=10)
    assert found.public_key == public.decode() and found.endpoint == broker.endpoint("router", "tcp")
    assert decode(encode("plain", "ab", [])).public_key is None  # no CURVE: no key
    assert locate("router", "tcp://127.0.0.1:1").public_key is None  # an explicit endpoint announces nothing

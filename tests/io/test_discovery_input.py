"""Discovery is input from whoever can send a UDP datagram or write the address file: a bad endpoint is ignored
(never kills a peer), what beacons leave in a listener is bounded, and a peer with a pinned CURVE key keeps its
last good broker until another proves the key. Real brokers and workers on loopback."""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from pathlib import Path

import pytest
from cli_processes import expect, lines, run, spawn
from curve_keys import Keyring
from following import FAST, PEER, beacon_port, serve, silence
from restart_harness import WAIT
from waiting import eventually, served

from generaldomo import Broker, Client, Worker
from generaldomo.io import address_file, endpoints, keys
from generaldomo.io.address_file import BrokerAddress
from generaldomo.io.beacon import Listener, decode, encode, find_broker
from generaldomo.io.peer.locator import Locator, Where, _Beacons

BAD = ("bogus://x", "tcp://127.0.0.1:notaport", "inproc://inside", "tcp://*:5555", "ipc://", 7, None)


def test_bad_announced_endpoints_and_keys_are_ignored_and_counted() -> None:
    before = endpoints.REFUSED.count
    pairs = [("router", e) for e in BAD] + [("router", "tcp://127.0.0.1:5555"), ("server", "ipc:///tmp/b.sock")]
    datagram = encode("b", "1", pairs, public_key="not a key")  # type: ignore[arg-type]
    heard = decode(datagram, "127.0.0.1")
    assert heard is not None and heard.public_key is None
    assert heard.endpoints == (("router", "tcp://127.0.0.1:5555"), ("server", "ipc:///tmp/b.sock"))
    assert endpoints.REFUSED.count == before + len(BAD) + 1
    text = address_file.encode(BrokerAddress("b", "1", tuple(pairs), public_key="#" * 40))  # type: ignore[arg-type]
    address = address_file.decode(text)
    assert address.endpoints == heard.endpoints and address.public_key is None


def test_spoofed_beacons_neither_kill_nor_redirect_a_discovering_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    port = beacon_port(monkeypatch)
    name = f"spoof-{uuid.uuid4().hex[:8]}"
    first = Broker("router", ["tcp://127.0.0.1:*"], settings=FAST).start()
    first.announce(name, destination="127.0.0.1", port=port, interval=0.1)
    worker = Worker(Where(beacon=True, name=name, timeout=WAIT), "echo", lambda payload: payload, "router", **PEER)
    serving = serve(worker)
    second = None
    try:
        with Client(Where(beacon=True, name=name, timeout=WAIT), "router", **PEER) as client:
            served(client, "echo", WAIT)
            assert client.request("echo", b"one", timeout=WAIT).payload == b"one"
            silence(first)
            _spoof(port, name, [("router", endpoint) for endpoint in BAD[:2]], until=lambda: not serving.is_alive())
            assert serving.is_alive()
            second = Broker("router", ["tcp://127.0.0.1:*"], settings=FAST).start()
            second.announce(name, destination="127.0.0.1", port=port, interval=0.1)
            served(client, "echo", WAIT)
            assert client.request("echo", b"two", timeout=WAIT).payload == b"two"
            assert worker.endpoint == second.endpoint("router", "tcp")
            assert serving.is_alive()
    finally:
        worker.stop()
        serving.join(WAIT)
        if second is not None:
            second.stop()


def test_a_bad_endpoint_in_the_broker_file_never_kills_a_worker(tmp_path: Path) -> None:
    path = tmp_path / "broker.json"
    first = Broker("router", ["tcp://127.0.0.1:*"], settings=FAST).start()
    address_file.write(path, BrokerAddress("b", "1", (("router", first.endpoint("router", "tcp")),)))
    worker = Worker(Where(broker_file=str(path), timeout=WAIT), "echo", lambda payload: payload, "router", **PEER)
    serving = serve(worker)
    second = None
    try:
        with Client(Where(broker_file=str(path), timeout=WAIT), "router", **PEER) as client:
            served(client, "echo", WAIT)
            assert client.request("echo", b"one", timeout=WAIT).payload == b"one"
            silence(first)
            for bad in BAD[:2]:
                path.write_text(
                    '{"version": 1, "name": "b", "instance": "2", "endpoints": '
                    f'[{{"transport": "router", "endpoint": "{bad}"}}]}}'
                )
                time.sleep(2.5)  # the worker looks at the file every second, and on silence (1 s)
                assert serving.is_alive()
            second = Broker("router", ["tcp://127.0.0.1:*"], settings=FAST).start()
            address_file.write(path, BrokerAddress("b", "3", (("router", second.endpoint("router", "tcp")),)))
            served(client, "echo", WAIT)
            assert client.request("echo", b"two", timeout=WAIT).payload == b"two"
            assert serving.is_alive()
    finally:
        worker.stop()
        serving.join(WAIT)
        if second is not None:
            second.stop()


def test_beacons_of_many_names_leave_nothing_in_a_listener(monkeypatch: pytest.MonkeyPatch) -> None:
    """Beacons of distinct long names (a flood of them once grew a listening worker by a gigabyte in 20 s) are
    not kept: the listener holds the latest beacon of each name listened for, nothing else."""
    port = beacon_port(monkeypatch)
    beacons = _Beacons.join("wanted")
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
            for number in range(300):
                name = f"{number:06d}" + "x" * 1000
                sender.sendto(encode(name, "1", [("router", "tcp://127.0.0.1:1")]), ("127.0.0.1", port))
                time.sleep(0.001)
            deadline = time.monotonic() + WAIT
            while time.monotonic() < deadline:  # until the listener has read past the flood (bounded by WAIT)
                sender.sendto(encode("wanted", "1", [("router", "tcp://127.0.0.1:2")]), ("127.0.0.1", port))
                try:
                    beacons.wait(0.2, "wanted")
                    break
                except Exception:
                    continue
        assert set(beacons._heard) <= {"wanted"}
    finally:
        beacons.leave("wanted")


def test_a_pinned_worker_keeps_its_last_good_broker_until_another_proves_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spoofed beacon names another broker (plaintext: it cannot prove the pinned key): the worker tries it,
    goes back to its last good endpoint, and serves the real broker there when it comes back."""
    port = beacon_port(monkeypatch)
    name = f"pinned-{uuid.uuid4().hex[:8]}"
    keyring = Keyring(tmp_path)
    server_key = keys.load_public(keyring.secret("broker"))
    pair = keys.load_secret(keyring.secret("worker"))
    first = Broker("router", ["tcp://127.0.0.1:*"], settings=FAST, security=keyring.security()).start()
    good = first.endpoint("router", "tcp")
    first.announce(name, destination="127.0.0.1", port=port, interval=0.1)
    impostor = Broker("router", ["tcp://127.0.0.1:*"], settings=FAST).start()
    where = Where(beacon=True, name=name, timeout=WAIT)
    worker = Worker(where, "echo", lambda payload: payload, "router", server_key=server_key, keys=pair, **PEER)
    serving = serve(worker)
    back = None
    try:
        eventually(lambda: bool(first.core.workers), WAIT)
        silence(first)
        _spoof(port, name, [("router", impostor.endpoint("router", "tcp"))], until=lambda: worker.endpoint != good)
        back = _bind_curve(good, keyring)  # the real broker again, where it was; it sends no beacon
        eventually(lambda: bool(back.core.workers), WAIT)
        assert worker.endpoint == good and not impostor.core.workers and serving.is_alive()
    finally:
        worker.stop()
        serving.join(WAIT)
        impostor.stop()
        if back is not None:
            back.stop()


def test_a_locator_goes_back_to_its_last_good_target_from_one_that_never_proved_itself(tmp_path: Path) -> None:
    path = tmp_path / "broker.json"
    address_file.write(path, BrokerAddress("b", "1", (("router", "tcp://127.0.0.1:1"),)))
    locator = Locator(Where(broker_file=str(path)), "router")
    locator.left(proven=True)
    address_file.write(path, BrokerAddress("b", "2", (("router", "tcp://127.0.0.1:2"),)))
    assert locator.moved(time.monotonic() + 2) and locator.target.endpoint == "tcp://127.0.0.1:2"
    assert locator.advance(proven=False).endpoint == "tcp://127.0.0.1:1"  # the candidate never proved itself
    assert not locator.moved(time.monotonic() + 4)  # the file is unchanged: no move back to the candidate
    assert locator.advance(proven=False).endpoint == "tcp://127.0.0.1:2"  # the good one silent too: try again


def _spoof(port: int, name: str, pairs: list[tuple[str, object]], until: object) -> None:
    """Spoofed beacons of broker ``name`` every 0.1 s for six seconds, or until ``until()``."""
    datagram = encode(name, "f" * 8, pairs)  # type: ignore[arg-type]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        for _ in range(60):
            sender.sendto(datagram, ("127.0.0.1", port))
            if callable(until) and until():
                return
            time.sleep(0.1)


def _bind_curve(endpoint: str, keyring: Keyring) -> Broker:
    deadline = time.monotonic() + WAIT
    while True:
        try:
            return Broker("router", [endpoint], settings=FAST, security=keyring.security()).start()
        except Exception:
            assert time.monotonic() < deadline, f"nothing could bind {endpoint} again"
            time.sleep(0.2)


def test_a_discover_worker_process_survives_spoofed_beacons_after_a_kill_9(processes) -> None:
    """``generaldomo worker --discover``: its broker killed with SIGKILL, spoofed beacons of its name naming
    ``bogus://x`` and ``tcp://127.0.0.1:notaport`` arrive; it serves the broker started again afterwards."""
    with Listener(port=0, bind="127.0.0.1") as probe:
        port = probe.port
    name = f"cli-{uuid.uuid4().hex[:8]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENERALDOMO_") or k in _KEPT}
    env |= {"GENERALDOMO_BEACON_PORT": str(port), "GENERALDOMO_BEACON_BIND": "127.0.0.1"}
    beacon = ["--beacon", "--beacon-to", "127.0.0.1", "--beacon-port", str(port), "--beacon-interval", "0.1"]
    fast = ["--heartbeat", "0.25", "--liveness", "4"]
    first = spawn(processes, "broker", "--bind", "tcp://127.0.0.1:*", "--name", name, *beacon, *fast, env=env)
    expect(lines(first.stdout), "generaldomo broker:")
    worker = spawn(processes, "worker", "--discover", "--name", name, "--find-timeout", "60", *fast, env=env)
    before = run("client", "--discover", "--name", name, "--wait-for-service", "--timeout", "60", "echo", "1", env=env)
    assert before.returncode == 0 and before.stdout.strip() == "1", before.stderr
    first.kill()
    first.wait(WAIT)
    _spoof(port, name, [("router", "bogus://x"), ("router", "tcp://127.0.0.1:notaport")], until=lambda: False)
    assert worker.poll() is None, worker.stderr.read() if worker.stderr else ""
    second = spawn(processes, "broker", "--bind", "tcp://127.0.0.1:*", "--name", name, *beacon, *fast, env=env)
    endpoint = expect(lines(second.stdout), "generaldomo broker:").split()[-1]
    done = run("client", "--connect", endpoint, "--wait-for-service", "--timeout", "60", "echo", "hi", env=env)
    assert done.returncode == 0 and done.stdout.strip() == "hi", done.stderr
    assert worker.poll() is None


_KEPT = {"GENERALDOMO_CACHE", "GENERALDOMO_PURE_PYTHON", "GENERALDOMO_ALLOW_NO_DRAFT"}


def test_a_peer_starting_passes_over_beacons_it_cannot_use(monkeypatch: pytest.MonkeyPatch) -> None:
    """At start, a spoofed beacon with no usable endpoint is passed over for the broker's own."""
    port = beacon_port(monkeypatch)
    name = f"start-{uuid.uuid4().hex[:8]}"
    spoofing = threading.Thread(target=_spoof, args=(port, name, [("router", "bogus://x")], lambda: False))
    spoofing.start()
    broker = Broker("router", ["tcp://127.0.0.1:*"], settings=FAST).start()
    try:
        broker.announce(name, destination="127.0.0.1", port=port, interval=0.5)
        assert find_broker("router", name=name, timeout=WAIT) == broker.endpoint("router", "tcp")
        assert Locator(Where(beacon=True, name=name, timeout=WAIT), "router").target.endpoint == broker.endpoint(
            "router", "tcp"
        )
    finally:
        spoofing.join(WAIT)
        broker.stop()


def test_a_peer_starting_waits_past_an_address_file_without_a_usable_endpoint(tmp_path: Path) -> None:
    path = tmp_path / "broker.json"
    path.write_text('{"version": 1, "name": "b", "instance": "1", "endpoints": [{"transport": "router", '
                    '"endpoint": "tcp://127.0.0.1:notaport"}]}')  # fmt: skip
    found: list[str] = []
    starting = threading.Thread(
        target=lambda: found.append(Locator(Where(broker_file=str(path), timeout=WAIT), "router").target.endpoint)
    )
    starting.start()
    time.sleep(0.5)  # it has read the file and waits past it
    assert not found
    address_file.write(path, BrokerAddress("b", "2", (("router", "tcp://127.0.0.1:7"),)))
    starting.join(WAIT)
    assert found == ["tcp://127.0.0.1:7"]


def test_a_flood_of_bad_beacons_is_one_log_line_with_the_count(caplog: pytest.LogCaptureFixture) -> None:
    sender = f"10.{uuid.uuid4().int % 250}.0.1"  # a source of its own: the limiter's window is per source
    caplog.set_level("WARNING", logger="generaldomo.io.endpoints")
    datagram = encode("b", "1", [("router", "bogus://x")])
    for _ in range(500):
        assert decode(datagram, sender) is not None
    told = [r.getMessage() for r in caplog.records if sender in r.getMessage()]
    assert len(told) == 1 and "bogus://x" in told[0] and "ignored in all" in told[0], told

"""Peers follow the broker: an address file read again (a restart on a new port), several endpoints tried in
turn, a beacon listened for again, host names left to libzmq; real brokers, workers and clients."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from following import FAST, beacon_port, serve, silence
from restart_harness import GENERALDOMO, ROOT, WAIT, BrokerProcess, stop_all
from waiting import eventually, served

from generaldomo import Broker, Client, Worker
from generaldomo.io import address_file
from generaldomo.io.address_file import BrokerAddress
from generaldomo.io.peer.locator import FILE_LOOK, Locator, Target, Where
from generaldomo.sansio.config.settings import PeerSettings
from generaldomo.sansio.peer.session import ClientSession, Reconnect, ToBroker, WorkerSession
from generaldomo.sansio.wire import protocol
from generaldomo.sansio.wire.events import Dialect

HEARTBEAT = ["--heartbeat", "0.25", "--liveness", "4"]


def test_endpoints_are_tried_in_turn_and_the_first_stays_first() -> None:
    locator = Locator(Where.of(["tcp://127.0.0.1:1", "tcp://127.0.0.1:2"]), "router")
    assert locator.target == Target("tcp://127.0.0.1:1") and locator.next_look is None
    moves = [locator.advance().endpoint for _ in range(3)]
    assert moves == ["tcp://127.0.0.1:2", "tcp://127.0.0.1:1", "tcp://127.0.0.1:2"]
    assert Where.of("tcp://h:1") == Where(("tcp://h:1",))
    with pytest.raises(ValueError, match="one or more strings"):
        Where.of([])


def test_sessions_register_again_where_the_broker_moved() -> None:
    client: ClientSession[None] = ClientSession(PeerSettings(), 0.0)
    frames = client.submit(b"r1", b"echo", [b"x"], None, 0.0)
    assert client.moved("moved", 1.0) == [Reconnect("moved"), ToBroker(frames)]  # not silent: where the file says
    worker = WorkerSession(b"echo", PeerSettings(), 0.0)
    worker.receive(protocol.worker_request(Dialect.GDP, b"t1", b"echo", [b"x"]), 0.5)
    assert worker.moved("moved", 1.0) == [Reconnect("moved"), ToBroker(protocol.gdp_resume(b"echo", b"t1"))]
    worker.stop()
    assert worker.moved("moved", 2.0) == []


def test_an_address_file_is_read_again_when_it_changes_or_the_broker_is_silent(tmp_path: Path) -> None:
    path = tmp_path / "broker.json"
    first = BrokerAddress("b", "0001", (("router", "tcp://127.0.0.1:1"),), public_key="k" * 40)
    address_file.write(path, first)
    trusting = Locator(Where(broker_file=str(path), trust_announced_key=True), "router")
    plain = Locator(Where(broker_file=str(path)), "router")
    assert trusting.target == Target("tcp://127.0.0.1:1", b"k" * 40) and plain.target.server_key is None
    now = time.monotonic() + FILE_LOOK
    assert not trusting.moved(now)  # unchanged
    address_file.write(path, BrokerAddress("b", "0002", (("router", "tcp://127.0.0.1:2"),), public_key="m" * 40))
    assert not trusting.moved(now)  # looked at no more than every FILE_LOOK seconds
    assert trusting.moved(now + FILE_LOOK) and trusting.target == Target("tcp://127.0.0.1:2", b"m" * 40)
    assert plain.advance() == Target("tcp://127.0.0.1:2")  # silence: read again
    path.unlink()  # the broker left: stay where it was
    assert not plain.moved(now + 3 * FILE_LOOK) and plain.advance() == Target("tcp://127.0.0.1:2")
    path.write_text("{not json")
    assert not plain.moved(now + 4 * FILE_LOOK) and plain.target == Target("tcp://127.0.0.1:2")


@pytest.mark.slow
def test_peers_follow_the_address_file_of_a_broker_restarted_on_a_new_port(transport: str, tmp_path: Path) -> None:
    """kill -9, and a broker on another port: the worker (a process) and the client read the file again."""
    path = tmp_path / "broker.json"
    broker = BrokerProcess(
        ["--transport", transport, "--bind", "tcp://127.0.0.1:*", "--address-file", str(path), *HEARTBEAT],
        tmp_path / "broker.log",
    ).start()  # fmt: skip
    command = [*GENERALDOMO, "worker", "--transport", transport, "--broker-file", str(path), *HEARTBEAT]
    with (tmp_path / "worker.log").open("ab") as log:
        worker = subprocess.Popen([*command, "--find-timeout", "60"], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        broker.wait_serving()
        where = Where(broker_file=str(path), timeout=WAIT)
        with Client(where, transport, heartbeat_interval=0.25, liveness=4) as client:
            served(client, "echo", WAIT)
            assert client.request("echo", b"before", timeout=WAIT).payload == b"before"
            old = client.endpoint
            broker.kill()  # the file stays, naming a port nobody listens on
            broker.start()
            eventually(lambda: address_file.read(path).endpoint(transport) != old, WAIT, "the new address file")
            served(client, "echo", WAIT)
            assert client.request("echo", b"after", timeout=WAIT).payload == b"after"
            assert client.endpoint == address_file.read(path).endpoint(transport) != old
    finally:
        broker.stop()
        stop_all([worker])
    assert "reconnecting to" in (tmp_path / "worker.log").read_text()


def test_peers_move_to_the_next_endpoint_when_the_broker_is_silent(transport: str) -> None:
    first = Broker(transport, ["tcp://127.0.0.1:*"], settings=FAST).start()
    second = Broker(transport, ["tcp://127.0.0.1:*"], settings=FAST).start()
    endpoints = [first.endpoint(transport, "tcp"), second.endpoint(transport, "tcp")]
    worker = Worker(endpoints, "echo", lambda payload: payload, transport, heartbeat_interval=0.25, liveness=4)
    serving = serve(worker)
    try:
        with Client(endpoints, transport, heartbeat_interval=0.25, liveness=4) as client:
            served(client, "echo", WAIT)
            assert client.request("echo", b"one", timeout=WAIT).payload == b"one"
            assert client.endpoint == endpoints[0]
            silence(first)
            served(client, "echo", WAIT)
            assert client.request("echo", b"two", timeout=WAIT).payload == b"two"
            assert client.endpoint == endpoints[1] == worker.endpoint
    finally:
        worker.stop()
        serving.join(WAIT)
        second.stop()


def test_the_cli_takes_several_connect_endpoints(transport: str, tmp_path: Path) -> None:
    broker = Broker(transport, ["tcp://127.0.0.1:*"], settings=FAST).start()
    endpoint = broker.endpoint(transport, "tcp")
    dead = "tcp://127.0.0.1:9"  # nothing listens there: the client moves on after its silence
    command = [*GENERALDOMO, "worker", "--transport", transport, "--connect", dead, "--connect", endpoint, *HEARTBEAT]
    with (tmp_path / "worker.log").open("ab") as log:
        worker = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        eventually(lambda: broker.core.workers, WAIT, "the worker to move on to the live broker")
        ask = [*GENERALDOMO, "client", "--transport", transport, "--connect", dead, "--connect", endpoint]
        run = subprocess.run(
            [*ask, *HEARTBEAT, "--timeout", str(WAIT), "echo", "hi"], capture_output=True, text=True, timeout=2 * WAIT
        )
        assert run.returncode == 0, run.stderr
        assert run.stdout.strip() == "hi"
    finally:
        stop_all([worker])
        broker.stop()


def test_a_beacon_found_broker_is_listened_for_again(transport: str, monkeypatch: pytest.MonkeyPatch) -> None:
    port = beacon_port(monkeypatch)
    first = Broker(transport, ["tcp://127.0.0.1:*"], settings=FAST).start()
    first.announce("follow", destination="127.0.0.1", port=port, interval=0.1)
    worker = Worker(None, "echo", lambda payload: payload, transport, heartbeat_interval=0.25, liveness=4)
    serving = serve(worker)
    second = None
    try:
        with Client(None, transport, heartbeat_interval=0.25, liveness=4) as client:
            served(client, "echo", WAIT)
            assert client.request("echo", b"one", timeout=WAIT).payload == b"one"
            silence(first)
            second = Broker(transport, ["tcp://127.0.0.1:*"], settings=FAST).start()
            second.announce("follow", destination="127.0.0.1", port=port, interval=0.1)
            served(client, "echo", WAIT)
            assert client.request("echo", b"two", timeout=WAIT).payload == b"two"
            assert client.endpoint == second.endpoint(transport, "tcp") == worker.endpoint
    finally:
        worker.stop()
        serving.join(WAIT)
        if second is not None:
            second.stop()


def test_a_host_name_is_left_to_libzmq_which_resolves_it_at_each_attempt(transport: str) -> None:
    """``localhost`` (the name every machine has): peers given it find a broker started after them and come back
    to it after a restart; nothing here resolves or pins an address (libzmq resolves the name each time it
    connects, ``tcp_connecter_t::open``)."""
    probe = Broker(transport, ["tcp://127.0.0.1:*"], settings=FAST)
    port = probe.endpoint(transport, "tcp").rsplit(":", 1)[1]
    probe.stop()  # the port is free again; the broker below binds it (retried, should another take it meanwhile)
    named = f"tcp://localhost:{port}"
    worker = Worker(named, "echo", lambda payload: payload, transport, heartbeat_interval=0.25, liveness=4)
    serving = serve(worker)
    broker = _bind(transport, f"tcp://127.0.0.1:{port}")
    try:
        with Client(named, transport, heartbeat_interval=0.25, liveness=4) as client:
            served(client, "echo", WAIT)
            assert client.request("echo", b"one", timeout=WAIT).payload == b"one"
            silence(broker)
            broker = _bind(transport, f"tcp://127.0.0.1:{port}")
            served(client, "echo", WAIT)
            assert client.request("echo", b"two", timeout=WAIT).payload == b"two"
            assert client.endpoint == named == worker.endpoint
    finally:
        worker.stop()
        serving.join(WAIT)
        broker.stop()


def _bind(transport: str, endpoint: str) -> Broker:
    deadline = time.monotonic() + WAIT
    while True:
        try:
            return Broker(transport, [endpoint], settings=FAST).start()
        except Exception:
            assert time.monotonic() < deadline, f"nothing could bind {endpoint} again"
            time.sleep(0.2)

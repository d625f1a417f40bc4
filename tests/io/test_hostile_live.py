"""Issue 20's findings about single hostile messages, over real sockets and processes, both transports: each
reproduces a finding (it failed on the code before the field limits) and checks that the peer serves on."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
from hostile import RawBroker, RawPeer
from waiting import eventually
from worker_commands import parse_worker_command

from generaldomo import Client, RequestFailed, Worker
from generaldomo.sansio.wire import protocol

DEEP = b"[" * 100_000 + b"]" * 100_000


@pytest.fixture
def cli_broker(transport: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A ``generaldomo broker`` process with the ``attributes`` resolver, bound to a loopback port."""
    process = subprocess.Popen(
        [sys.executable, "-m", "generaldomo", "broker", "--transport", transport, "--bind", "tcp://127.0.0.1:*",
         "--resolver", "attributes", "--max-attempts", "2"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        yield process, process.stdout.readline().split()[-1]
    finally:
        process.terminate()
        process.wait(20)


ECHO = b'{"service": "echo"}'


def serve_echo(endpoint: str, transport: str) -> tuple[Worker, threading.Thread]:
    worker = Worker(endpoint, ECHO, lambda payload: payload, transport)
    thread = threading.Thread(target=worker.serve, daemon=True)
    thread.start()
    return worker, thread


@pytest.mark.parametrize(
    ("service", "body"),
    [
        (b"mmi.flow", [b"echo", b'{"rate": ' + b"9" * 400 + b"}"]),  # OverflowError at the next dispatch
        (b"mmi.flow", [b"echo", b'{"burst": ' + b"9" * 400 + b"}"]),
        (b"mmi.flow", [b"echo", DEEP]),  # RecursionError in json.loads
        (b"mmi.flow", [b"echo", b'{"rate": NaN}']),  # the limit silently stopped working, status not strict JSON
        (b"mmi.flow", [b"echo", b'{"rate": Infinity}']),
        (b"mmi.flow", [b"echo", b'{"rate": 1e999}']),
        (b"mmi.service", [DEEP]),  # RecursionError in the attributes resolver
        (b"mmi.service", [b'{"service": "echo", "x": ' + b"[" * 5000 + b"]" * 5000 + b"}"]),
    ],
)
def test_one_hostile_management_request_is_answered_400_and_the_broker_serves_on(
    cli_broker: tuple[subprocess.Popen[str], str], transport: str, service: bytes, body: list[bytes]
) -> None:
    process, endpoint = cli_broker
    worker, thread = serve_echo(endpoint, transport)
    try:
        with RawPeer(transport, endpoint) as attacker:
            attacker.send(protocol.gdp_request(b"attack", service, body))
            reply = protocol.parse_client_reply(attacker.recv() or [])
            assert reply is not None and reply[:2] == (b"attack", protocol.BAD_REQUEST), reply
        with Client(endpoint, transport) as client:
            client.flow("echo", rate=1000, burst=10)  # a dispatch under a rate limit: the next one runs
            for n in range(3):
                assert client.request(ECHO, b"%d" % n, timeout=30).payload == b"%d" % n
            status = client.request("mmi.status", [], timeout=30).payload
            json.loads(status, parse_constant=lambda name: pytest.fail(f"{name} in the status report"))
            assert json.loads(status)["broker"]["counters"].get("internal_errors", 0) == 0
        assert process.poll() is None
    finally:
        worker.stop()
        thread.join(20)


def test_a_worker_status_of_5000_digits_is_refused_and_the_client_lives(
    cli_broker: tuple[subprocess.Popen[str], str], transport: str
) -> None:
    """The finding: the status raised in RequestFailed on the client's IO thread, which failed every request."""
    process, endpoint = cli_broker
    with Client(endpoint, transport) as client, RawPeer(transport, endpoint) as hostile:
        hostile.send(protocol.gdp_ready(ECHO))
        first = client.submit(ECHO, b"victim")
        task = None
        while task is None:
            frames = hostile.recv()
            assert frames is not None, "the hostile worker got no task"
            command = parse_worker_command(frames)
            task = command[1] if command is not None and command[0] == protocol.REQUEST else None
        hostile.send(protocol.gdp_ready(ECHO, (task[0], b"5" * 5000, [b"forged"])))
        disconnect = hostile.recv()
        assert disconnect is not None and parse_worker_command(disconnect) == (protocol.DISCONNECT, ())
        worker, thread = serve_echo(endpoint, transport)  # the task was reissued: the honest worker answers it
        try:
            assert first.result(30).payload == b"victim"
            assert client.request(ECHO, b"after", timeout=30).payload == b"after"
            assert client.status(timeout=30)["broker"]["counters"]["workers_malformed"] == 1
        finally:
            worker.stop()
            thread.join(20)
    assert process.poll() is None


def final(request_id: bytes, status: bytes, body: bytes) -> list[bytes]:
    return [protocol.GDP_CLIENT, b"\x03", request_id, status, b"", body]


def test_a_hostile_broker_cannot_kill_a_client(transport: str) -> None:
    with (
        RawBroker(transport) as broker,
        Client(broker.endpoint, transport, heartbeat_interval=60, fail_unknown=False) as client,
    ):
        futures = [client.submit("echo", b"%d" % n) for n in range(2)]
        ids = []
        while len(ids) < 2:
            peer, frames = broker.recv_until(lambda frames: frames[1] == b"\x01")
            ids.append(frames[2])
        for hostile in (
            final(ids[0], b"5" * 5000, b"5,000 digits"),
            final(ids[0], b"2OO", b"not digits"),
            final(b"x" * 300, b"200", b"id too long"),
            [protocol.GDP_CLIENT, b"\x02", b"y" * 300, b"partial"],
            [protocol.GDP_CLIENT, b"\x04", b"i" * 1000],
            [protocol.GDP_CLIENT, b"\x03", ids[0]],
            [b"junk"],
        ):
            broker.send(peer, hostile)
        broker.send(peer, final(ids[1], b"200", b"one"))
        assert futures[1].result(30).payload == b"one"
        assert not futures[0].done()
        broker.send(peer, final(ids[0], b"429", b"busy"))
        with pytest.raises(RequestFailed) as failed:
            futures[0].result(30)
        assert failed.value.status == 429
        assert client.malformed >= 5
        later = client.submit("echo", b"later")  # the IO thread lives
        peer, frames = broker.recv_until(lambda frames: frames[1] == b"\x01")
        broker.send(peer, final(frames[2], b"200", b"later"))
        assert later.result(30).payload == b"later"


def test_a_hostile_broker_cannot_kill_a_worker(transport: str) -> None:
    with RawBroker(transport) as broker:
        worker = Worker(broker.endpoint, "echo", lambda payload: payload, transport, heartbeat_interval=60)
        thread = threading.Thread(target=worker.serve, daemon=True)
        thread.start()
        try:
            peer, _ = broker.recv_until(lambda frames: frames[1] == b"\x01")  # READY
            for hostile in (
                [protocol.GDP_WORKER, b"\x02", b"t" * 2000, b"echo", b"task id too long"],
                [protocol.GDP_WORKER, b"\x02", b"t" * 16, b"d" * 5000, b"description too long"],
                [protocol.GDP_WORKER, b"\x09"],
                [b"junk"],
            ):
                broker.send(peer, hostile)
            broker.send(peer, [protocol.GDP_WORKER, b"\x02", b"t" * 16, b"echo", b"honest"])
            _, ready = broker.recv_until(lambda frames: frames[1] == b"\x01" and len(frames) > 3)
            assert ready[3:] == [b"t" * 16, b"200", b"honest"]
            eventually(lambda: worker.malformed >= 3, what="the hostile messages to be counted")
            assert thread.is_alive()
        finally:
            worker.stop()
            thread.join(20)

"""Issue 20 item 1 and issue 21 item 1: a barrier per message, and a broker that cannot serve says so and exits.

Failures are injected into real broker processes (a resolver that fails on purpose: tests/faulty.py) and into
an embedded broker (a link whose socket fails), on both transports."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import zmq
from faulty import ESCAPE, RAISE
from hostile import RawPeer
from waiting import eventually

from generaldomo import Broker, Client, Worker
from generaldomo.cli.command import Exit
from generaldomo.errors import BridgeFailed, BrokerFailed
from generaldomo.io.bridge import Bridge
from generaldomo.io.failfast import ServingLoop
from generaldomo.sansio.wire import protocol

TESTS = Path(__file__).resolve().parents[1]  # the shared helpers: faulty.py


def broker_process(transport: str, *flags: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen(
        [sys.executable, "-m", "generaldomo", "broker", "--transport", transport, *flags],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip


def faulty_broker(transport: str) -> tuple[subprocess.Popen[str], str]:
    process = broker_process(transport, "--bind", "tcp://127.0.0.1:*", "--resolver", "faulty:FaultyResolver")
    assert process.stdout is not None
    return process, process.stdout.readline().split()[-1]


def test_an_unexpected_error_drops_one_message_and_the_broker_serves_on(transport: str) -> None:
    process, endpoint = faulty_broker(transport)
    worker = Worker(endpoint, "echo", lambda payload: payload, transport)
    thread = threading.Thread(target=worker.serve, daemon=True)
    thread.start()
    try:
        with RawPeer(transport, endpoint) as attacker:
            for n in range(50):
                attacker.send(protocol.gdp_request(b"%d" % n, b"mmi.service", [RAISE]))
            attacker.send(protocol.gdp_request(b"after", b"mmi.service", [b"echo"]))
            for _ in range(50):  # the dropped ones get no answer: the first answer is the last request's
                reply = protocol.parse_client_reply(attacker.recv() or [])
                if reply is not None:
                    break
            assert reply is not None and reply[0] == b"after", reply
        with Client(endpoint, transport) as client:
            assert client.request("echo", b"served on", timeout=30).payload == b"served on"
            assert client.status(timeout=30)["broker"]["counters"]["internal_errors"] == 50
    finally:
        worker.stop()
        thread.join(20)
        process.terminate()
        _, stderr = process.communicate(timeout=20)
    assert process.returncode == 0
    assert stderr.count("RuntimeError: injected by the test") == 1, stderr  # one traceback, rate-limited


def test_an_error_that_ends_the_loop_makes_the_broker_process_exit_non_zero_at_once(transport: str) -> None:
    process, endpoint = faulty_broker(transport)
    try:
        with RawPeer(transport, endpoint) as attacker:
            attacker.send(protocol.gdp_request(b"1", ESCAPE, [b"x"]))
            sent = time.monotonic()
            process.wait(30)
            took = time.monotonic() - sent
    finally:
        if process.poll() is None:
            process.kill()
        _, stderr = process.communicate(timeout=20)
    assert process.returncode == Exit.SERVE_FAILED, stderr
    assert "the broker stopped serving: Injected('injected by the test')" in stderr
    assert took < 10, f"the broker took {took:.2f} s to exit"  # about 0.1 s when measured (bench/README.md)


@pytest.mark.parametrize("told", ["on_failure", "join", "check", "stop"])
def test_an_embedded_broker_whose_socket_fails_tells_the_application(transport: str, told: str) -> None:
    failures: list[BaseException] = []
    called = threading.Event()

    def on_failure(error: BaseException) -> None:
        failures.append(error)
        called.set()

    broker = Broker(transport, ["tcp://127.0.0.1:*"], on_failure=on_failure)
    endpoint = broker.endpoint(transport, "tcp")

    def failing_send(address: object, frames: object) -> None:
        raise zmq.ZMQError(zmq.ETERM)  # what a socket of a terminated context raises

    broker.links[0].send = failing_send  # type: ignore[method-assign]
    broker.start()
    assert broker.serving
    with RawPeer(transport, endpoint) as peer:
        peer.send(protocol.gdp_request(b"1", b"mmi.status", []))  # its answer goes to the failing socket
        assert called.wait(30)
    assert isinstance(failures[0], zmq.ZMQError)
    eventually(lambda: not broker.serving, what="the broker to stop serving")
    if told == "join":
        with pytest.raises(BrokerFailed) as failed:
            broker.join(30)
    elif told == "check":
        with pytest.raises(BrokerFailed) as failed:
            broker.check()
    else:
        with pytest.raises(BrokerFailed) as failed:
            broker.stop()
    if told != "on_failure":
        assert failed.value.__cause__ is failures[0]
    assert broker.failure is failures[0]
    with pytest.raises(BrokerFailed):
        broker.stop()  # and every later stop says so too


def test_a_broker_that_cannot_bind_names_the_endpoint_and_exits_non_zero() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cases = [
            (f"tcp://127.0.0.1:{port}", Exit.BIND_FAILED, "Address already in use"),
            ("tcp://127.0.0.1:notaport", Exit.USAGE, "is not a number"),
            ("tpc://127.0.0.1:5555", Exit.USAGE, "unknown transport"),
        ]
        for endpoint, code, reason in cases:
            process = broker_process("router", "--bind", endpoint)
            _, stderr = process.communicate(timeout=60)
            assert process.returncode == code, stderr
            assert repr(endpoint) in stderr and reason in stderr, stderr
            assert "expected tcp://IP:PORT" in stderr  # the form an endpoint takes


def test_an_error_in_the_broker_loop_outside_the_core_drops_that_batch_only(transport: str) -> None:
    broker = Broker(transport, ["tcp://127.0.0.1:*"])
    link = broker.links[0]
    real, calls = link.recv_batch, []

    def recv_batch_failing_once(limit: int) -> object:
        calls.append(limit)
        if len(calls) == 1:
            raise RuntimeError("injected by the test")
        return real(limit)

    link.recv_batch = recv_batch_failing_once  # type: ignore[method-assign]
    broker.start()
    try:
        with Client(broker.endpoint(transport, "tcp"), transport, heartbeat_interval=0.2, liveness=3) as client:
            status = client.status(timeout=30)  # the first batch was dropped: the client's retry is answered
        assert status["broker"]["internal_errors"] == 1
        assert broker.serving
    finally:
        broker.stop()


def final(request_id: bytes, body: bytes, status: bytes = b"200") -> list[bytes]:
    return [protocol.GDP_CLIENT, b"\x03", request_id, status, b"", body]


class FailingOn:
    """A peer's session whose ``receive`` raises for a message whose last frame is ``body``, the rest its own (a
    compiled session's methods cannot be replaced on the instance: the peer is given this in its place)."""

    def __init__(self, session: object, body: bytes) -> None:
        self._session, self._body = session, body

    def receive(self, frames: list[bytes], now: float) -> object:
        if frames[-1] == self._body:
            raise RuntimeError("injected by the test")
        return self._session.receive(frames, now)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self._session, name)


def test_a_client_drops_a_message_whose_handling_raises_and_serves_on(transport: str) -> None:
    from hostile import RawBroker

    with (
        RawBroker(transport) as broker,
        Client(broker.endpoint, transport, heartbeat_interval=60, fail_unknown=False) as client,
    ):
        client._io._session = FailingOn(client._io._session, b"boom")  # type: ignore[assignment]
        first, second = client.submit("echo", b"1"), client.submit("echo", b"2")
        requests = [broker.recv_until(lambda frames: frames[1] == b"\x01") for _ in range(2)]
        route, ids = requests[0][0], [frames[2] for _, frames in requests]
        broker.send(route, final(ids[0], b"boom"))
        broker.send(route, final(ids[1], b"two"))
        assert second.result(30).payload == b"two"
        assert client.internal_errors == 1 and not first.done()

        def failing_resolve(action: object) -> None:
            raise RuntimeError("injected into a reply's delivery")

        client._io._resolve = failing_resolve  # type: ignore[method-assign]
        broker.send(route, final(ids[0], b"one"))
        with pytest.raises(RuntimeError, match="injected into a reply's delivery"):
            first.result(30)  # its caller learns it, and waits no longer
        assert client.internal_errors == 2
        del client._io._resolve
        third = client.submit("echo", b"3")
        route, frames = broker.recv_until(lambda frames: frames[1] == b"\x01")
        broker.send(route, final(frames[2], b"three"))
        assert third.result(30).payload == b"three"  # the IO thread lives


def test_a_worker_drops_a_message_whose_handling_raises_and_serves_on(transport: str) -> None:
    from hostile import RawBroker

    with RawBroker(transport) as broker:
        worker = Worker(broker.endpoint, "echo", lambda payload: payload, transport, heartbeat_interval=60)
        worker._session = FailingOn(worker._session, b"boom")  # type: ignore[assignment]
        thread = threading.Thread(target=worker.serve, daemon=True)
        thread.start()
        try:
            peer, _ = broker.recv_until(lambda frames: frames[1] == b"\x01")
            broker.send(peer, [protocol.GDP_WORKER, b"\x02", b"t" * 16, b"echo", b"boom"])
            broker.send(peer, [protocol.GDP_WORKER, b"\x02", b"u" * 16, b"echo", b"fine"])
            _, ready = broker.recv_until(lambda frames: frames[1] == b"\x01" and len(frames) > 3)
            assert ready[3:] == [b"u" * 16, b"200", b"fine"]
            assert worker.internal_errors == 1 and thread.is_alive()
        finally:
            worker.stop()
            thread.join(20)


@pytest.mark.parametrize("owner", ["broker", pytest.param("bridge", marks=pytest.mark.needs_draft)])  # SERVER
def test_the_broker_and_the_bridge_share_one_serving_life(owner: str) -> None:
    """One piece (failfast.ServingLoop) runs both loops: start once, serving while the loop runs, join and check
    quiet after a clean stop, each raising its own failure type once the loop has failed."""
    upstream = Broker("router", ["tcp://127.0.0.1:*"]).start()
    try:
        made: ServingLoop
        if owner == "broker":
            made, failed = Broker("router", ["tcp://127.0.0.1:*"]), BrokerFailed
        else:
            made, failed = Bridge(["tcp://127.0.0.1:*"], upstream.endpoint("router", "tcp")), BridgeFailed
        assert not made.serving and made.failure is None
        assert made.start() is made
        eventually(lambda: made.serving, 30, "the loop to run")
        with pytest.raises(RuntimeError, match="already started"):
            made.start()
        made.stop()  # type: ignore[attr-defined]
        assert made.join(30) and not made.serving and made.failure is None
        made.check()
        made._failure.ended(zmq.ZMQError(zmq.ETERM))  # as the loop records an error that ends it
        for tell in (made.check, lambda: made.join(1)):
            with pytest.raises(failed) as raised:
                tell()
            assert isinstance(raised.value.__cause__, zmq.ZMQError)
    finally:
        upstream.stop()

"""Issue 20 item 6: the bridge has a bounded pool of upstream connections (429 beyond, never a dead thread),
refuses to be an open relay into a CURVE broker unless told, rate-limits its warnings and fails fast. Real
sockets; CLI bridges in real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import zmq
from curve_keys import Keyring
from hostile import RawPeer, ask, statuses_of_answers
from waiting import eventually

from generaldomo import Broker, Client, RequestRejected
from generaldomo.cli.command import Exit
from generaldomo.errors import BridgeFailed
from generaldomo.io import keys
from generaldomo.io.bridge import QUEUED_OVERHEAD, Bridge
from generaldomo.io.peer.connection import Curve
from generaldomo.sansio.wire import protocol

TESTS = Path(__file__).resolve().parents[1]  # the shared helpers: faulty.py


def bridge_process(*flags: str, code: str = "") -> subprocess.Popen[str]:
    """``generaldomo bridge FLAGS`` in a process of its own (after running ``code``, which may inject a fault)."""
    program = f"import sys; {code}\nfrom generaldomo.cli import main; sys.exit(main(['bridge', *sys.argv[1:]]))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen(
        [sys.executable, "-c", program, *flags], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def started(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line, process.communicate(timeout=30)[1]
    return line.split()[3]  # "generaldomo bridge: server ENDPOINT -> ..."


def stopped(process: subprocess.Popen[str]) -> str:
    if process.poll() is None:
        process.terminate()
    return process.communicate(timeout=30)[1]


def test_the_cli_bridge_answers_429_beyond_its_bound_and_serves_on(brokers, workers) -> None:
    broker = brokers("router", ["tcp://127.0.0.1:*"])
    process = bridge_process("--server", "tcp://127.0.0.1:*", "--broker", broker.endpoint("router"),
                             "--max-in-flight", "16", "--connection-queue-bytes", "0")  # fmt: skip
    try:
        endpoint = started(process)
        with RawPeer("server", endpoint) as peer:
            ask(peer, 40)  # 14 wait upstream for a worker that is not there yet (one connection's share of 16)
            assert statuses_of_answers(peer) == {protocol.OVER_BUDGET: 26}  # and none may wait in its queue
            assert broker.core.counters["requests"] == 14
            workers(broker.endpoint("router"), "router", "nobody")
            assert statuses_of_answers(peer) == {protocol.OK: 14}  # the places came free
        with Client(endpoint, "server") as client:
            assert client.request("nobody", b"later", timeout=30).payload == b"later"
        assert process.poll() is None
    finally:
        stderr = stopped(process)
    assert stderr.count("bridge refused a request") == 1, stderr  # rate-limited: one line, then a count


def test_one_client_cannot_take_every_place_in_flight(brokers, workers) -> None:
    """Found by the fuzzer: one connection's requests for a service nobody serves filled max_in_flight, and every
    other client of the bridge got 429 until they expired upstream."""
    broker = brokers("router", ["tcp://127.0.0.1:*"])
    bridge = Bridge(["tcp://127.0.0.1:*"], broker.endpoint("router"), max_in_flight=16).start()
    try:
        with RawPeer("server", bridge.endpoints[0]) as hog:
            ask(hog, 40)  # they wait upstream: 14 of the 16 places are its share; 26 wait in its queue
            assert statuses_of_answers(hog) == {} and bridge.refused_in_flight == 0
            assert bridge.queued == 26 and broker.core.counters["requests"] == 14
            workers(broker.endpoint("router"), "router", "echo")
            with Client(bridge.endpoints[0], "server") as client:
                assert [client.request("echo", b"%d" % n, timeout=30).payload for n in range(3)] == [b"0", b"1", b"2"]
    finally:
        bridge.stop()


def test_the_bridge_answers_429_when_it_runs_out_of_sockets_and_serves_on(brokers, workers) -> None:
    """The finding: at the context's socket limit (1,023 by default) the bridge's thread died."""
    broker = brokers("router", ["tcp://127.0.0.1:*"])
    context = zmq.Context()
    context.set(zmq.MAX_SOCKETS, 40)  # a small limit reproduces it with few requests
    bridge = Bridge(["tcp://127.0.0.1:*"], broker.endpoint("router"), context=context, max_in_flight=1000).start()
    try:
        with RawPeer("server", bridge.endpoints[0]) as peer:
            ask(peer, 60)
            statuses = statuses_of_answers(peer)
            assert set(statuses) == {protocol.OVER_BUDGET}
            assert statuses[protocol.OVER_BUDGET] + bridge.dealers == 60 and bridge.dealers >= 20
            assert bridge.serving
            workers(broker.endpoint("router"), "router", "nobody")  # the requests in flight are answered
            assert statuses_of_answers(peer) == {protocol.OK: bridge.dealers}
        with Client(bridge.endpoints[0], "server") as client:
            assert client.request("nobody", b"later", timeout=30).payload == b"later"
    finally:
        bridge.stop()
        context.term()


@pytest.fixture
def keyring(tmp_path: Path) -> Keyring:
    ring = Keyring(tmp_path)
    ring.make("bridge", "clients")
    return ring


def test_a_curve_upstream_with_plaintext_clients_is_refused_unless_allowed(keyring: Keyring) -> None:
    broker = Broker("router", ["tcp://127.0.0.1:*"], security=keyring.security()).start()
    try:
        upstream = broker.endpoint("router", "tcp")
        curve = Curve(keys.load_public(keyring.secret("broker")), *keys.load_secret(keyring.secret("bridge")))
        with pytest.raises(ValueError, match="allow_plaintext"):
            Bridge(["tcp://127.0.0.1:*"], upstream, upstream=curve)
        broker_key = str(keyring.root / "secrets" / "broker.key")
        flags = ("--server", "tcp://127.0.0.1:*", "--broker", upstream, "--curve-server-key", broker_key,
                 "--curve-key", str(keyring.secret("bridge")))  # fmt: skip
        refused = bridge_process(*flags)
        _, stderr = refused.communicate(timeout=60)
        assert refused.returncode == Exit.USAGE and "--allow-plaintext" in stderr, stderr
        relay = bridge_process(*flags, "--allow-plaintext")
        try:
            endpoint = started(relay)
            with Client(endpoint, "server") as client:  # told so explicitly: a keyless client gets through
                assert "broker" in client.status(timeout=30)
        finally:
            stderr = stopped(relay)
        assert "relaying plaintext clients to a CURVE broker" in stderr
    finally:
        broker.stop()


def test_the_bridge_rate_limits_its_warnings(brokers) -> None:
    broker = brokers("router", ["tcp://127.0.0.1:*"])
    process = bridge_process("--server", "tcp://127.0.0.1:*", "--broker", broker.endpoint("router"))
    try:
        endpoint = started(process)
        with RawPeer("server", endpoint) as peer:
            for n in range(5000):
                peer.send([b"GDPC01", b"\x09", b"%d" % n])  # not a client request
            peer.send(protocol.gdp_client_heartbeat())
            answer = peer.recv()
            assert answer is not None and protocol.parse_broker_instance(answer) is not None
    finally:
        stderr = stopped(process)
    assert 1 <= stderr.count("bridge dropped a message") <= 2, stderr  # was 5,000 lines


def test_a_bridge_whose_loop_dies_exits_non_zero_at_once(brokers) -> None:
    broker = brokers("router", ["tcp://127.0.0.1:*"])
    inject = (
        "from faulty import Injected\n"
        "from generaldomo.io import bridge\n"
        "def _refuse(*args): raise Injected('injected by the test')\n"
        "bridge.Bridge._forward = _refuse\n"
    )
    process = bridge_process("--server", "tcp://127.0.0.1:*", "--broker", broker.endpoint("router"), code=inject)
    try:
        endpoint = started(process)
        with RawPeer("server", endpoint) as peer:
            peer.send(protocol.gdp_request(b"1", b"echo", [b"x"]))
            sent = time.monotonic()
            process.wait(30)
            took = time.monotonic() - sent
    finally:
        stderr = stopped(process)
    assert process.returncode == Exit.SERVE_FAILED, stderr
    assert "the bridge stopped serving: Injected('injected by the test')" in stderr
    assert took < 10


def test_an_embedded_bridge_whose_socket_fails_tells_the_application(brokers) -> None:
    broker = brokers("router", ["tcp://127.0.0.1:*"])
    failed = threading.Event()
    bridge = Bridge(["tcp://127.0.0.1:*"], broker.endpoint("router"), on_failure=lambda error: failed.set())

    def failing_send(address: object, frames: object) -> None:
        raise zmq.ZMQError(zmq.ETERM)

    bridge.link.send = failing_send  # type: ignore[method-assign]
    bridge.start()
    with RawPeer("server", bridge.endpoints[0]) as peer:
        peer.send(protocol.gdp_client_heartbeat())  # its answer goes to the failing socket
        assert failed.wait(30)
    with pytest.raises(BridgeFailed):
        bridge.join(30)
    with pytest.raises(BridgeFailed):
        bridge.stop()
    assert not bridge.serving


@pytest.mark.parametrize(
    ("flags", "code", "text"),
    [
        (("--server", "tcp://127.0.0.1:notaport"), Exit.USAGE, "cannot bind to 'tcp://127.0.0.1:notaport'"),
        (("--server", "tcp://127.0.0.1:*", "--broker", "tpc://nowhere"), Exit.USAGE, "connect to 'tpc://nowhere'"),
    ],
)
def test_a_bridge_that_cannot_start_says_why(flags: tuple[str, ...], code: int, text: str) -> None:
    if "--broker" not in flags:
        flags = (*flags, "--broker", "tcp://127.0.0.1:5555")
    process = bridge_process(*flags)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == code and text in stderr, stderr


def _slow_echo(payload: bytes) -> bytes:
    time.sleep(0.005)  # requests pile up in flight while the workers are busy
    return payload


def test_one_client_s_threads_burst_through_the_cli_bridge_without_a_429(brokers, workers) -> None:
    """The first users' own pattern: threads of one SERVER-transport Client submit many requests each through
    ``generaldomo bridge`` in front of an MDP broker. A connection's requests beyond its share of max_in_flight
    wait in its queue instead of being refused."""
    broker = brokers("router", ["tcp://127.0.0.1:*"])
    for _ in range(4):
        workers(broker.endpoint("router"), "router", "echo", _slow_echo)
    process = bridge_process("--server", "tcp://127.0.0.1:*", "--broker", broker.endpoint("router"),
                             "--max-in-flight", "16")  # fmt: skip
    failures: list[BaseException] = []
    try:
        endpoint = started(process)
        with Client(endpoint, "server", backpressure=False) as client:  # the bridge alone must not refuse them

            def burst(n: int) -> None:
                futures = [client.submit("echo", b"%d-%d" % (n, i)) for i in range(100)]
                for i, future in enumerate(futures):
                    try:
                        assert future.result(120).payload == b"%d-%d" % (n, i)
                    except BaseException as error:
                        failures.append(error)

            threads = [threading.Thread(target=burst, args=(n,)) for n in range(8)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(180)
        assert not failures, f"{len(failures)} of 800 failed, e.g. {failures[0]!r}"
        assert process.poll() is None
    finally:
        stderr = stopped(process)
    assert "bridge refused a request" not in stderr, stderr


def test_a_429_with_retry_after_is_backpressure_for_the_client(brokers, workers) -> None:
    """A bridge that may queue nothing answers a connection's requests beyond its share (3 of 4) 429 with a
    retry_after: with ``backpressure=False`` ``Client.request`` raises it; by default it waits and sends the
    request again, within its timeout, until there is room."""
    gate = threading.Event()

    def held(payload: bytes) -> bytes:
        gate.wait(60)
        return payload

    broker = brokers("router", ["tcp://127.0.0.1:*"])
    workers(broker.endpoint("router"), "router", "echo", held)
    bridge = Bridge(["tcp://127.0.0.1:*"], broker.endpoint("router"), max_in_flight=4, connection_queue_bytes=0).start()
    try:
        for backpressure in (False, True):
            gate.clear()
            refused_before = bridge.refused_in_flight
            outcomes: list[object] = []
            with Client(bridge.endpoints[0], "server", backpressure=backpressure) as client:

                def ask(n: int, client: Client = client, outcomes: list[object] = outcomes) -> None:
                    try:
                        outcomes.append(client.request("echo", b"%d" % n, timeout=120).payload)
                    except RequestRejected as error:
                        outcomes.append(error)

                threads = [threading.Thread(target=ask, args=(n,)) for n in range(12)]
                for thread in threads:
                    thread.start()
                eventually(lambda before=refused_before: bridge.refused_in_flight >= before + 9, what="9 refusals")
                if backpressure:  # they are sent again while the first ones hold every place
                    eventually(lambda before=refused_before: bridge.refused_in_flight > before + 9, what="resends")
                gate.set()
                for thread in threads:
                    thread.join(240)
            refused = [o for o in outcomes if isinstance(o, RequestRejected)]
            assert len(outcomes) == 12
            if backpressure:
                assert not refused and sorted(outcomes) == sorted(b"%d" % n for n in range(12))  # type: ignore
            else:
                assert len(refused) == 9 and all(r.status == 429 and r.retry_after == 0.25 for r in refused)
    finally:
        gate.set()
        bridge.stop()


def test_a_connection_s_queue_is_bounded_in_bytes_and_freed_by_cancels_and_silence(brokers) -> None:
    """What waits in a connection's queue is charged to it: beyond connection_queue_bytes a request gets 429 with a
    retry_after; a CANCEL takes its request out of the queue (and frees its bytes); a silent client's queue goes."""
    broker = brokers("router", ["tcp://127.0.0.1:*"])  # nobody serves "nobody": the first places stay taken
    charge = QUEUED_OVERHEAD + len(b"nobody") + 2  # a queued request's bytes (bodies "14".."39")
    bridge = Bridge(["tcp://127.0.0.1:*"], broker.endpoint("router"), max_in_flight=16, heartbeat_interval=0.2,
                    connection_queue_bytes=20 * charge).start()  # fmt: skip
    try:
        with RawPeer("server", bridge.endpoints[0]) as hog:
            ask(hog, 40)  # 14 in flight (its share of 16), 20 queued, 6 refused
            refusals = []
            while len(refusals) < 6 and (frames := hog.recv(30_000)) is not None:
                refusals.append(frames)
            assert len(refusals) == 6 and bridge.queued == 20 and bridge.refused_in_flight == 6
            assert all(protocol.parse_retry_after(protocol.parse_client_reply(r)[3]) == 0.25 for r in refusals)
            for n in range(14, 24):  # ten queued ones withdrawn
                hog.send(protocol.gdp_cancel(b"%d" % n))
            eventually(lambda: bridge.queued == 10, what="the cancelled requests out of the queue")
            assert bridge._queued_all == 10 * charge
        eventually(lambda: bridge.queued == 0, what="the silent client's queue forgotten")  # the peer closed
        assert bridge._queued_all == 0 and not bridge._queued_bytes
    finally:
        bridge.stop()

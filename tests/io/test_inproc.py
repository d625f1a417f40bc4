"""inproc:// for the server transport: real inproc with the project's libzmq, the ipc carrier without its fix."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import zmq
from transports import TRANSPORTS

from generaldomo import Broker, Client, draft
from generaldomo.io import inproc
from generaldomo.io.auth import BrokerSecurity
from generaldomo.io.hub.links import ServerLink
from generaldomo.sansio.wire import codec

STRESS = Path(__file__).with_name("inproc_stress.py")
native_only = pytest.mark.skipif(not inproc.NATIVE, reason="this libzmq lacks generaldomo's mailbox lock patch")


@pytest.fixture
def carrier(monkeypatch: pytest.MonkeyPatch) -> None:
    """Act as with a libzmq without the fix: SERVER links carry inproc endpoints over ipc."""
    monkeypatch.setattr(inproc, "NATIVE", False)


@pytest.fixture(params=["native", "carrier"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each way a SERVER link's inproc endpoint can go: a real inproc pipe (needs the fix), the ipc carrier."""
    if request.param == "native" and not inproc.NATIVE:
        pytest.skip("this libzmq lacks generaldomo's mailbox lock patch")
    monkeypatch.setattr(inproc, "NATIVE", request.param == "native")
    return str(request.param)


@pytest.mark.needs_draft
def test_heavy_two_way_traffic_over_inproc_does_not_deadlock(
    path: str, brokers, workers, endpoint_for: Callable[[str], str]
) -> None:
    endpoint = endpoint_for("inproc")
    # Over a real inproc pipe a stock libzmq can halt here (issue 3048); the stress test below always does.
    broker = brokers("server", [endpoint])
    for _ in range(2):
        workers(endpoint, "server")
    with Client(endpoint, "server", heartbeat_interval=0.01) as client:
        errors: list[bytes] = []

        def burst(n: int) -> None:
            futures = [client.submit("echo", b"%d-%d" % (n, i)) for i in range(500)]
            errors.extend(
                f.result(60).payload for i, f in enumerate(futures) if f.result(60).payload != b"%d-%d" % (n, i)
            )

        threads = [threading.Thread(target=burst, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert not any(t.is_alive() for t in threads) and not errors
    assert broker.endpoints == [("server", endpoint)]


@native_only
@pytest.mark.needs_draft
def test_client_and_server_sockets_survive_two_way_stress_over_real_inproc() -> None:
    # Four threads sending on one CLIENT, one reading it, a SERVER echoing, 80,000 messages through queues of 8:
    # a stock libzmq halts here for good (every run of tests/io/inproc_stress.py with the unpatched wheel timed
    # out), so it runs in a process of its own that a timeout can end.
    result = subprocess.run(
        [sys.executable, str(STRESS), "4", "20000"], capture_output=True, text=True, timeout=240, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.split() == ["80000", "replies", "of", "80000"]


@native_only
@pytest.mark.needs_draft
def test_a_server_link_binds_real_inproc_that_a_plain_client_socket_reaches(endpoint_for: Callable[[str], str]) -> None:
    endpoint = endpoint_for("inproc")
    context = zmq.Context.instance()
    link = ServerLink(context, [endpoint])
    client = context.socket(zmq.CLIENT)
    client.linger = 0
    try:
        assert inproc.resolve(endpoint) == endpoint
        assert link.socket.getsockopt_string(zmq.LAST_ENDPOINT) == endpoint
        client.connect(endpoint)  # no generaldomo in between: only a real inproc bind answers this
        client.send(codec.encode([b"hello", b"there"]))
        received = None
        for _ in range(500):  # bounded: up to about 5 s
            if link.socket.poll(10) and (received := link.recv()) is not None:
                break
        assert received is not None and received[1] == [b"hello", b"there"]
        link.send(received[0], [b"back"])
        assert client.poll(5000) and codec.decode(client.recv()) == [b"back"]
    finally:
        client.close()
        link.close(0)


@pytest.mark.needs_draft
def test_a_link_with_curve_keeps_the_carrier(endpoint_for: Callable[[str], str]) -> None:
    endpoint = endpoint_for("inproc")
    # inproc pipes skip the handshake, so CURVE (and each message's credential) needs the ipc carrier.
    public, secret = zmq.curve_keypair()
    link = ServerLink(zmq.Context.instance(), [endpoint], security=BrokerSecurity(public, secret, {}))
    try:
        assert inproc.resolve(endpoint).startswith("ipc://")
        assert link.endpoints == [endpoint]
    finally:
        link.close(0)
    assert inproc.resolve(endpoint) == endpoint


@pytest.mark.needs_draft
def test_alias_is_released_and_rebinding_works(carrier: None, endpoint_for: Callable[[str], str]) -> None:
    endpoint = endpoint_for("inproc")
    context = zmq.Context.instance()
    first = ServerLink(context, [endpoint])
    assert inproc.resolve(endpoint).startswith("ipc://")
    with pytest.raises(ValueError, match="already bound"):
        ServerLink(context, [endpoint])
    first.close()
    assert inproc.resolve(endpoint) == endpoint
    ServerLink(context, [endpoint]).close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_broker_client_and_worker_over_inproc(
    transport: str, path: str, brokers, workers, endpoint_for: Callable[[str], str]
) -> None:
    endpoint = endpoint_for("inproc")  # a name of its own: the previous case's socket may still be closing
    broker = brokers(transport, [endpoint])
    carried = transport == "server" and path == "carrier"
    assert inproc.resolve(endpoint).startswith("ipc://") == carried
    workers(endpoint, transport)
    with Client(endpoint, transport) as client:
        replies = [client.request("echo", [b"%d" % i, b"x" * i], timeout=30).frames for i in range(50)]
    assert replies == [(b"%d" % i, b"x" * i) for i in range(50)]
    assert broker.endpoints == [(transport, endpoint)]


def test_router_inproc_is_real_inproc(endpoint_for: Callable[[str], str]) -> None:
    endpoint = endpoint_for("inproc")
    broker = Broker("router", [endpoint])
    try:
        assert inproc.resolve(endpoint) == endpoint
    finally:
        broker.stop()


def test_the_marker_is_the_one_the_build_exports() -> None:
    assert inproc.MAILBOX_SYMBOL == draft.MAILBOX_SYMBOL and draft.MAILBOX_SYMBOL in draft.MARKERS

"""The SERVER-to-MDP bridge in front of an MDP/0.1 ROUTER broker, with real sockets and processes."""

from __future__ import annotations

import subprocess
import sys

import pytest
import zmq
from bridge_cases import (  # noqa: F401  (the tests both bridges run)
    test_dealers_are_reused_and_management_requests_pass_through,
    test_silent_client_is_forgotten,
    test_threads_sharing_a_client_through_the_bridge,
)

from generaldomo import Client, RequestFailed
from generaldomo.io.bridge import Bridge
from generaldomo.sansio.wire import protocol


@pytest.fixture
def bridge(brokers):
    broker = brokers("router", ["tcp://127.0.0.1:*"])
    bridge = Bridge(["tcp://127.0.0.1:*"], broker.endpoint("router"), heartbeat_interval=1.0).start()
    yield broker, bridge
    bridge.stop()


def test_cli_bridge(brokers, workers) -> None:
    broker = brokers("router", ["tcp://127.0.0.1:*"])
    workers(broker.endpoint("router"), "router")
    process = subprocess.Popen(
        [sys.executable, "-m", "generaldomo", "bridge", "--server", "tcp://127.0.0.1:*", "--broker",
         broker.endpoint("router")],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        endpoint = process.stdout.readline().split()[3]
        with Client(endpoint, "server") as client:
            assert client.request("echo", b"bridged", timeout=30).payload == b"bridged"
    finally:
        process.terminate()
        assert process.wait(10) == 0


def test_mdp_client_frames_round_trip() -> None:
    frames = protocol.mdp_client_request(b"echo", [b"a", b""])
    assert frames == [b"", b"MDPC01", b"echo", b"a", b""]
    assert protocol.parse_mdp_client_reply(frames) == (b"echo", (b"a", b""))
    for foreign in ([], [b""], [b"", b"MDPC01"], [b"MDPC01", b"echo"], [b"", b"MDPW01", b"echo"]):
        assert protocol.parse_mdp_client_reply(foreign) is None


def test_malformed_upstream_reply_is_a_502(brokers) -> None:
    upstream = zmq.Context.instance().socket(zmq.ROUTER)  # a broken "MDP broker" answering garbage
    upstream.setsockopt(zmq.LINGER, 0)
    port = upstream.bind_to_random_port("tcp://127.0.0.1")
    device = Bridge(["tcp://127.0.0.1:*"], f"tcp://127.0.0.1:{port}", heartbeat_interval=0.2).start()
    try:
        with Client(device.endpoints[0], "server") as client:
            future = client.submit("echo", b"x")
            assert upstream.poll(30_000), "the bridge forwarded nothing"
            dealer, *request = upstream.recv_multipart()
            assert request == protocol.mdp_client_request(b"echo", [b"x"])
            upstream.send_multipart([dealer, b"", b"MDPC01", b"not-echo", b"x"])
            with pytest.raises(RequestFailed) as failed:
                future.result(30)
            assert str(failed.value).startswith(protocol.BAD_GATEWAY.decode())
    finally:
        device.stop()
        upstream.close()

"""The bridge's tests that run against both bridges: tests/io/test_bridge.py (the Python bridge) and
tests/cpp/test_cpp_bridge.py (the C++ one) import them, and pytest runs them with each module's ``bridge`` fixture
(a broker and a started bridge in front of it, expecting clients' heartbeats every second: a client forgotten
after a shorter silence, its IO thread starved on a loaded machine, would send its requests again)."""

from __future__ import annotations

import random
import threading
import time

from waiting import eventually

from generaldomo import Client


def jittery(tag: bytes):
    chance = random.Random(tag)

    def handler(payload: bytes) -> bytes:
        time.sleep(chance.uniform(0, 0.01))
        return tag + payload

    return handler


def test_threads_sharing_a_client_through_the_bridge(bridge, workers) -> None:
    broker, device = bridge
    for tag in (b"a:", b"b:", b"c:"):  # replies come back out of order
        workers(broker.endpoint("router"), "router", "echo", jittery(tag))
    errors: list[str] = []
    with Client(device.endpoints[0], "server", heartbeat_interval=1.0) as client:

        def ask(n: int) -> None:
            futures = [client.submit("echo", b"%d-%d" % (n, i)) for i in range(50)]
            for i, future in enumerate(futures):
                if future.result(60).payload[2:] != b"%d-%d" % (n, i):
                    errors.append(f"{n}-{i}")

        threads = [threading.Thread(target=ask, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    assert not errors and device.forwarded == 400


def test_dealers_are_reused_and_management_requests_pass_through(bridge, workers) -> None:
    broker, device = bridge
    workers(broker.endpoint("router"), "router")
    with Client(device.endpoints[0], "server") as client:
        for n in range(20):
            assert client.request("echo", [b"%d" % n, b""], timeout=30).frames == (b"%d" % n, b"")
        assert device.dealers == 1  # one request at a time needs one DEALER
        assert client.request("mmi.service", b"echo", timeout=30).payload == b"200"
        assert any(s["name"] == "echo" for s in client.status()["services"])


def test_silent_client_is_forgotten(bridge) -> None:
    _, device = bridge
    with Client(device.endpoints[0], "server", heartbeat_interval=1.0) as client:
        client.submit("nobody-serves-this", b"x")
        eventually(lambda: device.dealers, what="the request to be forwarded")
    # closed client: no heartbeats; after liveness x interval it is forgotten
    eventually(lambda: not device.dealers, what="the silent client's DEALER to be closed")

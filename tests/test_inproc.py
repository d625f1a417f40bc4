"""inproc:// for the server transport, which libzmq cannot carry between CLIENT and SERVER sockets."""

from __future__ import annotations

import threading

import pytest
import zmq

from generaldomo import Broker, Client, inproc
from generaldomo.io.links import ServerLink


def test_heavy_two_way_traffic_over_inproc_does_not_deadlock(brokers, workers) -> None:
    # Over a real inproc pipe this pattern halts within a few hundred messages (libzmq issue 3048).
    broker = brokers("server", ["inproc://gd-heavy"])
    for _ in range(2):
        workers("inproc://gd-heavy", "server")
    with Client("inproc://gd-heavy", "server", heartbeat_interval=0.01) as client:
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
    assert broker.endpoints == [("server", "inproc://gd-heavy")]


def test_alias_is_released_and_rebinding_works() -> None:
    context = zmq.Context.instance()
    first = ServerLink(context, ["inproc://gd-alias"])
    assert inproc.resolve("inproc://gd-alias").startswith("ipc://")
    with pytest.raises(ValueError, match="already bound"):
        ServerLink(context, ["inproc://gd-alias"])
    first.close()
    assert inproc.resolve("inproc://gd-alias") == "inproc://gd-alias"
    ServerLink(context, ["inproc://gd-alias"]).close()


def test_router_inproc_is_real_inproc() -> None:
    broker = Broker("router", ["inproc://gd-router-real"])
    try:
        assert inproc.resolve("inproc://gd-router-real") == "inproc://gd-router-real"
    finally:
        broker.stop()

"""The Worker API: heartbeats during long tasks, reconnecting, stopping."""

from __future__ import annotations

import errno
import threading
import time

import zmq

from generaldomo import Client, Worker
from generaldomo.sansio.core import Settings


def test_long_task_keeps_heartbeating(transport: str, brokers, workers, endpoint_for) -> None:
    settings = Settings(heartbeat_interval=0.05, liveness=3)
    broker = brokers(transport, [endpoint_for("tcp")], settings=settings)
    endpoint = broker.endpoint(transport, "tcp")

    def slow(payload: bytes) -> bytes:
        time.sleep(0.6)  # four expiry periods
        return payload

    workers(endpoint, transport, "slow", slow, heartbeat_interval=0.05, liveness=3)
    with Client(endpoint, transport) as client:
        assert client.request("slow", b"patience", timeout=10).payload == b"patience"
    assert broker.core.counters["workers_expired"] == 0 and broker.core.counters["reissued"] == 0


def rebind(start):
    """Start a broker on a just-released port; libzmq closes the old listener asynchronously."""
    for _ in range(100):
        try:
            return start()
        except zmq.ZMQError as error:
            if error.errno != errno.EADDRINUSE:
                raise
            time.sleep(0.05)
    raise AssertionError("the port stayed in use")


def test_worker_reconnects_to_a_broker_that_went_silent(transport: str, brokers, endpoint_for) -> None:
    first = brokers(transport, [endpoint_for("tcp")], settings=Settings(heartbeat_interval=0.05))
    endpoint = first.endpoint(transport, "tcp")
    worker = Worker(endpoint, "echo", lambda p: p, transport, heartbeat_interval=0.05, liveness=3)
    thread = threading.Thread(target=worker.serve, daemon=True)
    thread.start()
    try:
        with Client(endpoint, transport) as client:
            assert client.request("echo", b"before", timeout=10).payload == b"before"
        first.stop()
        second = rebind(lambda: brokers(transport, [endpoint], settings=Settings(heartbeat_interval=0.05)))
        with Client(endpoint, transport) as client:
            assert client.request("echo", b"after", timeout=10).payload == b"after"
        assert worker.reconnects >= 1 and len(second.core.workers) == 1
    finally:
        worker.stop()
        thread.join(10)
    assert not thread.is_alive()

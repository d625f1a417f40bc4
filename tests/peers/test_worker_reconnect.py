"""A worker that registers again on a new socket: the broker forgets its old registration at once, so no task waits
for that registration's expiry."""

from __future__ import annotations

import time

import pytest
from cut_proxy import CutProxy
from waiting import eventually

from generaldomo import Client
from generaldomo.sansio.broker.core import Settings

pytestmark = pytest.mark.pure  # runs again in env pure, on the pure-Python path

EXPIRY = 30.0  # the broker's: a task sent to a stale registration would wait this long


def test_a_task_after_a_cut_connection_is_answered_without_waiting_for_the_old_registrations_expiry(
    transport: str, brokers, workers, endpoint_for
) -> None:
    """The worker's connection is cut (no side hears of it); the worker, hearing nothing, registers again on a new
    connection. The old registration is retired at the new READY: a task sent then goes to the live one."""
    broker = brokers(transport, [endpoint_for("tcp")], settings=Settings(heartbeat_interval=0.1, liveness=300))
    with CutProxy(broker.endpoint(transport, "tcp")) as proxy:
        worker = workers(proxy.endpoint, transport, "echo", heartbeat_interval=0.1, liveness=5)
        eventually(lambda: worker.registered, what="the worker to register")
        with Client(broker.endpoint(transport, "tcp"), transport) as client:
            assert client.request("echo", b"before", timeout=30).payload == b"before"
            proxy.cut()
            eventually(lambda: worker.reconnects >= 1 and worker.registered, what="the worker to register again")
            started = time.monotonic()
            # generous, yet well under the old registration's expiry: a task given to it would wait that long
            assert client.request("echo", b"after", timeout=EXPIRY / 2).payload == b"after"
            assert time.monotonic() - started < EXPIRY / 2
        assert len(broker.core.workers) == 1
        assert broker.core.counters["workers_replaced"] >= 1
        assert broker.core.counters["workers_expired"] == 0


def test_a_worker_whose_liveness_is_shorter_than_the_brokers_heartbeat_leaves_no_stale_registrations(
    transport: str, brokers, workers, endpoint_for
) -> None:
    """A worker given other heartbeat settings than its broker's hears nothing within its liveness and registers
    again, over and over: each registration retires the one before (the worker's DISCONNECT on its old socket, or
    else its id in the new READY), so tasks go to the live one."""
    broker = brokers(transport, [endpoint_for("tcp")], settings=Settings(heartbeat_interval=3.0, liveness=10))
    endpoint = broker.endpoint(transport, "tcp")
    worker = workers(endpoint, transport, "echo", heartbeat_interval=0.1, liveness=3)  # 0.3 s of silence: gone
    eventually(lambda: worker.reconnects >= 3, what="the worker to register again a few times")
    with Client(endpoint, transport, fail_unknown=False) as client:
        started = time.monotonic()
        for n in range(5):  # a registration given a task lives 30 s: one task there would wait that long
            assert client.request("echo", b"%d" % n, timeout=EXPIRY / 2).payload == b"%d" % n
        assert time.monotonic() - started < EXPIRY / 2
    assert broker.core.counters["workers_expired"] == 0 and len(broker.core.workers) <= 2

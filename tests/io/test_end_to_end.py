"""Clients and workers through a real broker, over both transports and every endpoint scheme."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from waiting import eventually

from generaldomo import Broker, Client, Worker

pytestmark = pytest.mark.pure  # runs again in env pure, on the pure-Python path

CLIENTS = 3
WORKERS = 3
REQUESTS = 40


def tagged(name: bytes) -> Callable[[bytes], bytes]:
    return lambda payload: name + b":" + payload


def wait_for_workers(broker: Broker, count: int) -> None:
    eventually(lambda: len(broker.core.workers) >= count, what=f"{count} workers to register")


@pytest.mark.parametrize("scheme", ["tcp", "ipc", "inproc"])
@pytest.mark.parametrize("order", ["workers_first", "clients_first"])
def test_n_clients_m_workers(transport: str, scheme: str, order: str, brokers, workers, endpoint_for) -> None:
    broker = brokers(transport, [endpoint_for(scheme)])
    endpoint = broker.endpoint(transport, scheme)
    clients = [Client(endpoint, transport) for _ in range(CLIENTS)]
    start_workers = lambda: [workers(endpoint, transport, "echo", tagged(b"w%d" % n)) for n in range(WORKERS)]  # noqa: E731
    try:
        if order == "workers_first":
            start_workers()
            wait_for_workers(broker, WORKERS)
        futures = {
            (c, n): client.submit("echo", b"c%d-%d" % (c, n))
            for c, client in enumerate(clients)
            for n in range(REQUESTS)
        }
        if order == "clients_first":
            time.sleep(0.05)
            assert not any(f.done() for f in futures.values())  # queued: there is no worker yet
            start_workers()
        served_by = set()
        for (c, n), future in futures.items():
            worker, _, payload = future.result(30).payload.partition(b":")
            assert payload == b"c%d-%d" % (c, n)
            served_by.add(worker)
        assert len(served_by) > 1
    finally:
        for client in clients:
            client.close()
    assert broker.core.counters["completed"] == CLIENTS * REQUESTS
    assert not broker.core.tasks


def test_workers_and_clients_come_and_go(transport: str, brokers, endpoint_for) -> None:
    broker = brokers(transport, [endpoint_for("tcp")])
    endpoint = broker.endpoint(transport, "tcp")
    for round_ in range(3):
        worker = Worker(endpoint, "echo", tagged(b"round%d" % round_), transport)
        thread = threading.Thread(target=worker.serve, daemon=True)
        thread.start()
        with Client(endpoint, transport) as client:
            assert client.request("echo", b"x", timeout=10).payload == b"round%d:x" % round_
        worker.stop()
        thread.join(10)
    eventually(lambda: not broker.core.workers, what="every worker to say DISCONNECT on its way out")


def test_one_broker_inproc_and_tcp_at_once(transport: str, brokers, workers, endpoint_for) -> None:
    broker = brokers(transport, [endpoint_for("inproc"), endpoint_for("tcp")])
    workers(broker.endpoint(transport, "tcp"), transport)
    with Client(broker.endpoint(transport, "inproc"), transport) as client:
        assert client.request("echo", b"across", timeout=10).payload == b"across"


def test_both_transports_in_one_broker(brokers, workers, endpoint_for) -> None:
    broker = Broker("router", [endpoint_for("tcp")])
    broker.add_link("server", [endpoint_for("tcp")])
    broker.start()
    try:
        workers(broker.endpoint("router", "tcp"), "router", "upper", lambda p: p.upper())
        workers(broker.endpoint("server", "tcp"), "server", "lower", lambda p: p.lower())
        with Client(broker.endpoint("server"), "server") as s, Client(broker.endpoint("router"), "router") as r:
            assert s.request("upper", b"MiX", timeout=10).payload == b"MIX"
            assert r.request("lower", b"MiX", timeout=10).payload == b"mix"
    finally:
        broker.stop()

"""Interop with majortomo (PyPI), a Python MDP/0.2-dialect client and worker, through our broker."""

from __future__ import annotations

import threading

import majortomo
import pytest

from generaldomo import Broker, Client


def serve(endpoint: str, requests: int, partials: int = 0) -> threading.Thread:
    """A majortomo worker for 'echo' that answers ``requests`` requests (with ``partials`` partials each)."""
    ready = threading.Event()

    def run() -> None:
        worker = majortomo.Worker(endpoint, b"echo", heartbeat_interval=0.5)
        worker.connect()
        ready.set()
        try:
            for _ in range(requests):
                client, frames = worker.wait_for_request()
                for n in range(partials):
                    worker.send_reply_partial(client, [b"part%d" % n])
                worker.send_reply_final(client, [b"mt:" + frames[0], *frames[1:]])
        finally:
            worker.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(10)
    return thread


def test_majortomo_client_and_worker(brokers) -> None:
    broker = brokers("router", ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint("router", "tcp")
    worker = serve(endpoint, requests=5, partials=2)
    with majortomo.Client(endpoint) as client:
        for n in range(5):
            client.send(b"echo", b"%d" % n)
            assert client.recv_all_as_list(timeout=30) == [b"part0", b"part1", b"mt:%d" % n]
    worker.join(30)
    assert not worker.is_alive()


@pytest.fixture
def both_links():
    broker = Broker("router", ["tcp://127.0.0.1:*"])
    broker.add_link("server", ["tcp://127.0.0.1:*"])
    yield broker.start()
    broker.stop()


def test_majortomo_worker_serves_generaldomo_clients(transport, both_links) -> None:
    serve(both_links.endpoint("router"), requests=2, partials=1)
    with Client(both_links.endpoint(transport), transport) as client:
        parts = list(client.stream("echo", [b"x", b""], timeout=30))
        assert [(p.partial, p.frames) for p in parts] == [(True, (b"part0",)), (False, (b"mt:x", b""))]
        assert client.request("echo", b"y", timeout=30).payload == b"mt:y"


def test_generaldomo_worker_serves_a_majortomo_client(transport, both_links, workers) -> None:
    workers(both_links.endpoint(transport), transport)
    with majortomo.Client(both_links.endpoint("router")) as client:
        client.send(b"echo", b"a", b"")
        assert client.recv_all_as_list(timeout=30) == [b"a", b""]

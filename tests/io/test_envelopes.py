"""Envelopes on the ROUTER link: peers behind one and two real ``zmq.proxy`` ROUTER/DEALER hops are served."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator

import pytest
import zmq
from hypothesis import given
from hypothesis import strategies as st

from generaldomo import Client
from generaldomo.sansio.wire import envelope

pytestmark = pytest.mark.pure  # runs again in env pure, on the pure-Python path


class Proxy(threading.Thread):
    """``zmq.proxy_steerable``: a ROUTER frontend (bound) to a DEALER backend connected to ``upstream``."""

    def __init__(self, upstream: str) -> None:
        super().__init__(daemon=True)
        self.upstream = upstream
        self.context = zmq.Context()
        self.control = f"inproc://proxy-control-{id(self)}"
        self.bound: queue.Queue[str] = queue.Queue()

    def run(self) -> None:
        frontend, backend = self.context.socket(zmq.ROUTER), self.context.socket(zmq.DEALER)
        control = self.context.socket(zmq.PAIR)
        control.bind(self.control)
        frontend.bind("tcp://127.0.0.1:*")
        backend.connect(self.upstream)
        self.bound.put(frontend.getsockopt(zmq.LAST_ENDPOINT).decode())
        try:
            zmq.proxy_steerable(frontend, backend, None, control)
        finally:
            for sock in (frontend, backend, control):
                sock.close(0)

    def stop(self) -> None:
        stopper = self.context.socket(zmq.PAIR)
        stopper.connect(self.control)
        stopper.send(b"TERMINATE")
        stopper.close()
        self.join(10)
        self.context.term()


@pytest.fixture
def proxies() -> Iterator[Callable[[str, int], str]]:
    """``chain(endpoint, hops)``: the frontend of ``hops`` proxies in a row in front of ``endpoint``."""
    running: list[Proxy] = []

    def chain(endpoint: str, hops: int) -> str:
        for _ in range(hops):
            proxy = Proxy(endpoint)
            proxy.start()
            running.append(proxy)
            endpoint = proxy.bound.get(timeout=10)
        return endpoint

    yield chain
    for proxy in reversed(running):
        proxy.stop()


def raw(kind: int, endpoint: str) -> zmq.Socket:
    sock = zmq.Context.instance().socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 30_000)
    sock.connect(endpoint)
    return sock


@pytest.mark.parametrize("hops", [1, 2])
def test_gdp_client_and_worker_behind_proxies(brokers, workers, proxies, hops) -> None:
    broker = brokers("router", ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint("router", "tcp")
    workers(proxies(endpoint, hops), "router")
    with Client(proxies(endpoint, hops), "router") as client:
        for n in range(20):
            assert client.request("echo", b"%d" % n, timeout=30).payload == b"%d" % n
    assert broker.core.counters["malformed"] == 0
    (worker,) = broker.core.workers.values()
    assert isinstance(worker.peer.address, tuple) and len(worker.peer.address) == 1 + hops


@pytest.mark.parametrize("hops", [1, 2])
def test_mdp01_req_client_through_proxies(brokers, workers, proxies, hops) -> None:
    broker = brokers("router", ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint("router", "tcp")
    workers(endpoint, "router")
    client = raw(zmq.REQ, proxies(endpoint, hops))
    try:
        for n in range(5):
            client.send_multipart([b"MDPC01", b"echo", b"hello %d" % n])  # REQ adds the empty delimiter
            assert client.recv_multipart() == [b"MDPC01", b"echo", b"hello %d" % n]
    finally:
        client.close()


@pytest.mark.parametrize("hops", [1, 2])
def test_mdp02_client_through_proxies(brokers, workers, proxies, hops) -> None:
    broker = brokers("router", ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint("router", "tcp")
    workers(endpoint, "router")
    client = raw(zmq.DEALER, proxies(endpoint, hops))
    try:
        client.send_multipart([b"MDPC02", b"\x01", b"echo", b"two"])
        assert client.recv_multipart() == [b"MDPC02", b"\x03", b"echo", b"two"]
    finally:
        client.close()


# (ready, expected request prefix, reply prefix) of a raw MDP worker; the client address frame follows each.
MDP_WORKERS = {
    "MDP/0.1": ([b"", b"MDPW01", b"\x01", b"echo"], [b"", b"MDPW01", b"\x02"], [b"", b"MDPW01", b"\x03"]),
    "MDP/0.2": ([b"MDPW02", b"\x01", b"echo"], [b"MDPW02", b"\x02"], [b"MDPW02", b"\x04"]),
}


@pytest.mark.parametrize("hops", [1, 2])
@pytest.mark.parametrize("dialect", sorted(MDP_WORKERS))
def test_mdp_workers_behind_proxies(brokers, proxies, dialect, hops) -> None:
    ready, request, reply = MDP_WORKERS[dialect]
    broker = brokers("router", ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint("router", "tcp")
    worker = raw(zmq.DEALER, proxies(endpoint, hops))
    try:
        worker.send_multipart(ready)
        with Client(endpoint, "router") as client:
            future = client.submit("echo", b"via %d hops" % hops)
            frames = worker.recv_multipart()
            while frames[: len(request)] != request:  # heartbeats
                frames = worker.recv_multipart()
            address, body = frames[len(request)], frames[len(request) + 2 :]
            worker.send_multipart([*reply, address, b"", *body])
            assert future.result(30).payload == b"via %d hops" % hops
    finally:
        worker.close()


def test_direct_peers_keep_their_identity_as_address() -> None:
    assert envelope.split(b"id", [b"", b"MDPC01", b"echo"]) == (b"id", [b"", b"MDPC01", b"echo"])
    assert envelope.split(b"id", [b"GDPC01", b"\x01"]) == (b"id", [b"GDPC01", b"\x01"])
    garbage = [b"x"] * 3
    assert envelope.split(b"id", garbage) == (b"id", garbage)  # for the core to find malformed


hop = st.binary(min_size=1, max_size=8).filter(lambda f: f not in envelope.HEADER_FRAMES)


@given(
    st.binary(min_size=1, max_size=8),
    st.lists(hop, max_size=envelope.MAX_HOPS - 1),
    st.booleans(),
    st.sampled_from(sorted(envelope.HEADER_FRAMES)),
    st.lists(st.binary(max_size=8), max_size=4),
)
def test_split_and_join_give_back_the_message(
    identity: bytes, hops: list[bytes], delimiter: bool, header: bytes, rest: list[bytes]
) -> None:
    message = [b""] * delimiter + [header, *rest]
    address, got = envelope.split(identity, [*hops, *message])
    assert got == message
    assert [*envelope.join(address), *got] == [identity, *hops, *message]
    assert (address == identity) if not hops else (address == (identity, *hops))


def test_too_many_hops_is_left_to_the_core() -> None:
    frames = [b"hop"] * envelope.MAX_HOPS + [b"GDPC01", b"\x04"]
    assert envelope.split(b"id", frames) == (b"id", frames)

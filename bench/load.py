"""Workloads (sync round trips, pipelined window) and the client drivers they run on.

A driver sends one request (``send``) and takes the oldest outstanding reply (``recv``, which raises
``TimeoutError`` after :data:`TIMEOUT`). The loops are bounded both in count and in time.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, Protocol

import zmq

from generaldomo.sansio.broker.services.stats import nearest_rank

TIMEOUT = 10.0  # seconds to wait for any single reply


class Driver(Protocol):
    """A client that can keep several requests outstanding."""

    def send(self, payload: bytes) -> None: ...

    def recv(self) -> bytes: ...

    def idle(self) -> None:
        """Between measurements: release what must not sit idle."""

    def close(self) -> None: ...


def sync_run(driver: Driver, payload: bytes, n: int, seconds: float) -> dict[str, float]:
    """Up to ``n`` requests one at a time (for at most ``seconds``): latency percentiles and req/s."""
    _check(driver, payload)
    latencies: list[int] = []
    clock = time.perf_counter_ns
    start = clock()
    deadline = start + int(seconds * 1e9)
    while len(latencies) < n:
        t0 = clock()
        driver.send(payload)
        driver.recv()
        t1 = clock()
        latencies.append(t1 - t0)
        if t1 > deadline:
            break
    elapsed = (clock() - start) / 1e9
    ordered = sorted(latencies)
    return {
        "n": len(latencies),
        "p50_us": nearest_rank(ordered, 50) / 1e3,
        "p99_us": nearest_rank(ordered, 99) / 1e3,
        "rps": len(latencies) / elapsed,
    }


def pipelined_run(driver: Driver, payload: bytes, n: int, seconds: float, window: int) -> dict[str, float]:
    """Up to ``n`` requests with ``window`` outstanding (for at most ``seconds``): req/s."""
    _check(driver, payload)
    clock = time.perf_counter
    start = clock()
    deadline = start + seconds
    sent = done = 0
    for _ in range(min(window, n)):
        driver.send(payload)
        sent += 1
    while done < sent:
        driver.recv()
        done += 1
        if sent < n and clock() < deadline:
            driver.send(payload)
            sent += 1
    elapsed = clock() - start
    return {"n": done, "rps": done / elapsed}


def _check(driver: Driver, payload: bytes) -> None:
    """One round trip that must echo ``payload`` (also a warm-up)."""
    driver.send(payload)
    reply = driver.recv()
    if reply != payload:
        raise RuntimeError(f"echo returned {len(reply)} bytes for {len(payload)}")


def median(values: Sequence[float]) -> float:
    """Median ignoring NaN; NaN when empty."""
    clean = [v for v in values if v == v]
    return statistics.median(clean) if clean else float("nan")


# ------------------------------------------------------------------------------------------------- drivers


class GdDriver:
    """generaldomo's :class:`~generaldomo.Client` (futures), asking ``service``.

    The Client is made at the first request and closed by :meth:`idle`: an idle Client's IO thread spins (see
    bench/README.md), which would load whatever is measured next.
    """

    def __init__(self, make_client: Callable[[], Any], service: str) -> None:
        self.make_client = make_client
        self.client: Any = None
        self.service = service
        self.pending: deque[Future[Any]] = deque()

    def send(self, payload: bytes) -> None:
        if self.client is None:
            self.client = self.make_client()
        self.pending.append(self.client.submit(self.service, payload))

    def recv(self) -> bytes:
        return self.pending.popleft().result(TIMEOUT).payload

    def idle(self) -> None:
        self.pending.clear()
        if self.client is not None:
            self.client.close()
            self.client = None

    def close(self) -> None:
        self.idle()


class SocketDriver:
    """A raw DEALER or CLIENT socket talking to an echo peer (the brokerless baseline)."""

    def __init__(self, context: zmq.Context, endpoint: str, kind: str) -> None:
        self.socket = context.socket(zmq.DEALER if kind == "router" else zmq.CLIENT)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.connect(endpoint)
        self.multipart = kind == "router"

    def send(self, payload: bytes) -> None:
        if self.multipart:
            self.socket.send_multipart([payload], copy=False)
        else:
            self.socket.send(payload, copy=False)

    def recv(self) -> bytes:
        if not self.socket.poll(TIMEOUT * 1000):
            raise TimeoutError("no echo")
        return self.socket.recv_multipart()[-1] if self.multipart else self.socket.recv()

    def idle(self) -> None:
        pass

    def close(self) -> None:
        self.socket.close()


class MajortomoDriver:
    """majortomo's own client, which allows one outstanding request per client: a pool of ``size`` clients."""

    def __init__(self, endpoint: str, service: str, size: int) -> None:
        from majortomo import Client

        self.clients = [Client(endpoint) for _ in range(size)]
        for client in self.clients:
            client.connect()
        self.rotation = itertools.cycle(self.clients)
        self.busy: deque[Any] = deque()
        self.service = service.encode()

    def send(self, payload: bytes) -> None:
        client = next(self.rotation)
        client.send(self.service, payload)
        self.busy.append(client)

    def recv(self) -> bytes:
        return b"".join(self.busy.popleft().recv_all_as_list(timeout=TIMEOUT))

    def idle(self) -> None:
        pass

    def close(self) -> None:
        for client in self.clients:
            client.close()

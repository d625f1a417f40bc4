"""AsyncClient: many concurrent awaits on one loop, one IO thread per client, timeouts and streams; TypedClient and
AsyncClient's later answers (detached requests, ids, fetch) over real brokers on both transports."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from generaldomo import App, AsyncClient, Client, NotFound, Reply, RequestFailed, RequestTimeout, TypedClient
from generaldomo.peers.app import Bound

CONCURRENT = 1000


def test_a_thousand_concurrent_awaits_on_one_loop(transport: str, brokers, workers) -> None:
    broker = brokers(transport, ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint(transport, "tcp")
    for _ in range(4):
        workers(endpoint, transport, "echo")

    async def main() -> list[bytes]:
        async with AsyncClient(endpoint, transport) as client:
            threads = threading.active_count()
            calls = [client.request("echo", b"%d" % n) for n in range(CONCURRENT)]
            replies = await asyncio.wait_for(asyncio.gather(*calls), timeout=120)
            assert threading.active_count() <= threads  # no thread per call (an earlier test's may have ended)
            return [reply.payload for reply in replies]

    payloads = asyncio.run(main())
    assert payloads == [b"%d" % n for n in range(CONCURRENT)]


typed = App("async-typed")


@typed.service("double", serializer="json")
def double(value: Any) -> Any:
    return value * 2


@typed.service("countdown", serializer="json")
def countdown(n: int) -> Iterator[int]:
    yield from range(n, 0, -1)
    return "liftoff"  # type: ignore[return-value]


def test_typed_async_requests_streams_errors_and_timeouts(transport: str, brokers, workers) -> None:
    broker = brokers(transport, ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint(transport, "tcp")
    for service in typed.services:
        workers(endpoint, transport, service.name, Bound(service))
    hold = threading.Event()
    workers(endpoint, transport, "stuck", lambda payload: payload if hold.wait(30) else b"")

    async def main(shared: Client) -> None:
        client = AsyncClient(shared, serializer="json")
        assert await asyncio.gather(*(client.request("double", [n]) for n in range(3))) == [[0, 0], [1, 1], [2, 2]]
        assert [part async for part in client.stream("countdown", 3, timeout=30)] == [3, 2, 1, "liftoff"]
        with pytest.raises(RequestFailed, match="raw bytes \\(no content type\\)"):
            await AsyncClient(shared).request("double", b"raw", timeout=30)
        with pytest.raises(TimeoutError, match=r"no reply to 'stuck' within 0\.2 s"):
            await AsyncClient(shared).request("stuck", b"", timeout=0.2)
        status = await client.status()
        assert {"double", "countdown", "stuck"} <= {service["name"] for service in status["services"]}

    with Client(endpoint, transport, deadlines=False) as shared:  # no deadline: a 504 would race the timeout
        asyncio.run(main(shared))
        hold.set()


later = App("later-answers")


@later.service("triple", serializer="json")
def triple(value: Any) -> Any:
    return value * 3


@later.service("count", serializer="json")
def count(n: int) -> Iterator[int]:
    yield from range(1, n + 1)
    return "done"  # type: ignore[return-value]


@later.service("late-echo", serializer="json")
def late_echo(value: Any) -> Any:
    return value


def held(client: Client, service: str) -> None:
    """Return once the broker holds what ``client`` sent before: it answers in order (as ``--no-wait`` does)."""
    client.request("mmi.service", service.encode(), 30, fail_unknown=False)


def test_typed_and_async_clients_send_detached_and_fetch_by_id(transport: str, brokers, workers) -> None:
    """The Client's later answers (detached requests, request ids, fetch) from TypedClient and AsyncClient, with
    the same semantics and errors: a detached request outlives its client and is fetched by a new one."""
    broker = brokers(transport, ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint(transport, "tcp")
    services = {service.name: service for service in later.services}
    for name in ("triple", "count"):
        workers(endpoint, transport, name, Bound(services[name]))
    hold = threading.Event()
    workers(endpoint, transport, "slow", lambda payload: payload if hold.wait(60) else b"")
    with Client(endpoint, transport) as client:  # typed: the request outlives this client
        typed = TypedClient(client, "json")
        sent = typed.submit("triple", [1], detached=True)
        assert isinstance(sent.request_id, bytes) and sent.result(30) == [1, 1, 1]
        orphan = typed.submit("late-echo", {"n": 2}, detached=True)  # nobody serves it yet: it stays queued
        held(client, "late-echo")
    workers(endpoint, transport, "late-echo", Bound(services["late-echo"]))  # comes after its client left
    with Client(endpoint, transport) as client:
        typed = TypedClient(client, "json")
        assert typed.fetch(sent.request_id, timeout=30) == [1, 1, 1]  # the kept answer
        assert typed.fetch(orphan.request_id.hex(), timeout=60) == {"n": 2}  # served once its worker came
        assert typed.submit_fetch(sent.request_id).result(30) == [1, 1, 1]
        with pytest.raises(NotFound):
            typed.fetch(bytes(16), timeout=30)

    async def send() -> tuple[bytes, bytes]:
        async with AsyncClient(endpoint, transport, serializer="json") as client:
            parts: list[Any] = []
            future = client.submit("count", 3, on_partial=lambda part: parts.append((part, threading.current_thread())))
            assert await future == "done" and parts == [(n, threading.main_thread()) for n in (1, 2, 3)]
            detached = client.submit("triple", "ab", detached=True)
            slow = AsyncClient(client.client).submit("slow", b"later", detached=True)  # raw bytes, still running
            assert await detached == "ababab"
            held(client.client, "slow")
            return detached.request_id, slow.request_id

    async def fetch(done: bytes, running: bytes) -> None:
        async with (
            AsyncClient(endpoint, transport, serializer="json") as typed,
            AsyncClient(endpoint, transport) as raw,
        ):
            assert await typed.fetch(done, timeout=30) == "ababab"
            assert await typed.fetch(done.hex(), timeout=30) == "ababab"
            with pytest.raises(RequestTimeout, match=f"no answer to request {running.hex()} within 0.2 s"):
                await raw.fetch(running, timeout=0.2)  # still running: the wait ends, the request runs on
            hold.set()
            reply = await raw.fetch(running, timeout=60)
            assert isinstance(reply, Reply) and reply.payload == b"later" and reply.request_id == running
            with pytest.raises(NotFound):
                await raw.fetch(bytes(16), timeout=30)

    asyncio.run(fetch(*asyncio.run(send())))

"""AsyncClient: many concurrent awaits on one loop, one IO thread per client, timeouts and streams."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from generaldomo import App, AsyncClient, Client, RequestFailed
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
            assert threading.active_count() == threads  # no thread per call
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

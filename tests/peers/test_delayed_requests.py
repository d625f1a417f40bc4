"""Delayed requests through the Python clients (sync and async), over both transports, with real sockets."""

from __future__ import annotations

import asyncio
import datetime
import threading
import time

import pytest
from waiting import eventually, served

from generaldomo import AsyncClient, Client


def _recorder() -> tuple[list[tuple[bytes, float]], object]:
    ran: list[tuple[bytes, float]] = []
    lock = threading.Lock()

    def handler(payload: bytes) -> bytes:
        with lock:
            ran.append((payload, time.monotonic()))
        return payload

    return ran, handler


def test_a_delayed_request_runs_no_earlier_than_asked_and_holds_nothing_back(
    transport, brokers, workers, endpoint_for
) -> None:
    broker = brokers(transport, [endpoint_for("ipc")])
    endpoint = broker.endpoint(transport, "ipc")
    ran, handler = _recorder()
    workers(endpoint, transport, "echo", handler)
    with Client(endpoint, transport) as c:
        served(c, "echo")
        parked = c.submit("echo", b"parked", delay=3600)  # held an hour: nothing waits behind it
        sent = time.monotonic()
        soon = c.submit("echo", b"soon", delay=0.5)
        assert c.request("echo", b"now", timeout=60).payload == b"now"
        assert soon.result(60).payload == b"soon"
        assert dict(ran)[b"soon"] >= sent + 0.5  # never early (the broker rounds a delay up to a millisecond)
        service = next(s for s in c.status(service="echo")["services"] if s["name"] == "echo")
        assert service["delayed"] == 1 and b"parked" not in dict(ran)
        parked.cancel()
        eventually(lambda: c.status()["services"][0]["delayed"] == 0, timeout=30)
    assert b"parked" not in dict(ran)


def test_the_async_client_takes_a_time_and_both_clients_refuse_bad_ones(
    transport, brokers, workers, endpoint_for
) -> None:
    broker = brokers(transport, [endpoint_for("ipc")])
    endpoint = broker.endpoint(transport, "ipc")
    ran, handler = _recorder()
    workers(endpoint, transport, "echo", handler)
    with Client(endpoint, transport) as c:
        served(c, "echo")

    async def main() -> tuple[float, bytes]:
        async with AsyncClient(endpoint, transport) as c:
            sent = time.monotonic()
            when = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=0.4)
            reply = await c.submit("echo", b"at", not_before=when)
            return sent, reply.payload

    sent, body = asyncio.run(main())
    assert body == b"at" and dict(ran)[b"at"] >= sent + 0.35  # (the wall clock read once, then the monotonic)
    with Client(endpoint, transport) as c:
        for bad in ({"delay": 1, "not_before": time.time()}, {"delay": float("nan")}, {"delay": "1"},
                    {"not_before": datetime.datetime(2030, 1, 1)}):  # fmt: skip
            with pytest.raises(ValueError):
                c.submit("echo", b"x", **bad)  # type: ignore[arg-type]

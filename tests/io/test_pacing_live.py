"""Expensive requests paced per connection, and reports bounded whatever the broker holds, over real sockets
against a ``generaldomo broker`` process, both transports: an honest echo client keeps being served while one
connection sends valid but expensive requests back to back. The figure (its worst wait against its baseline)
is bench.bombs's; the bounds here are generous, far below the stalls these attacks caused."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator

import pytest
import zmq
from raw_peers import Probe, RawClient, start_broker

from generaldomo import Client
from generaldomo.sansio.broker.report import REPORTED_TENANTS
from generaldomo.sansio.wire import protocol

SERVICES = 999  # one connection may make 1,000
NAME = "\U0001f600" * 60  # 240 bytes of UTF-8 and 720 of JSON text in each service's name
PAGES = 60
STALL = 2.0  # seconds: the honest client's worst wait here (the pages in a row stalled it several seconds)


@pytest.fixture
def broker(transport: str, workers: Callable[..., object]) -> Iterator[tuple[subprocess.Popen[str], str]]:
    process, endpoint = start_broker(transport)
    try:
        workers(endpoint, transport)
        with Client(endpoint, transport) as client:
            client.request("echo", b"up", timeout=60)
        yield process, endpoint
    finally:
        process.terminate()
        process.wait(30)


def answers(attacker: RawClient, count: int) -> list[tuple[bytes, list[bytes]]]:
    """The status and body of the next ``count`` answers (each within a minute)."""
    got = []
    for _ in range(count):
        assert attacker.socket.poll(60_000), f"{len(got)} of {count} answers came"
        reply = protocol.parse_client_reply(attacker.recv())
        assert reply is not None and reply[1] is not None
        got.append((reply[1], list(reply[3])))
    return got


def test_status_pages_back_to_back_wait_their_turn_and_the_honest_client_is_served(
    broker: tuple[subprocess.Popen[str], str], transport: str
) -> None:
    process, endpoint = broker
    context = zmq.Context()
    probe = Probe(endpoint, transport)
    try:
        with RawClient(context, endpoint, transport) as attacker:
            for n in range(SERVICES):  # a request for each of 999 services nobody serves: they stay
                attacker.send(protocol.gdp_request(b"s%d" % n, f"{n}-{NAME}".encode(), [b"x"]))
            probe.start()
            query = json.dumps({"limit": 1000}).encode()
            for n in range(PAGES):
                attacker.send(protocol.gdp_request(b"p%d" % n, b"mmi.status", [query]))
            got = answers(attacker, PAGES)
        figures = probe.stop()
    finally:
        context.destroy(linger=0)

    assert figures["failures"] == 0 and figures["max"] < STALL, figures
    statuses = [status for status, _ in got]
    assert set(statuses) <= {protocol.OK, protocol.OVER_BUDGET} and protocol.OK in statuses
    refused = [body for status, body in got if status == protocol.OVER_BUDGET]
    assert refused, "forty pages in a row are beyond one connection's work per second and its waiting line"
    for body in refused:
        later = protocol.parse_retry_after(body)
        assert later is not None and 0 < later < 60, body
    pages = [json.loads(body[0]) for status, body in got if status == protocol.OK]
    assert all(page["broker"]["service_count"] >= SERVICES for page in pages)
    assert all(len(page["services"]) < SERVICES for page in pages)  # each page cut at its bytes, with a cursor
    assert all(page["next"]["services_after"] is not None for page in pages)
    assert process.poll() is None


def test_the_status_page_summarises_a_service_with_a_thousand_tenants(
    broker: tuple[subprocess.Popen[str], str], transport: str
) -> None:
    _, endpoint = broker
    with Client(endpoint, transport) as client:
        for start in range(0, 1023, 60):  # mmi.flow takes 4 KiB of JSON at a time: the tenants merge
            names = range(start, min(start + 60, 1023))
            client.flow("echo", timeout=120, tenants={f"tenant-{n:04d}": {"weight": 2} for n in names})
        report = client.status(timeout=60)
    flow = next(service for service in report["services"] if service["name"] == "echo")["flow"]
    assert flow["tenant_limits"] == 1023 and len(flow["tenants"]) == REPORTED_TENANTS
    assert len(json.dumps(report)) < 64 * 1024  # it listed every tenant's limits

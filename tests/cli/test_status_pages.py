"""Bounded status replies (issue 20 item 4): mmi.status gives the totals always and a page of services and
workers, the next pages by cursor, one service by name, the busiest first; descriptions are cut with their
length told; the CLI gathers the pages; a broker with tens of thousands of services and workers answers
small replies quickly."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable

import pytest
import zmq
from core_harness import Harness, client
from raw_peers import Probe, RawClient, start_broker

from generaldomo import Broker, Client
from generaldomo.cli.status import gather
from generaldomo.cli.status_view import render
from generaldomo.sansio.broker.core import Peer
from generaldomo.sansio.broker.report import DESCRIPTION_BYTES, MAX_PAGE, PAGE, StatusQuery, StatusReport
from generaldomo.sansio.config.settings import Settings
from generaldomo.sansio.wire import protocol


def ask(h: Harness, body: list[bytes]) -> tuple[bytes | None, bytes]:
    h.now += 1.0  # status pages are paced: a second apart, each goes at once (no tick: nobody expires)
    h.feed(client(0), protocol.gdp_request(b"s", b"mmi.status", body))
    _, status, _, payload = protocol.parse_client_reply(h.inbox[client(0)].pop())
    return status, payload[0]


def page(h: Harness, **query: object) -> StatusReport:
    status, body = ask(h, [StatusQuery(**query).to_json()] if query else [])  # type: ignore[arg-type]
    assert status == protocol.OK, body
    return StatusReport.from_json(body)


def busy_harness(services: int, workers: int) -> Harness:
    h = Harness(max_workers=None, connection_worker_share=0.5, connection_services=None)
    for n in range(services):
        h.feed(client(1), protocol.gdp_request(b"r%d" % n, b"svc-%05d" % (services - n), [b"x"]))
    for n in range(workers):
        h.ready(Peer(1, n), b"work-%d" % (n % 3))
    return h


def test_the_default_reply_has_the_totals_and_a_first_page() -> None:
    h = busy_harness(250, 250)
    report = page(h)
    assert report.broker.service_count == 253 and report.broker.worker_count == 250
    assert len(report.services) == len(report.workers) == PAGE
    assert [s.name for s in report.services] == sorted(s.name for s in report.services)  # name order
    assert report.next.services_after == report.services[-1].name and report.next.workers_after == 100


def test_the_totals_count_the_tasks_in_flight_of_every_service_not_only_the_page() -> None:
    h = Harness(max_workers=None, connection_worker_share=0.5, connection_services=None)
    for n in range(150):
        h.ready(Peer(1, n), b"run-%03d" % n)
        h.feed(client(1), protocol.gdp_request(b"r%d" % n, b"run-%03d" % n, [b"x"]))
    h.feed(client(1), protocol.gdp_request(b"waits", b"run-000", [b"x"]))
    report = page(h, limit=10)
    assert sum(s.in_flight for s in report.services) == 10
    assert report.broker.in_flight == 150 and report.broker.queued == 1


def test_pages_by_cursor_give_every_service_and_worker_once() -> None:
    h = busy_harness(250, 250)
    services: list[str] = []
    workers: list[int] = []
    query: dict[str, object] = {"limit": 60}
    for _ in range(20):
        report = page(h, **query)
        services += [s.name for s in report.services]
        workers += [w.serial for w in report.workers]
        nxt = report.next
        if nxt.services_after is None and nxt.workers_after is None:
            break
        query = {"limit": 60, "services_after": nxt.services_after or "~", "workers_after": nxt.workers_after}
    assert services == sorted({s.name for s in h.core.resolver.services()})
    assert workers == sorted(w.serial for w in h.core.workers.values())


def test_one_service_by_name_and_the_busiest_first() -> None:
    h = busy_harness(300, 30)
    report = page(h, service="work-1")
    assert [s.name for s in report.services] == ["work-1"] and {w.service for w in report.workers} == {"work-1"}
    assert len(report.workers) == 10 and report.broker.service_count == 303
    busiest = page(h, order="busy", limit=3)
    assert [s.name for s in busiest.services] == ["work-0", "work-1", "work-2"] and busiest.next.services_after is None


def test_descriptions_are_cut_with_their_length() -> None:
    h = Harness()
    description = b"echo"
    h.ready(Peer(1, 1), description)
    long = b'{"service": "x", "blob": "' + b"y" * 100_000 + b'"}'
    h.core.receive(Peer(1, 2), protocol.gdp_ready(long), h.now)
    report = page(h)
    shown = {w.description_bytes: w.description for w in report.workers}
    assert shown[len(description)] == "echo"
    if len(long) in shown:  # the default resolver takes any name
        assert len(shown[len(long)].encode()) <= DESCRIPTION_BYTES


@pytest.mark.parametrize(
    "body",
    [b"[]", b"{", b'{"limit": 0}', b'{"limit": %d}' % (MAX_PAGE + 1), b'{"limit": true}', b'{"page": 2}',
     b'{"workers_after": -1}', b'{"service": 3}', b'{"order": "size"}', b"{" + b" " * 5000 + b"}",
     b"[" * 100_000],
)  # fmt: skip
def test_bad_queries_get_400(body: bytes) -> None:
    status, text = ask(Harness(), [body])
    assert status == protocol.BAD_REQUEST and text.startswith(b"bad status query")


def test_the_reply_stays_small_however_many_services_and_workers() -> None:
    h = busy_harness(5000, 5000)
    status, body = ask(h, [])
    assert status == protocol.OK and len(body) < 400_000
    status, body = ask(h, [StatusQuery(limit=MAX_PAGE).to_json()])
    assert len(body) < 4_000_000


# ------------------------------------------------------------------------------------------- live


def test_the_cli_gathers_every_page_of_a_live_broker(brokers: Callable[..., Broker]) -> None:
    broker = brokers("router", ["tcp://127.0.0.1:*"], settings=Settings(connection_services=None))
    endpoint = broker.endpoint("router", "tcp")
    with zmq.Context() as context, RawClient(context, endpoint, "router") as raw:
        for n in range(1200):
            raw.send(protocol.gdp_request(b"r%d" % n, b"svc-%d" % n, [b"x"]))
        with Client(endpoint, "router") as c:
            deadline = time.monotonic() + 60
            while c.status()["broker"]["service_count"] < 1200 and time.monotonic() < deadline:
                time.sleep(0.1)
            report = gather(c, 30)
            assert len(report["services"]) == 1200 and len({s["name"] for s in report["services"]}) == 1200
            assert "1,200 services" in render(report, None) and "shown" not in render(report, None).split("\n")[3]
            few = gather(c, 30, most=50)
            assert len(few["services"]) == 50 and "(50 shown)" in render(few, None)
    shown = subprocess.run(
        [sys.executable, "-m", "generaldomo", "status", endpoint, "--transport", "router", "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert shown.returncode == 0 and len(json.loads(shown.stdout)["services"]) == 1200


COUNT = 5000


def test_status_of_a_broker_with_many_services_and_workers_is_small_and_quick(workers: Callable[..., object]) -> None:
    # the finding: 20,000 services and 20,000 workers made one mmi.status of 12.8 MB and 0.6 s of CPU
    # (bench.bombs measures that many; 5,000 of each here). A long heartbeat keeps the silent claimed workers;
    # the echo worker uses the broker's interval, else it presumes the broker gone after 3 of its own (7.5 s),
    # reconnects, and the probe's request may go to its old registration (a trip lost on a slow machine).
    flags = ("--held-bytes", "none", "--connection-bytes", "none", "--connection-services", "none",
             "--connection-worker-share", "0.5", "--connection-requests", "none", "--heartbeat", "60")  # fmt: skip
    process, endpoint = start_broker("router", *flags)
    try:
        workers(endpoint, "router", heartbeat_interval=60.0)
        with zmq.Context() as context, RawClient(context, endpoint, "router") as raw:
            for n in range(COUNT):
                raw.send(protocol.gdp_request(b"r%d" % n, b"svc-%05d" % n, [b"x"]))
                raw.send([b"\xffw-%05d" % n, *protocol.gdp_ready(b"work-%d" % (n % 100) + b"!" * 240)])
            with Client(endpoint, "router") as c:
                deadline = time.monotonic() + 120
                while c.status(timeout=60)["broker"]["worker_count"] < COUNT + 1 and time.monotonic() < deadline:
                    time.sleep(0.2)
                probe = Probe(endpoint, "router")
                probe.start()
                sizes = []
                for _ in range(5):
                    reply = c.request("mmi.status", [], timeout=60).payload
                    sizes.append(len(reply))
                time.sleep(0.5)
                figures = probe.stop()
        report = StatusReport.from_json(reply)
        assert report.broker.service_count == COUNT + 101 and report.broker.worker_count > COUNT
        assert max(sizes) < 1_000_000 and figures["failures"] == 0, (sizes, figures)  # about 5 KB per item at most
        assert all(len(w.description.encode()) <= DESCRIPTION_BYTES for w in report.workers)
    finally:
        process.terminate()
        process.wait(30)

"""Status pages and the metrics snapshot bounded in bytes whatever the broker holds: tenants summarised (those
listed and a count), a page cut at its byte budget with a cursor to the rest, each record's estimate at least
its JSON text."""

from __future__ import annotations

import json

from core_harness import Harness, client, worker
from hypothesis import given
from hypothesis import strategies as st

from generaldomo.io.broker import SNAPSHOT, SNAPSHOT_BYTES
from generaldomo.sansio.broker.report import (
    PAGE_BYTES,
    REPORTED_TENANTS,
    AdaptiveReport,
    BackoffReport,
    FlowReport,
    Percentiles,
    RecentReport,
    ServiceReport,
    StatusQuery,
    TenantReport,
    WorkerReport,
    as_data,
)
from generaldomo.sansio.wire import protocol

TENANTS = 1023  # the most a service's limits name besides "*"
EMOJI = "\U0001f600"  # 4 bytes of UTF-8, 12 of JSON text
SLACK = 64 * 1024  # the broker's own record, besides the pages of services and workers


def crowded(services: int) -> Harness:
    """A broker with ``services`` services, each with a queued request and limits for 1,023 tenants (names of
    4-byte characters, as long as a tenant may be) and "*"."""
    h = Harness(connection_services=100_000, connection_requests=1_000_000)
    tenants = {"*": {"weight": 2}} | {f"{n:04d}" + EMOJI * 12: {"weight": 3, "rate": 1.5} for n in range(TENANTS)}
    for n in range(services):
        name = f"service-{n:04d}-" + EMOJI * 40
        h.core.set_flow(name, h.now, tenants=tenants)
        h.feed(client(0), protocol.gdp_request(b"r%d" % n, name.encode(), [b"x"]))
    return h


def test_the_default_page_lists_a_summary_of_the_tenants_and_stays_within_its_bytes() -> None:
    h = crowded(100)
    text = h.core.report(h.now).to_json()
    assert len(text) <= PAGE_BYTES + SLACK  # it was 13.7 MB with ASCII names: every tenant of every service
    data = json.loads(text)
    assert data["services"], "a page lists at least one service"
    for service in data["services"]:
        flow = service["flow"]
        assert flow["tenant_limits"] == TENANTS + 1
        assert len(flow["tenants"]) == REPORTED_TENANTS and "*" in flow["tenants"]


def test_pages_cut_at_their_bytes_go_on_where_they_stopped() -> None:
    h = crowded(60)
    seen: list[str] = []
    query = StatusQuery(limit=1000)
    for _ in range(60):
        report = h.core.report(h.now, query)
        assert len(report.to_json()) <= PAGE_BYTES + SLACK
        seen += [service.name for service in report.services]
        if report.next.services_after is None:
            break
        query = StatusQuery(limit=1000, services_after=report.next.services_after)
    assert len(seen) == 60 and seen == sorted(set(seen))
    assert len(h.core.report(h.now, StatusQuery(limit=1000)).services) < 60  # the first page was cut


def test_the_metrics_snapshot_is_bounded_too() -> None:
    h = crowded(200)
    snapshot = h.core.report(h.now, SNAPSHOT, SNAPSHOT_BYTES)  # as the broker's loop makes it, every period
    assert len(snapshot.to_json()) <= SNAPSHOT_BYTES + SLACK  # it built 200 x 1,024 tenants' limits every second
    assert 0 < len(snapshot.services) < 200 and snapshot.broker.service_count == 200


def test_a_page_of_many_workers_is_cut_too() -> None:
    h = Harness(max_workers=10_000, connection_worker_share=0.5)
    for n in range(1000):
        h.ready(worker(n), b"w" * 255)
    report = h.core.report(h.now, StatusQuery(limit=1000))
    assert len(report.to_json()) <= PAGE_BYTES + SLACK
    assert 0 < len(report.workers) < 1000 and report.next.workers_after == report.workers[-1].serial
    rest = h.core.report(h.now, StatusQuery(limit=1000, workers_after=report.next.workers_after))
    assert rest.workers[0].serial > report.workers[-1].serial


BIG = st.one_of(st.integers(0, 2**63), st.floats(allow_nan=False, allow_infinity=False))
COUNT = st.integers(0, 2**63)
TEXT = st.text(max_size=255)
NUMBER = st.one_of(st.none(), st.floats(min_value=0, allow_nan=False, allow_infinity=False))


@given(
    name=TEXT,
    tenant_names=st.lists(st.text(min_size=1, max_size=64), max_size=REPORTED_TENANTS),
    numbers=NUMBER,
    count=COUNT,
    recent=st.integers(0, 32),
)
def test_a_service_record_is_estimated_at_least_at_its_bytes(
    name: str, tenant_names: list[str], numbers: float | None, count: int, recent: int
) -> None:
    percentiles = Percentiles(p50=numbers, p90=numbers, p99=numbers)
    limits = {"weight": 1000, "rate": numbers, "burst": 10**9, "concurrency": 10**9}
    flow = FlowReport(
        rate=numbers, burst=10**9, concurrency=10**9, in_flight=count, bytes_in_flight=2**53, in_flight_bytes=count,
        adaptive=AdaptiveReport(min=10**6, max=10**6, cap=10**6, floor=numbers, latency=numbers, changed=numbers,
                                change="increase"),
        backoff=BackoffReport(min=numbers or 1.0, max=numbers, rate=numbers, throttled=count, paused=numbers or 0.0,
                              changed=numbers, change="decrease"),
        tenants={tenant: limits for tenant in tenant_names}, tenant_limits=count,
    )  # fmt: skip
    column = [numbers or 0.0] * recent
    record = ServiceReport(
        name=name, workers=count, waiting=count, queued=count, in_flight=count, flow=flow, completed=count,
        failed=count, reissued=count, duplicates_dropped=count, expired=count, observed_rate=numbers or 0.0,
        queue_time=percentiles, service_time=percentiles, queued_bytes=count,
        recent=RecentReport(ended=column, queued=column, served=column),
        tenants=[TenantReport(name=tenant, weight=1000, queued=count, in_flight=count, held=True, dispatched=count)
                 for tenant in tenant_names],
        busy_tenants=count, throttled=count,
    )  # fmt: skip
    assert len(json.dumps(as_data(record))) <= record.estimated_bytes


@given(texts=st.lists(TEXT, min_size=4, max_size=4), count=COUNT, seen=NUMBER)
def test_a_worker_record_is_estimated_at_least_at_its_bytes(texts: list[str], count: int, seen: float | None) -> None:
    peer, description, service, host = texts
    record = WorkerReport(
        peer=peer, description=description, service=service, dialect="MDP/0.2", state="waiting", tasks_done=count,
        last_seen=seen or 0.0, host=host, pid=2**32 - 1, description_bytes=count, serial=count,
    )  # fmt: skip
    assert len(json.dumps(as_data(record))) <= record.estimated_bytes

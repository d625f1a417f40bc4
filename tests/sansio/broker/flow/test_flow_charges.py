"""Tenant limits grow only through the ledger: a flow entry a peer sets through ``mmi.flow`` is charged its
tenants' limits too (they cost about 250 bytes each, and a peer may name 1,024 per service, merged across
calls; the entry was charged 512 bytes whatever it held), so its connection's budget bounds them. Driven with
frames and a fake clock."""

from __future__ import annotations

import json
import tracemalloc

from core_harness import Harness, client

from generaldomo.sansio.broker.accounts.ledger import OVERHEAD, TENANT_LIMIT, Kind, flow_charge
from generaldomo.sansio.broker.flow.fair import KEEP_IDLE, FairQueue
from generaldomo.sansio.broker.flow.flow import FlowLimits
from generaldomo.sansio.broker.services.service import Service
from generaldomo.sansio.wire import protocol

KIB = 1024
IDLE_TENANTS = 24 * KIB  # of a service's charge (48 KiB), for its idle tenants' state: the rest, its own


def set_tenants(h: Harness, n: int, service: str, names: list[str]) -> None:
    body = json.dumps({"tenants": {name: {"weight": 2} for name in names}}).encode()
    h.feed(client(0), protocol.gdp_request(b"f%d" % n, b"mmi.flow", [service.encode(), body]))
    h.advance(2.0)  # flow changes are paced per connection: one at a time, well within the pace


def test_a_flow_entry_is_charged_its_tenants_limits() -> None:
    h = Harness(connection_bytes=None, held_bytes=None, service_idle=None)
    for call in range(20):  # 1,000 tenants, 50 a call (a call's JSON is at most 4 KiB)
        set_tenants(h, call, "svc", [f"t{call * 50 + k:04d}" for k in range(50)])
    assert [status for _, status, _ in h.replies_of(client(0))] == [b"200"] * 20
    assert len(h.core.flow_limits("svc").tenants or ()) == 1000
    charged = h.core.ledger.by_kind[Kind.FLOW]
    assert charged == OVERHEAD[Kind.FLOW] + len("svc") + 1000 * (TENANT_LIMIT + 5)


def test_tenant_limits_beyond_the_connections_budget_get_429() -> None:
    h = Harness(connection_bytes=256 * KIB, service_idle=None)
    statuses = []
    for call in range(40):  # 2,000 tenants over 2 services: far beyond 256 KiB
        set_tenants(h, call, f"svc-{call % 2}", [f"t{call * 50 + k:04d}" for k in range(50)])
        statuses.append(h.replies_of(client(0))[-1][1])
    assert b"429" in statuses and h.core.counters["refused_connection_bytes"] >= 1
    assert h.core.ledger.held((0, client(0).address)) <= 256 * KIB
    named = sum(len(h.core.flow_limits(f"svc-{n}").tenants or ()) for n in range(2))
    assert named * TENANT_LIMIT <= 256 * KIB  # what it holds, it is charged for


def test_a_tenants_limits_cost_no_more_than_they_are_charged() -> None:
    """Measured with tracemalloc: the entry's limits and the live service's copy of them, names included."""
    raw = json.dumps({f"t{n:04d}".ljust(64, "x"): {"weight": 2, "rate": 1.5, "burst": 3, "concurrency": 4}
                      for n in range(1000)})  # fmt: skip
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        limits = FlowLimits().merged({"tenants": json.loads(raw)})
        service = Service("svc")
        service.apply_flow(limits)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert limits.tenants is not None and len(limits.tenants) == 1000
    assert grown <= flow_charge("svc", limits.tenants) - OVERHEAD[Kind.FLOW], grown


def test_one_off_tenants_leave_no_more_than_their_service_is_charged() -> None:
    """Requests each with a one-off tenant name, cancelled at once, on many services: each service kept the state
    of its latest 1,024 idle tenants, charged nothing (200 services x 1,030 pairs grew the broker by 323 MiB
    with its ledger at 4.8 MiB); now it keeps KEEP_IDLE of them, within the service's charge."""
    h = Harness(service_idle=None)
    for n in range(KEEP_IDLE + 100):
        rid = b"r%d" % n
        h.feed(client(0), protocol.gdp_request(rid, b"svc", [b"x"], protocol.request_fields(tenant=f"t{n:063d}")))
        h.feed(client(0), protocol.gdp_cancel(rid))
    (service,) = list(h.core.resolver.services())
    assert not h.core.tasks and len(service.pending._tenants) <= KEEP_IDLE
    queue = FairQueue()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for n in range(KEEP_IDLE):
            job = _Job(f"{n:064d}")
            queue.append(job)
            queue.remove(job)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert len(queue._tenants) == KEEP_IDLE and grown <= IDLE_TENANTS, grown  # what the service's charge adds


class _Job:
    def __init__(self, tenant: str) -> None:
        self.tenant, self.priority, self.order = tenant, 0, 0

"""Tenant limits grow only through the ledger: a flow entry a peer sets through ``mmi.flow`` is charged its
tenants' limits too (they cost about 250 bytes each, and a peer may name 1,024 per service, merged across
calls; the entry was charged 512 bytes whatever it held), so its connection's budget bounds them. Driven with
frames and a fake clock."""

from __future__ import annotations

import json
import tracemalloc

from core_harness import Harness, client

from generaldomo.sansio import protocol
from generaldomo.sansio.flow import FlowLimits
from generaldomo.sansio.ledger import OVERHEAD, TENANT_LIMIT, Kind, flow_charge
from generaldomo.sansio.service import Service

KIB = 1024


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

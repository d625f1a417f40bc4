"""Tenant limits grow only through the ledger: a flow entry a peer sets through ``mmi.flow`` is charged its
tenants' limits too (they cost about 250 bytes each, and a peer may name 1,024 per service, merged across
calls; the entry was charged 512 bytes whatever it held), so its connection's budget bounds them. Driven with
frames and a fake clock."""

from __future__ import annotations

import gc
import json
import sys
import tracemalloc
import types

from core_harness import Harness, client, worker

from generaldomo.sansio.broker.accounts.ledger import OVERHEAD, TENANT_LIMIT, Holding, flow_charge
from generaldomo.sansio.broker.flow.fair import KEEP_IDLE
from generaldomo.sansio.broker.flow.flow import FlowLimits
from generaldomo.sansio.broker.services.service import Service
from generaldomo.sansio.wire import protocol
from generaldomo.sansio.wire.events import Dialect

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
    charged = h.core.ledger.by_kind[Holding.FLOW]
    assert charged == OVERHEAD[Holding.FLOW] + len("svc") + 1000 * (TENANT_LIMIT + 5)


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
    assert grown <= flow_charge("svc", limits.tenants) - OVERHEAD[Holding.FLOW], grown


def test_one_off_tenants_leave_no_more_than_their_service_is_charged() -> None:
    """Requests each with a one-off tenant name, cancelled at once, on a service whose statistics are full: it
    kept the state of its latest 1,024 idle tenants, charged nothing (200 services x 1,030 pairs grew the broker
    by 323 MiB with its ledger at 4.8 MiB); now it keeps KEEP_IDLE of them, and all it holds is within its charge.
    Measured as what the service reaches (the same bytes in any process, whatever other threads or tests do)."""
    h = Harness(keep_answers=0.0, service_idle=None, held_bytes=None, connection_bytes=None)
    h.ready(worker(1), b"svc")
    for _ in range(1100):  # its statistics full (as in test_ledger's services)
        h.request(client(0), b"r", b"svc", b"x")
        h.answer(worker(1), h.tasks_of(worker(1))[-1][0], b"y", b"svc")
        h.inbox.clear()
    h.feed(worker(1), protocol.worker_command(Dialect.GDP, protocol.DISCONNECT))
    for n in range(KEEP_IDLE + 100):
        rid = b"o%d" % n
        h.feed(client(0), protocol.gdp_request(rid, b"svc", [b"x"], protocol.request_fields(tenant=f"t{n:063d}")))
        h.feed(client(0), protocol.gdp_cancel(rid))
    (service,) = list(h.core.resolver.services())
    assert not h.core.tasks and len(service.pending._tenants) <= KEEP_IDLE
    assert len(service.pending._tenants) == KEEP_IDLE
    charge = h.core.ledger.by_kind[Holding.SERVICE]
    assert charge == OVERHEAD[Holding.SERVICE] + len("svc")
    held = held_bytes(service)
    assert held <= charge, held  # its idle tenants' state, its queues, statistics and flow: within its charge


def held_bytes(root: object) -> int:
    """Bytes of the objects ``root`` reaches (``sys.getsizeof`` of each, once), not counting classes, modules and
    code: what it holds, the same in any process. An instance's attributes count as a dictionary of their own
    (what CPython gives them depends on the other instances of its class, made by whatever ran before)."""
    sizes: dict[int, int] = {}
    held: list[object] = []  # alive while their ids are in sizes
    todo = [root]
    while todo:
        item = todo.pop()
        if id(item) in sizes or isinstance(item, _NOT_HELD):
            continue
        held.append(item)
        sizes[id(item)] = sys.getsizeof(item)
        if hasattr(item, "__dict__"):
            attributes = vars(item)
            held.append(attributes)
            sizes[id(attributes)] = sys.getsizeof(dict(attributes))
            todo.extend(attributes.values())
        todo.extend(gc.get_referents(item))
    return sum(sizes.values())


_NOT_HELD = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.CodeType)

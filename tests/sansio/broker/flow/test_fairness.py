"""Fair shares between tenants and priorities: the fair queue alone (stateful and property tests of its
invariants), in the sans-IO core, and end to end over real sockets."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections import Counter

import pytest
from core_harness import Harness, client, worker
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from waiting import eventually

from generaldomo import Client
from generaldomo.sansio.broker.access import Credential, Role
from generaldomo.sansio.broker.flow.fair import AGING, KEEP_IDLE, FairQueue, TenantLimits, merge_tenants
from generaldomo.sansio.broker.flow.flow import FlowLimits
from generaldomo.sansio.wire import protocol

LEVELS = protocol.MAX_PRIORITY - protocol.MIN_PRIORITY + 1


class Job:
    """A task as the fair queue sees it."""

    def __init__(self, tenant: str, priority: int = 0, serial: int = 0) -> None:
        self.tenant, self.priority, self.order, self.serial = tenant, priority, 0, serial

    def __repr__(self) -> str:
        return f"Job({self.tenant}, {self.priority}, #{self.serial})"


def dispatch(queue: FairQueue, now: float = 0.0) -> Job:
    job: Job = queue.popleft()
    queue.started(job, now)
    return job


# ------------------------------------------------------------------------------------------ the fair queue


@settings(max_examples=200, deadline=None)
@given(
    weights=st.lists(st.integers(1, 5), min_size=2, max_size=4),
    backlog=st.integers(1, 30),
    dispatches=st.integers(1, 120),
)
def test_backlogged_tenants_share_in_proportion_to_their_weights_over_any_window(
    weights: list[int], backlog: int, dispatches: int
) -> None:
    """Deficit round robin's guarantee: over any run of dispatches in which two tenants both stay backlogged,
    their dispatches divided by their weights differ by at most 2 (a turn at each end)."""
    queue = FairQueue()
    names = [f"t{n}" for n in range(len(weights))]
    queue.configure({name: TenantLimits(weight) for name, weight in zip(names, weights, strict=True)})
    queued = Counter({name: backlog * weight for name, weight in zip(names, weights, strict=True)})
    for name in names:
        for _ in range(queued[name]):
            queue.append(Job(name))
    served: list[str] = []
    for _ in range(min(dispatches, sum(queued.values()))):
        job = dispatch(queue)
        served.append(job.tenant)
        queue.stopped(job)
    weight = dict(zip(names, weights, strict=True))
    left = Counter(queued)
    backlogged_until = {}
    for n, name in enumerate(served):
        left[name] -= 1
        if left[name] == 0:
            backlogged_until[name] = n  # its last task went at n
    for start in range(len(served)):
        counts: Counter[str] = Counter()
        for end in range(start, len(served)):
            counts[served[end]] += 1
            live = [t for t in names if backlogged_until.get(t, len(served)) >= end]
            shares = [counts[t] / weight[t] for t in live]
            if len(shares) > 1:
                assert max(shares) - min(shares) <= 2, (served, start, end)


def test_a_single_request_is_not_stuck_behind_a_flood() -> None:
    queue = FairQueue()
    for n in range(10_000):
        queue.append(Job("flood", serial=n))
    queue.append(Job("light"))
    assert [dispatch(queue).tenant for _ in range(2)] == ["flood", "light"]


def test_priorities_within_a_tenant_with_aging_so_nothing_starves() -> None:
    queue = FairQueue()
    queue.append(Job("t", protocol.MIN_PRIORITY, serial=-1))
    serial = 0
    for _ in range(LEVELS * AGING + 1):  # a stream of higher priority work: the low task still gets its turn
        queue.append(Job("t", protocol.MAX_PRIORITY, serial=serial))
        serial += 1
        job = dispatch(queue)
        queue.stopped(job)
        if job.serial == -1:
            break
    else:
        pytest.fail("the lowest priority task starved")
    assert serial > (LEVELS - 2) * AGING  # and it did wait: higher ones went first


def test_per_tenant_concurrency_and_rate_hold_a_tenant_out_of_the_rotation() -> None:
    queue = FairQueue()
    queue.configure({"capped": TenantLimits(concurrency=1), "slow": TenantLimits(rate=2.0)})
    for name in ("capped", "slow", "free"):
        for n in range(3):
            queue.append(Job(name, serial=n))
    first = [dispatch(queue, 0.0) for _ in range(3)]
    assert [j.tenant for j in first] == ["capped", "slow", "free"]
    assert [dispatch(queue, 0.0).tenant for _ in range(2)] == ["free", "free"]  # the others are held
    assert not queue.ready and len(queue) == 4 and queue.next_release() == pytest.approx(0.5)
    queue.stopped(first[0])  # capped's task is done: it may go again
    assert queue.ready and dispatch(queue, 0.1).tenant == "capped" and not queue.ready
    queue.release_due(0.4)
    assert not queue.ready
    queue.release_due(0.5)
    assert dispatch(queue, 0.5).tenant == "slow"


def test_idle_tenants_are_forgotten_beyond_a_bound() -> None:
    queue = FairQueue()
    for n in range(KEEP_IDLE + 500):
        queue.append(Job(f"t{n}"))
        queue.stopped(dispatch(queue))
    assert len(queue._tenants) == KEEP_IDLE and queue.busy_tenants == 0 and not queue


def test_tenant_limits_merge_by_name_and_refuse_bad_values() -> None:
    merged = merge_tenants({"a": TenantLimits(2)}, {"b": {"weight": 3}, "a": None})
    assert merged == {"b": TenantLimits(3)}
    assert merge_tenants(merged, None) is None
    limits = FlowLimits().merged({"tenants": {"*": {"concurrency": 2}}}).merged({"tenants": {"x": {"weight": 4}}})
    assert limits.tenants == {"*": TenantLimits(concurrency=2), "x": TenantLimits(4)}
    for bad in ({"weight": 0}, {"weight": 1.5}, {"rate": -1}, {"concurrency": 0}, {"colour": 1}, [1]):
        with pytest.raises(ValueError):
            FlowLimits().merged({"tenants": {"x": bad}})
    with pytest.raises(ValueError):
        FlowLimits().merged({"tenants": {"": {"weight": 1}}})


class FairQueueMachine(RuleBasedStateMachine):
    """The fair queue under appends, put-backs, dispatches, completions, removals, limit changes and time,
    against a model of what it holds. Invariants: it holds exactly the queued tasks; a tenant never has more in
    flight than its concurrency; within a tenant, a task never goes while an older one of the same or higher
    priority waits, and the task that goes is the one of the highest priority once aged (one level per
    :data:`AGING` of its tenant's dispatches since it was queued; the older on a tie); it is ready exactly when
    a tenant that no limit holds has a task queued."""

    def __init__(self) -> None:
        super().__init__()
        self.queue = FairQueue()
        self.queued: list[Job] = []
        self.flying: list[Job] = []
        self.serial = 0
        self.now = 0.0
        self.limits: dict[str, TenantLimits] = {}
        self.dispatched: Counter[str] = Counter()
        self.arrived: dict[Job, int] = {}  # job -> its tenant's dispatch count when it was queued

    @rule(tenant=st.sampled_from(["a", "b", "c"]), priority=st.integers(protocol.MIN_PRIORITY, 2))
    def append(self, tenant: str, priority: int) -> None:
        self.serial += 1
        job = Job(tenant, priority, self.serial)
        self.queue.append(job)
        self.queued.append(job)
        self.arrived[job] = self.dispatched[tenant]

    @rule(tenant=st.sampled_from(["a", "b"]), count=st.integers(2, 12))
    def burst(self, tenant: str, count: int) -> None:
        for _ in range(count):
            self.append(tenant, 2)

    @rule(tenant=st.sampled_from(["a", "b"]), count=st.integers(2, 24))
    def stream(self, tenant: str, count: int) -> None:
        """Higher-priority work arriving as fast as it is served: what aging is for."""
        for _ in range(count):
            self.append(tenant, 2)
            if not self.queue.ready:
                break
            self.take(put_back=False)
            self.finish_oldest()

    def finish_oldest(self) -> None:
        self.queue.stopped(self.flying.pop(0))

    @precondition(lambda self: self.queue.ready)
    @rule(put_back=st.booleans())
    def take(self, put_back: bool) -> None:
        job: Job = self.queue.popleft()
        older = [j for j in self.queued if j.tenant == job.tenant and j.serial < job.serial]
        assert not [j for j in older if j.priority >= job.priority], "an older task of equal or higher priority"
        now = self.dispatched[job.tenant]
        rank = {j: (j.priority + (now - self.arrived[j]) // AGING, -j.serial) for j in self.queued}
        best = max((j for j in self.queued if j.tenant == job.tenant), key=rank.__getitem__)
        assert rank[job] == rank[best], f"{job} went before {best}, which has aged to a higher priority"
        if put_back:
            self.queue.appendleft(job)
            return
        self.queue.started(job, self.now)
        self.queued.remove(job)
        self.flying.append(job)
        self.dispatched[job.tenant] += 1
        cap = self.limits.get(job.tenant, self.limits.get("*", TenantLimits())).concurrency
        assert cap is None or sum(j.tenant == job.tenant for j in self.flying) <= cap

    @precondition(lambda self: self.flying)
    @rule(data=st.data())
    def finish(self, data: st.DataObject) -> None:
        job = self.flying.pop(data.draw(st.integers(0, len(self.flying) - 1)))
        self.queue.stopped(job)

    @precondition(lambda self: self.queued)
    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        job = self.queued.pop(data.draw(st.integers(0, len(self.queued) - 1)))
        self.queue.remove(job)

    @rule(
        tenant=st.sampled_from(["a", "b", "*"]),
        weight=st.integers(1, 3),
        concurrency=st.sampled_from([None, 1, 2]),
        rate=st.sampled_from([None, 1.0, 4.0]),
    )
    def limit(self, tenant: str, weight: int, concurrency: int | None, rate: float | None) -> None:
        if self.flying:  # a limit lowered under tasks already flying may sit below them: only with none flying
            return
        self.limits[tenant] = TenantLimits(weight, rate, None, concurrency)
        self.queue.configure(self.limits)

    @rule(seconds=st.sampled_from([0.1, 0.5, 2.0]))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds
        self.queue.release_due(self.now)

    @invariant()
    def holds_what_is_queued(self) -> None:
        assert len(self.queue) == len(self.queued) and bool(self.queue) == bool(self.queued)
        if self.queue.ready:
            assert self.queue[0] in self.queued
        assert sorted(j.serial for j in self.queue) == sorted(
            j.serial for j in self.queued if not self.queue._tenants[j.tenant].held
        )

    @invariant()
    def ready_when_a_free_tenant_waits(self) -> None:
        self.queue.release_due(self.now)
        free = set()
        for tenant in {j.tenant for j in self.queued}:
            limits = self.limits.get(tenant, self.limits.get("*", TenantLimits()))
            flying = sum(j.tenant == tenant for j in self.flying)
            if limits.concurrency is None or flying < limits.concurrency:
                free.add(tenant)
        if not free:
            assert not self.queue.ready
        if self.queue.ready:
            assert self.queue[0].tenant in free
        if free and not any(self.limits.get(t, self.limits.get("*", TenantLimits())).rate for t in free):
            assert self.queue.ready  # without rates, only concurrency holds a tenant

    @invariant()
    def a_rate_held_queue_says_when(self) -> None:
        if self.queued and not self.queue.ready and self.queue.next_release() is not None:
            assert self.queue.next_release() > self.now


TestFairQueue = FairQueueMachine.TestCase
TestFairQueue.settings = settings(max_examples=150, stateful_step_count=60, deadline=None)


# ------------------------------------------------------------------------------------------ in the core


def request(h: Harness, peer, rid: bytes, tenant: str | None = None, priority: int = 0, credential=None) -> None:
    fields = protocol.request_fields(tenant=tenant, priority=priority)
    for to, out in h.core.receive(peer, protocol.gdp_request(rid, b"echo", [rid], fields), h.now, credential):
        h.inbox[to].append(out)


def serve(h: Harness, workers: int, count: int) -> list[bytes]:
    """Let ``workers`` workers answer ``count`` tasks in turn; the request ids (the bodies) in dispatch order."""
    order: list[bytes] = []
    for n in range(workers):
        h.ready(worker(n))
    seen = {n: 0 for n in range(workers)}
    while len(order) < count:
        progressed = False
        for n in range(workers):
            tasks = h.tasks_of(worker(n))
            if len(tasks) > seen[n]:
                task_id, _, body = tasks[seen[n]]
                seen[n] += 1
                order.append(body[0])
                h.answer(worker(n), task_id, body[0])
                progressed = True
        assert progressed, "nothing was dispatched"
    return order


def test_the_core_shares_a_service_between_tenants_by_name_by_key_and_by_connection() -> None:
    h = Harness()
    for n in range(50):
        request(h, client(1), b"flood-%d" % n, tenant="big")
    request(h, client(2), b"named", tenant="small")
    request(h, client(3), b"mdp-like")  # no tenant: its connection is its own
    key = Credential("KEY", frozenset({Role.CLIENT}))
    request(h, client(4), b"keyed", tenant="big", credential=key)  # the key is the tenant, not what it says
    order = serve(h, 1, 6)
    assert order[:4] == [b"flood-0", b"named", b"mdp-like", b"keyed"]
    names = {t.name: t for t in h.core.report(h.now).services[0].tenants}
    assert order[4:] == [b"flood-1", b"flood-2"] and set(names) == {"big"}  # only the flood is left
    assert (names["big"].queued, names["big"].in_flight) == (46, 1) and h.core.report(h.now).services[
        0
    ].busy_tenants == 1


def test_weights_set_through_mmi_flow_shape_the_shares() -> None:
    h = Harness()
    h.feed(client(9), protocol.gdp_request(b"f", b"mmi.flow", [b"echo", b'{"tenants": {"gold": {"weight": 3}}}']))
    assert h.replies_of(client(9))[0][1] == protocol.OK
    for n in range(20):
        request(h, client(1), b"g%d" % n, tenant="gold")
        request(h, client(2), b"s%d" % n, tenant="silver")
    order = serve(h, 1, 16)
    assert Counter(rid[:1] for rid in order) == {b"g": 12, b"s": 4}
    flow = h.core.report(h.now).services[0].flow
    assert flow.tenants == {"gold": {"weight": 3, "rate": None, "burst": None, "concurrency": None}}


def test_a_tenant_concurrency_cap_leaves_the_workers_to_the_others() -> None:
    h = Harness()
    h.core.apply_flow(_change({"*": TenantLimits(concurrency=1)}), h.now)
    for n in range(4):
        request(h, client(1), b"a%d" % n, tenant="a")
    request(h, client(2), b"b0", tenant="b")
    for n in range(4):
        h.ready(worker(n))
    busy = [h.tasks_of(worker(n)) for n in range(4)]
    assert sorted(tasks[0][2][0] for tasks in busy if tasks) == [b"a0", b"b0"]  # two workers stay idle
    report = h.core.report(h.now).services[0]
    assert {t.name: (t.queued, t.in_flight, t.held) for t in report.tenants} == {"a": (3, 1, True), "b": (0, 1, True)}


def test_a_tenant_rate_limit_wakes_the_core_when_its_next_token_is_due() -> None:
    h = Harness()
    h.core.apply_flow(_change({"a": TenantLimits(rate=2.0)}), h.now)
    for n in range(3):
        request(h, client(1), b"a%d" % n, tenant="a")
    h.ready(worker(1))
    h.ready(worker(2))
    assert len(h.tasks_of(worker(1))) + len(h.tasks_of(worker(2))) == 1
    assert h.core.deadline() == pytest.approx(0.5)
    h.advance(0.5)
    assert len(h.tasks_of(worker(1))) + len(h.tasks_of(worker(2))) == 2


def test_priorities_order_a_tenants_requests() -> None:
    h = Harness()
    request(h, client(1), b"low", priority=-5)
    request(h, client(1), b"normal")
    request(h, client(1), b"urgent", priority=5)
    assert serve(h, 1, 3) == [b"urgent", b"normal", b"low"]


def _change(tenants: dict[str, TenantLimits]):
    from generaldomo.sansio.broker.mmi import FlowChange

    return FlowChange("echo", FlowLimits(tenants=tenants))


# ------------------------------------------------------------------------------------------ real sockets


def test_a_light_tenant_is_served_while_another_floods(transport, brokers, workers, endpoint_for) -> None:
    broker = brokers(transport, [endpoint_for("ipc")])
    endpoint = broker.endpoint(transport, "ipc")
    release = threading.Event()

    def slow(payload: bytes) -> bytes:
        release.wait(0.02)
        return payload

    workers(endpoint, transport, "echo", slow)
    with Client(endpoint, transport, tenant="flood") as heavy, Client(endpoint, transport, tenant="light") as light:
        eventually(lambda: len(broker.core.workers) == 1, what="the worker to register")
        flood = [heavy.submit("echo", b"%d" % n) for n in range(200)]
        eventually(lambda: broker.core.report(0).services[0].queued >= 150, what="the flood to queue")
        reply = light.request("echo", b"me", timeout=30)
        assert reply.payload == b"me"
        assert sum(f.done() for f in flood) < 100  # it went ahead of most of the flood
        for future in flood:
            future.result(60)


def test_the_flow_command_sets_tenant_weights(brokers, endpoint_for) -> None:
    broker = brokers("router", [endpoint_for("tcp")])
    endpoint = broker.endpoint("router", "tcp")
    command = [sys.executable, "-m", "generaldomo", "flow", "echo", "--create", "--connect", endpoint]
    out = subprocess.run(
        [*command, "--tenant", "alice=weight=3,concurrency=8", "--tenant", "*=concurrency=2"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    shown = json.loads(out)["tenants"]
    assert shown["alice"]["weight"] == 3 and shown["alice"]["concurrency"] == 8 and shown["*"]["concurrency"] == 2
    out = subprocess.run([*command, "--tenant", "alice=none"], capture_output=True, text=True, timeout=60, check=True)
    assert set(json.loads(out.stdout)["tenants"]) == {"*"}
    bad = subprocess.run([*command, "--tenant", "bob=weight=0"], capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "weight" in bad.stderr
    with Client(endpoint) as c:
        assert c.flow("echo", tenants={"*": None})["service"] == "echo"
        assert "tenants" not in c.flow("echo")


def test_the_busiest_tenants_are_in_the_metrics(brokers, workers, endpoint_for) -> None:
    from metrics_page import wait_for

    broker = brokers("router", ["tcp://127.0.0.1:*"])
    port = broker.serve_metrics(0, "127.0.0.1", period=0.05)
    endpoint = broker.endpoint("router", "tcp")
    with Client(endpoint, tenant="alice") as alice:
        alice.flow("echo", tenants={"alice": {"weight": 5}})
        queued = [alice.submit("echo", b"%d" % n) for n in range(3)]  # no worker yet: they wait
        text = wait_for(port, 'generaldomo_tenant_queued{service="echo",tenant="alice"} 3.0')
        assert 'generaldomo_tenant_weight{service="echo",tenant="alice"} 5.0' in text
        assert 'generaldomo_service_busy_tenants{service="echo"} 1.0' in text
        workers(endpoint, "router")
        assert all(f.result(30).payload for f in queued)

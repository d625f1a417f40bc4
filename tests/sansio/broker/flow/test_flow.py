"""Flow control: the token bucket and concurrency cap alone, then inside the core with a fake clock."""

from __future__ import annotations

import pytest
from core_harness import Harness, client, worker
from hypothesis import given, settings
from hypothesis import strategies as st

from generaldomo.sansio.broker.core import Peer
from generaldomo.sansio.broker.flow.flow import Flow, FlowLimits
from generaldomo.sansio.wire import protocol


def test_bucket_admits_burst_then_one_per_interval() -> None:
    flow = Flow()
    flow.configure(rate=5.0, burst=2, concurrency=None)
    admitted = []
    for step in range(101):  # one simulated second in 10 ms steps
        now = step * 0.01
        while flow.admits(now):
            flow.dispatched(now)
            admitted.append(now)
    assert admitted[:2] == [0.0, 0.0]  # the burst
    assert len(admitted) == 2 + 5  # then the rate
    assert flow.next_token(1.0) is not None


def test_concurrency_cap() -> None:
    flow = Flow()
    flow.configure(rate=None, burst=None, concurrency=2)
    for _ in range(2):
        assert flow.admits(0.0)
        flow.dispatched(0.0)
    assert not flow.admits(0.0) and flow.next_token(0.0) is None
    flow.finished()
    assert flow.admits(0.0)


@pytest.mark.parametrize("bad", [{"rate": 0}, {"rate": -1}, {"concurrency": 0}, {"burst": 0}])
def test_bad_limits_are_refused(bad: dict) -> None:
    limits = {"rate": None, "burst": None, "concurrency": None, **bad}
    with pytest.raises(ValueError):
        Flow().configure(**limits)


def run_until_idle(h: Harness, workers: list[Peer], seconds: float, step: float = 0.01) -> list[tuple[float, bytes]]:
    """Advance the clock; workers answer each task at once. Returns (dispatch time, task id) in order."""
    dispatched: list[tuple[float, bytes]] = []
    seen = {peer: 0 for peer in workers}

    def answer_new_tasks() -> None:  # tasks sent since the last look went out at h.now
        for peer in workers:
            tasks = h.tasks_of(peer)
            for task_id, _, body in tasks[seen[peer] :]:
                dispatched.append((h.now, task_id))
                h.answer(peer, task_id, body[0])
            seen[peer] = len(tasks)

    answer_new_tasks()
    for _ in range(int(seconds / step)):
        h.advance(step)
        for peer in workers:
            h.feed(peer, protocol.worker_command(protocol.Dialect.GDP, protocol.HEARTBEAT))
        answer_new_tasks()
    return dispatched


@settings(max_examples=30, deadline=None)
@given(rate=st.sampled_from([2.0, 5.0, 10.0]), burst=st.integers(1, 3), requests=st.integers(1, 25))
def test_core_rate_limit_spreads_a_burst_into_a_steady_stream(rate: float, burst: int, requests: int) -> None:
    h = Harness(heartbeat_interval=1.0, liveness=1000)
    h.core.set_flow("echo", h.now, rate=rate, burst=burst)
    pool = [worker(n) for n in range(5)]
    for peer in pool:
        h.ready(peer)
    for n in range(requests):
        h.request(client(0), b"r%d" % n)
    dispatched = run_until_idle(h, pool, seconds=requests / rate + 1.0)
    times = [t for t, _ in dispatched]
    assert len(times) == requests and len(h.replies_of(client(0))) == requests  # none lost
    for k in range(len(times)):  # never more than burst + rate * elapsed dispatches
        assert k + 1 <= burst + rate * (times[k] - times[0]) + 1e-6
    bodies = [h.core.tasks.get(task_id) for _, task_id in dispatched]
    assert bodies == [None] * requests  # all answered
    assert [r[0] for r in h.replies_of(client(0))] == [b"r%d" % n for n in range(requests)]  # FIFO


def test_core_concurrency_cap_and_reissue_counts() -> None:
    h = Harness(heartbeat_interval=1.0)
    h.core.set_flow("echo", h.now, concurrency=2)
    for n in range(4):
        h.ready(worker(n))
    for n in range(5):
        h.request(client(0), b"r%d" % n)
    busy = [p for p in map(worker, range(4)) if h.tasks_of(p)]
    assert len(busy) == 2
    h.feed(busy[0], protocol.worker_command(protocol.Dialect.GDP, protocol.DISCONNECT))  # lost: reissued
    now_busy = [p for p in map(worker, range(4)) if p in h.core.workers and h.core.workers[p].task is not None]
    assert len(now_busy) == 2  # the reissued task took the freed place, nothing more
    h.core.set_flow("echo", h.now)  # lifting the cap at run time dispatches the rest
    assert sum(1 for w in h.core.workers.values() if w.task is not None) == 3


def test_limits_set_before_a_service_exists_apply_when_it_appears() -> None:
    h = Harness()
    h.core.set_flow("later", h.now, concurrency=1)
    h.ready(worker(1), b"later")
    h.ready(worker(2), b"later")
    h.request(client(0), b"a", b"later")
    h.request(client(0), b"b", b"later")
    assert sum(1 for w in h.core.workers.values() if w.task is not None) == 1


def test_set_flow_takes_every_limit_by_keyword_and_replaces_the_limits() -> None:
    h = Harness()
    h.core.set_flow(
        "shared", h.now, rate=5, burst=2, concurrency=8, bytes_in_flight=1000, adaptive={"min": 1, "max": 4},
        tenants={"alice": {"weight": 3, "concurrency": 2}}, backoff={"min": 1, "max": 50},
    )  # fmt: skip
    limits = h.core.flow_limits("shared")
    assert (limits.rate, limits.burst, limits.concurrency, limits.bytes_in_flight) == (5, 2, 8, 1000)
    assert limits.adaptive is not None and (limits.adaptive.min, limits.adaptive.max) == (1, 4)
    alice = limits.tenants["alice"] if limits.tenants is not None else None
    assert alice is not None and (alice.weight, alice.concurrency) == (3, 2)
    assert limits.backoff is not None and (limits.backoff.min, limits.backoff.max) == (1, 50)
    h.ready(worker(1), b"shared")
    live = h.core.live_flow("shared")
    assert live is not None and live.tenants == limits.tenants and live.concurrency == 8
    h.core.set_flow("shared", h.now, concurrency=3)  # the limits not given are lifted
    assert h.core.flow_limits("shared") == FlowLimits(concurrency=3)
    with pytest.raises(ValueError, match="unknown limits"):
        h.core.set_flow("shared", h.now, concurency=3)
    with pytest.raises(ValueError, match="concurrency"):
        h.core.set_flow("shared", h.now, concurrency=0)
    with pytest.raises(TypeError):
        h.core.set_flow("shared", None, None, 3, h.now)  # type: ignore[call-arg]  # the positional form is gone
    assert h.core.flow_limits("shared") == FlowLimits(concurrency=3)  # a refused call changed nothing

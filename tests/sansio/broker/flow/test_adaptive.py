"""The adaptive concurrency cap alone, with a fake clock: its rules, its bounds, and where it settles in front of
a service whose latency rises with the tasks it runs at once; then inside the core and in mmi.flow/mmi.status."""

from __future__ import annotations

import heapq
import json

import pytest
from core_harness import Harness, client, worker
from hypothesis import given, settings
from hypothesis import strategies as st

from generaldomo.sansio.broker.flow import adaptive as adaptive_module
from generaldomo.sansio.broker.flow.adaptive import DECREASE, Adaptive, AdaptiveLimits
from generaldomo.sansio.broker.flow.flow import Flow, FlowLimits
from generaldomo.sansio.wire import protocol


def test_starts_at_the_lower_bound_and_grows_by_one_per_round_near_the_floor() -> None:
    cap = Adaptive(AdaptiveLimits(2, 5))
    assert cap.limit == 2
    now = 0.0
    for expected in (3, 4, 5, 5):
        for _ in range(cap.limit):
            cap.saturated = True
            now += 1.0
            cap.observe(now, 0.1)
        assert cap.limit == expected
    assert cap.change == "increase" and cap.floor == 0.1


def test_does_not_grow_when_demand_never_reaches_the_cap() -> None:
    cap = Adaptive(AdaptiveLimits(2, 10))
    for n in range(20):
        assert not cap.observe(float(n), 0.1)
    assert cap.limit == 2 and cap.changed is None


def test_shrinks_multiplicatively_when_latency_climbs_and_ignores_tasks_sent_before_the_change() -> None:
    cap = Adaptive(AdaptiveLimits(1, 100))
    cap.rebound(AdaptiveLimits(40, 100))
    assert cap.limit == 40  # clamped into the new bounds
    cap.rebound(AdaptiveLimits(1, 100))
    assert cap.limit == 40  # and kept there when they widen again
    cap.observe(0.0, 0.1)  # the floor
    for n in range(39):
        cap.observe(1.0 + n * 0.01, 1.0)  # ten times the floor
    assert cap.change == "decrease" and cap.cap == pytest.approx(40 * DECREASE)
    changed = cap.changed
    assert changed is not None
    for _ in range(100):  # dispatched before the change (now - seconds < changed): no new verdict
        assert not cap.observe(changed + 0.5, 1.0)
    assert cap.limit == 32


def test_the_floor_rises_only_when_latency_stays_high_at_the_lower_bound() -> None:
    cap = Adaptive(AdaptiveLimits(2, 4))
    cap.observe(0.0, 0.1)
    cap.observe(1.0, 0.5)  # a round at the lower bound, mean 0.3: three floors, and no lower cap to go to
    assert cap.floor == pytest.approx(0.3) and cap.limit == 2
    cap.saturated = True
    cap.observe(2.0, 0.3)
    cap.observe(3.0, 0.3)
    assert cap.limit == 3  # near the new floor: it grows again


@pytest.mark.parametrize("bad", [{"min": 0}, {"max": 0}, {"min": 5, "max": 4}, {"min": 1.5}, {"low": 1}, [1, 2]])
def test_bad_bounds_are_refused(bad: object) -> None:
    with pytest.raises((ValueError, TypeError)):
        FlowLimits().merged({"adaptive": bad})


@settings(max_examples=200, deadline=None)
@given(
    low=st.integers(1, 8),
    span=st.integers(0, 40),
    samples=st.lists(st.tuples(st.floats(0, 40), st.floats(0, 10), st.booleans()), min_size=1, max_size=300),
)
def test_the_cap_stays_within_its_bounds(low: int, span: int, samples: list[tuple[float, float, bool]]) -> None:
    cap = Adaptive(AdaptiveLimits(low, low + span))
    now = 0.0
    for step, seconds, saturated in samples:
        now += step
        cap.saturated = cap.saturated or saturated
        cap.observe(now, seconds)
        assert low <= cap.limit <= low + span and low <= cap.cap <= low + span
        assert cap.floor is not None


def settle(flow: Flow, cores: int, base: float, completions: int) -> list[tuple[float, int, float]]:
    """Drive ``flow`` with endless demand against a processor-sharing service of ``cores`` (a task takes
    ``base x max(1, tasks at once / cores)``, fixed when it starts); return (time, cap, latency) per answer."""
    now, running, trace = 0.0, 0, []
    done: list[tuple[float, float]] = []  # (when, service time)
    while len(trace) < completions:
        while flow.admits(now):
            running += 1
            seconds = base * max(1.0, running / cores)
            flow.dispatched(now, 0)
            heapq.heappush(done, (now + seconds, seconds))
        now, seconds = heapq.heappop(done)
        running -= 1
        flow.finished(0)
        flow.answered(now, seconds)
        assert flow.adaptive is not None
        trace.append((now, flow.adaptive.limit, seconds))
    return trace


@settings(max_examples=30, deadline=None)
@given(cores=st.integers(2, 16), base=st.sampled_from([0.01, 0.1, 1.0]), high=st.sampled_from([64, 200]))
def test_settles_where_latency_stays_near_its_floor(cores: int, base: float, high: int) -> None:
    flow = Flow()
    flow.apply(FlowLimits().merged({"adaptive": {"min": 1, "max": high}}))
    trace = settle(flow, cores, base, completions=60 * cores + 600)
    late = trace[len(trace) // 2 :]
    caps = [cap for _, cap, _ in late]
    assert cores <= min(caps) and max(caps) <= 2 * cores  # full use of the service, and not far past it
    mean = sum(s for _, _, s in late) / len(late)
    assert mean <= base * adaptive_module.SHRINK_ABOVE * (
        1 + 1e-9
    )  # near the floor (a fixed cap of high: high / cores)


def test_core_adapts_and_reports_its_state() -> None:
    h = Harness(heartbeat_interval=1.0, liveness=1000)
    h.core.set_flow("echo", h.now, adaptive=AdaptiveLimits(1, 4))
    pool = [worker(n) for n in range(6)]
    for peer in pool:
        h.ready(peer)
    for n in range(40):
        h.request(client(0), b"r%d" % n)
    for _ in range(200):  # each busy worker answers after 0.1 s of fake time
        h.advance(0.1)
        busy = [(p, w.task.id) for p, w in h.core.workers.items() if w.task is not None]
        assert len(busy) <= 4
        for peer, task_id in busy:
            h.answer(peer, task_id, b"ok")
        if not h.core.tasks:
            break
    assert len(h.replies_of(client(0))) == 40
    flow = h.core.report(h.now).service("echo").flow  # type: ignore[union-attr]
    assert flow.adaptive is not None and flow.adaptive.cap == 4 and flow.adaptive.floor == pytest.approx(0.1)
    assert (flow.adaptive.min, flow.adaptive.max, flow.adaptive.change) == (1, 4, "increase")


def test_mmi_flow_turns_adaptive_on_and_off_and_status_shows_it() -> None:
    h = Harness()
    h.feed(client(0), protocol.gdp_request(b"q1", b"mmi.flow", [b"echo", b'{"adaptive": {"min": 2, "max": 8}}']))
    shown = [json.loads(body[0]) for _, status, body in h.replies_of(client(0)) if status == b"200"]
    assert shown[-1]["adaptive"] == {"min": 2, "max": 8} and "bytes_in_flight" not in shown[-1]
    h.ready(worker(1))
    echo = h.core.report(h.now).service("echo")
    assert echo is not None and echo.flow.adaptive is not None and echo.flow.adaptive.cap == 2
    h.feed(client(0), protocol.gdp_request(b"q2", b"mmi.flow", [b"echo", b'{"adaptive": null}']))
    echo = h.core.report(h.now).service("echo")
    assert echo is not None and echo.flow.adaptive is None and h.core.flow_limits("echo").unset


def test_a_lower_fixed_cap_holds_and_does_not_make_the_adaptive_cap_grow() -> None:
    flow = Flow()
    flow.apply(FlowLimits().merged({"concurrency": 2, "adaptive": {"min": 3, "max": 10}}))
    assert flow.cap == 2
    trace = settle(flow, cores=8, base=0.1, completions=200)
    assert {cap for _, cap, _ in trace} == {3}  # demand never reached 3 in flight: no growth
    flow.apply(FlowLimits().merged({"adaptive": {"min": 3, "max": 10}}))  # the fixed cap lifted: the adaptive one alone
    assert flow.cap == 3 and flow.adaptive is not None and flow.adaptive.floor == pytest.approx(0.1)

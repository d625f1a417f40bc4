"""Backpressure from the service: workers' 429 ("slow down") answers, the adapted rate (AIMD), retry_after;
the arithmetic alone, in the sans-IO core, and end to end over real sockets."""

from __future__ import annotations

import threading

import pytest
from core_harness import Harness, client, worker
from waiting import eventually

from generaldomo import Client, Reject, Worker
from generaldomo.sansio.broker.flow.backoff import (
    DECREASE,
    MAX_RETRY_AFTER,
    MIN_REST,
    MIN_STEP,
    SHARE,
    Backoff,
    BackoffLimits,
)
from generaldomo.sansio.broker.flow.flow import FlowLimits
from generaldomo.sansio.wire import protocol

SLOW_DOWN = b"429"


def test_each_429_halves_the_rate_once_per_round_trip_and_it_grows_while_it_holds() -> None:
    backoff = Backoff()
    for n in range(40):
        backoff.dispatched(n * 0.025)  # 40 per second
    assert backoff.slow_down(1.0, 0.9, None, None) and backoff.rate == pytest.approx(40 * DECREASE, rel=0.1)
    first = backoff.rate
    assert not backoff.slow_down(1.01, 0.95, None, None)  # dispatched before that decrease: no second one
    assert backoff.slow_down(1.2, 1.1, None, None) and backoff.rate == pytest.approx(first * DECREASE)
    rate = backoff.rate
    assert not backoff.held(2.0, None)  # a spell of holding back starts
    assert backoff.held(2.5, None) and backoff.rate == pytest.approx(rate + 0.5 * max(MIN_STEP, first / 10))
    assert not backoff.held(10.0, None) and backoff.change == "increase"  # a gap: demand fell, no growth
    assert backoff.throttled == 3


def test_the_adapted_rate_keeps_within_its_bounds_and_under_a_configured_rate() -> None:
    backoff = Backoff(BackoffLimits(min=2.0, max=8.0))
    backoff.slow_down(0.0, 0.0, None, None)  # nothing measured yet: from the lower bound
    assert backoff.rate == 2.0
    for n in range(1, 200):
        backoff.held(n * 0.1, 5.0)
    assert backoff.rate == 5.0  # the configured rate is the ceiling, below max
    backoff.rebound(BackoffLimits(min=1.0, max=3.0), None)
    assert backoff.rate == 3.0
    with pytest.raises(ValueError):
        BackoffLimits(min=3.0, max=2.0)
    for bad in ({"min": 0}, {"max": -1}, {"min": True}, {"colour": 1}, [1]):
        with pytest.raises(ValueError):
            FlowLimits().merged({"backoff": bad})


def test_retry_after_is_read_strictly() -> None:
    assert protocol.parse_retry_after([b"slow", b"0.250"]) == 0.25
    for body in (
        [b"slow"],
        [b"slow", b""],
        [b"slow", b"-1"],
        [b"slow", b"1e9"],
        [b"slow", b"x" * 17],
        [b"s", b"1.2.3"],
    ):
        assert protocol.parse_retry_after(body) is None
    assert Reject(429, "slow", retry_after=0.2).frames == (b"slow", b"0.200")
    for bad in ({"status": 500, "retry_after": 1.0}, {"status": 429, "retry_after": -1.0}):
        with pytest.raises(ValueError):
            Reject(bad["status"], "x", retry_after=bad["retry_after"])  # type: ignore[arg-type]


def slow_down(h: Harness, peer, task_id: bytes, retry_after: bytes | None = None) -> None:
    body = [b"slow down"] if retry_after is None else [b"slow down", retry_after]
    h.feed(peer, protocol.gdp_ready(b"echo", (task_id, SLOW_DOWN, body)))


def test_a_429_puts_the_task_back_at_the_head_not_failed_and_not_an_attempt() -> None:
    h = Harness(max_attempts=2, heartbeat_interval=1000.0)
    h.request(client(1), b"first")
    h.request(client(1), b"second")
    h.ready(worker(1))
    for _ in range(5):  # more 429s than attempts allowed: still not a failure
        task_id, _, body = h.tasks_of(worker(1))[-1]
        assert body == (b"first",) and h.core.tasks[task_id].attempts == 1
        slow_down(h, worker(1), task_id)
        sent = len(h.tasks_of(worker(1)))
        for _ in range(100):  # the adapted rate lets the next dispatch go in time
            if len(h.tasks_of(worker(1))) > sent:
                break
            h.advance(h.core.deadline() - h.now)
    task_id, _, body = h.tasks_of(worker(1))[-1]
    assert body == (b"first",)  # the same task, at the head of the queue each time
    h.answer(worker(1), task_id, b"done")
    assert [(rid, status) for rid, status, _ in h.replies_of(client(1))] == [(b"first", protocol.OK)]
    report = h.core.report(h.now).services[0]
    assert report.throttled == 5 and report.failed == 0 and h.core.counters["throttled"] == 5
    assert report.flow.backoff is not None and report.flow.backoff.throttled == 5 and report.flow.backoff.rate


def test_retry_after_holds_back_the_worker_that_said_it_not_the_service() -> None:
    """One worker of five answers 429 with retry_after=300: it rests (at most MAX_RETRY_AFTER), and the other
    four serve every request meanwhile (they sat idle for 300 s)."""
    h = Harness(heartbeat_interval=1000.0)
    for n in range(5):
        h.ready(worker(n))
    h.request(client(1), b"a")
    (first,) = h.tasks_of(worker(0))
    slow_down(h, worker(0), first[0], b"300")
    assert h.core.deadline() == pytest.approx(MAX_RETRY_AFTER)
    for n in range(10):  # the task it sent back and every later one: to the others, at once
        if n:
            h.request(client(1), b"r%d" % n)
        busy = [w for w in range(1, 5) if h.core.workers[worker(w)].task is not None]
        assert busy, f"request {n} waits"
        for w in busy:
            task = h.core.workers[worker(w)].task
            assert task is not None
            h.answer(worker(w), task.id, b"ok")
    assert len(h.replies_of(client(1))) == 10 and len(h.tasks_of(worker(0))) == 1
    flow = h.core.report(h.now).services[0].flow
    assert flow.backoff is not None and flow.backoff.rate is None  # one worker of five: no decrease
    assert flow.backoff.paused == pytest.approx(MAX_RETRY_AFTER)
    h.advance(MAX_RETRY_AFTER)  # then it waits for tasks again
    for n in range(5):
        h.request(client(1), b"after-%d" % n)
    assert len(h.tasks_of(worker(0))) == 2 and h.core.workers[worker(0)].rests is None


def test_one_worker_alone_cannot_lower_the_rate_of_a_service_others_serve() -> None:
    """Without retry_after, fifteen 429s of one worker of five cut the adapted rate to about 2/s; a decrease now
    takes 429s from SHARE of the workers, and the rate never goes below the operator's floor (backoff min)."""
    h = Harness(heartbeat_interval=1000.0)
    for n in range(5):
        h.ready(worker(n))
    for n in range(15):
        h.request(client(1), b"r%d" % n)
        task = h.core.workers[worker(0)].task
        if task is None:  # it went to another worker: answered
            holder = next(w for w in range(5) if h.core.workers[worker(w)].task is not None)
            h.answer(worker(holder), h.core.workers[worker(holder)].task.id, b"ok")  # type: ignore[union-attr]
            continue
        slow_down(h, worker(0), task.id)
        for w in range(1, 5):
            held = h.core.workers[worker(w)].task
            if held is not None:
                h.answer(worker(w), held.id, b"ok")
        h.advance(MIN_REST)
    flow = h.core.report(h.now).services[0].flow
    assert flow.backoff is not None and flow.backoff.throttled >= 1 and flow.backoff.rate is None
    assert len(h.replies_of(client(1))) == 15 and all(status == b"200" for _, status, _ in h.replies_of(client(1)))
    assert SHARE == 0.5
    h.core.set_flow("echo", h.now, backoff={"min": 3.0})
    for round_ in range(6):  # three workers of five say it, again and again: the rate falls, to the floor
        for w in range(3):
            h.request(client(2), b"s%d-%d" % (round_, w))
        for w in range(5):
            held = h.core.workers[worker(w)].task
            if held is not None:
                slow_down(h, worker(w), held.id)
        h.advance(1.0)
    backoff = h.core.report(h.now).services[0].flow.backoff
    assert backoff is not None and backoff.rate is not None and backoff.rate >= 3.0 and backoff.change


def test_the_service_converges_near_a_hidden_limit_without_a_configured_rate() -> None:
    """A simulated remote API that takes LIMIT calls per second and answers 429 beyond: the dispatch rate the
    broker settles on is near LIMIT (AIMD's sawtooth between half of it and it) and 429s become rare."""
    limit, workers, seconds = 20.0, 8, 60.0
    h = Harness(heartbeat_interval=1000.0)
    served: list[float] = []
    for n in range(2000):
        h.request(client(1), b"r%d" % n)
    for n in range(workers):
        h.ready(worker(n))
    calls: list[float] = []
    seen = {n: 0 for n in range(workers)}
    step = 0.005
    while h.now < seconds:
        for n in range(workers):
            tasks = h.tasks_of(worker(n))
            while len(tasks) > seen[n]:
                task_id = tasks[seen[n]][0]
                seen[n] += 1
                calls.append(h.now)
                recent = [t for t in calls if t > h.now - 1.0]
                if len(recent) > limit:
                    slow_down(h, worker(n), task_id)
                else:
                    served.append(h.now)
                    h.answer(worker(n), task_id, b"ok")
                tasks = h.tasks_of(worker(n))
        h.advance(step)
    late = [t for t in served if t > seconds / 2]
    rate = len(late) / (seconds / 2)
    throttled = h.core.counters["throttled"]
    assert 0.5 * limit <= rate <= limit and throttled < len(served) / 4, (rate, throttled, len(served))
    flow = h.core.report(h.now).services[0].flow
    assert flow.backoff is not None and flow.backoff.rate is not None and flow.backoff.rate <= 2 * limit
    assert flow.rate is None  # nothing was configured


def test_an_mdp_worker_cannot_say_slow_down() -> None:
    h = Harness()
    h.request(client(1), b"r")
    h.feed(worker(1), [b"", b"MDPW01", b"\x01", b"echo"])
    task_id = next(frames for frames in h.inbox[worker(1)] if len(frames) > 3)[3]
    h.feed(worker(1), [b"", b"MDPW01", b"\x03", task_id, b"", b"429", b"a payload that starts with 429"])
    assert [status for _, status, _ in h.replies_of(client(1))] == [protocol.OK]


# ------------------------------------------------------------------------------------------ real sockets


def test_a_worker_that_says_slow_down_gets_the_task_again_and_the_client_its_answer(
    transport, brokers, endpoint_for
) -> None:
    broker = brokers(transport, [endpoint_for("ipc")])
    endpoint = broker.endpoint(transport, "ipc")
    calls = {"count": 0}
    lock = threading.Lock()

    def limited(payload: bytes) -> bytes:
        with lock:
            calls["count"] += 1
            first = calls["count"] <= 2
        if first:
            raise Reject(429, "the remote API says slow down", retry_after=0.3)
        return payload

    worker_ = Worker(endpoint, "api", limited, transport)
    thread = threading.Thread(target=worker_.serve, daemon=True)
    thread.start()
    try:
        with Client(endpoint, transport) as c:
            assert c.request("api", b"x", timeout=30).payload == b"x"
            flow = c.flow("api")
            report = c.status()
        service = next(s for s in report["services"] if s["name"] == "api")
        assert service["throttled"] == 2 and service["failed"] == 0
        assert service["flow"]["backoff"]["throttled"] == 2 and service["flow"]["backoff"]["rate"] > 0
        assert "backoff" not in flow  # the bounds are the defaults
        with Client(endpoint, transport) as c:
            bounds = c.flow("api", backoff={"min": 1, "max": 5})["backoff"]
        assert bounds == {"min": 1, "max": 5}
        eventually(lambda: broker.core.report(0).services[0].flow.backoff.max == 5, what="the new bounds")
    finally:
        worker_.stop()
        thread.join(30)

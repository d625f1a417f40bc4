"""Delayed requests (``not_before``) in the sans-IO core, its timer heap and the client's session; deadline-aware
dispatch (the service-time estimate and the early ``504``)."""

from __future__ import annotations

import pytest
from core_harness import Harness, client, worker

from generaldomo.sansio.broker.core.expiry import UNREACHABLE
from generaldomo.sansio.broker.services.delayed import COMPACT_AFTER, Delayed
from generaldomo.sansio.broker.services.stats import ServiceStats
from generaldomo.sansio.peer.session import ClientSession
from generaldomo.sansio.wire import fields as fields_module
from generaldomo.sansio.wire import protocol


def request(h: Harness, rid: bytes, delay: float | None = None, deadline: float | None = None) -> None:
    frame = protocol.request_fields(deadline, not_before=delay)
    h.feed(client(1), protocol.gdp_request(rid, b"echo", [rid], frame))


def dispatched(h: Harness, w: int = 1) -> list[bytes]:
    return [body[0] for _, _, body in h.tasks_of(worker(w))]


def tick_through(h: Harness, until: float) -> None:
    """Tick at every time the core asks for, up to ``until`` (as the IO loop does)."""
    for _ in range(1000):
        when = h.core.deadline()
        if when is None or when > until:
            break
        h.advance(max(when - h.now, 0.0))
    h.advance(until - h.now)


def test_the_field_round_trips_rounded_up_clamped_and_left_out_at_zero() -> None:
    frame = protocol.request_fields(not_before=1.5)
    assert frame == bytes((protocol.FIELD_NOT_BEFORE, 4)) + (1500).to_bytes(4, "big")
    assert protocol.parse_fields(frame)[:5] == (None, None, 0, 0, 1.5)
    assert protocol.request_fields(not_before=0.0001) == bytes((protocol.FIELD_NOT_BEFORE, 4, 0, 0, 0, 1))
    assert protocol.request_fields(not_before=1e12)[2:] == b"\xff\xff\xff\xff"  # clamped to not_before_ms
    assert protocol.request_fields(not_before=0) == protocol.request_fields(not_before=-3) == b""
    with pytest.raises(ValueError):
        protocol.request_fields(not_before=float("nan"))
    assert isinstance(protocol.parse_fields(bytes((protocol.FIELD_NOT_BEFORE, 2, 0, 1))), str)


def test_every_field_tag_is_distinct() -> None:
    tags = {name: value for name, value in vars(fields_module).items() if name.startswith("FIELD_")}
    assert len(set(tags.values())) == len(tags), tags


def test_a_delayed_request_is_held_without_holding_others_back_and_dispatched_at_its_time() -> None:
    h = Harness()
    h.ready(worker(1))
    request(h, b"late", delay=5.0)
    request(h, b"now")
    assert dispatched(h) == [b"now"]  # the delayed one is not in the way
    h.answer(worker(1), h.tasks_of(worker(1))[-1][0], b"x")
    assert h.core.counters.delayed == 1
    assert h.core.deadline() is not None and h.core.deadline() <= 5.0  # type: ignore[operator]
    tick_through(h, 4.999)
    assert dispatched(h) == [b"now"]  # never early
    tick_through(h, 5.0)
    assert dispatched(h) == [b"now", b"late"]


def test_held_tasks_leave_in_time_order_and_a_worker_that_comes_later_takes_them() -> None:
    h = Harness()
    for rid, delay in ((b"c", 3.0), (b"a", 1.0), (b"b", 2.0)):
        request(h, rid, delay=delay)
    tick_through(h, 10.0)  # due, but no worker yet: queued in time order
    report = next(s for s in h.core.report(h.now).services if s.name == "echo")
    assert report.queued == 3 and report.delayed == 0
    for n in (1, 2, 3):
        h.ready(worker(n))
    assert [dispatched(h, n) for n in (1, 2, 3)] == [[b"a"], [b"b"], [b"c"]]


def test_a_held_task_is_cancelled_or_expired_like_a_queued_one() -> None:
    h = Harness()
    request(h, b"cancel", delay=10.0)
    request(h, b"never", delay=10.0, deadline=2.0)  # its deadline comes before its time: 504 at once
    request(h, b"expire", delay=10.0, deadline=12.0)
    h.feed(client(1), protocol.gdp_cancel(b"cancel"))
    report = next(s for s in h.core.report(h.now).services if s.name == "echo")
    assert report.delayed == 1
    assert [(rid, status) for rid, status, _ in h.replies_of(client(1))] == [(b"never", protocol.EXPIRED)]
    tick_through(h, 12.5)
    assert [rid for rid, status, _ in h.replies_of(client(1)) if status == protocol.EXPIRED] == [b"never", b"expire"]
    service = next(s for s in h.core.resolver.services() if s.name == "echo")
    assert not h.core.tasks and not service.delayed and not service.pending
    h.ready(worker(1))
    tick_through(h, 14.0)
    assert dispatched(h) == []  # none came back


def test_the_queue_timeout_counts_from_the_time_it_was_held_until() -> None:
    h = Harness(queue_timeout=3.0)
    request(h, b"late", delay=5.0)
    tick_through(h, 7.0)  # held 5 s, then queued 2 s: within the queue timeout
    assert h.replies_of(client(1)) == []
    tick_through(h, 8.0 + 2 * h.core.settings.heartbeat_interval)  # the queue timeout is checked each sweep
    assert [status for _, status, _ in h.replies_of(client(1))] == [protocol.EXPIRED]


def test_a_held_task_is_charged_like_a_queued_one() -> None:
    h = Harness(connection_requests=2)
    request(h, b"a", delay=60.0)
    request(h, b"b", delay=60.0)
    request(h, b"c", delay=60.0)
    assert [(rid, status) for rid, status, _ in h.replies_of(client(1))] == [(b"c", protocol.OVER_BUDGET)]
    assert h.core.ledger.total > 0


def test_the_timer_heap_skips_and_compacts_what_left_early() -> None:
    delayed = Delayed()
    tasks = [object() for _ in range(4 * COMPACT_AFTER)]
    for n, task in enumerate(tasks):
        delayed.hold(task, float(n))
    for task in tasks[: 3 * COMPACT_AFTER]:
        assert delayed.remove(task)
    assert not delayed.remove(tasks[0])
    assert delayed.slots <= 2 * len(delayed) + COMPACT_AFTER
    assert delayed.next_due() == float(3 * COMPACT_AFTER)
    rest = delayed.discard({tasks[-1], tasks[0]})
    assert rest == {tasks[0]} and len(delayed) == COMPACT_AFTER - 1
    assert delayed.due(float(4 * COMPACT_AFTER)) == tasks[3 * COMPACT_AFTER : -1]
    assert not delayed and delayed.next_due() is None


def test_a_client_sends_the_delay_then_left_when_it_sends_a_request_again() -> None:
    session: ClientSession[str] = ClientSession(now=0.0)
    frames = session.submit(b"r1", b"echo", [b"x"], "t", 0.0, not_before=10.0)
    assert protocol.parse_fields(frames[4])[:5] == (None, None, 0, 0, 10.0)
    resent = session._resend(b"r1", session.outstanding[b"r1"], 4.0)
    assert protocol.parse_fields(resent.frames[4])[:5] == (None, None, 0, 0, 6.0)
    resent = session._resend(b"r1", session.outstanding[b"r1"], 12.0)
    assert protocol.parse_fields(resent.frames[4])[:5] == (None, None, 0, 0, None)  # due: at once


# ---------------------------------------------------------------------------------------------------- deadline-aware


def train(h: Harness, n: int, served: float) -> None:
    """Answer ``n`` tasks of ``echo`` at worker 1, each after ``served`` seconds."""
    for i in range(n):
        request(h, b"train-%d" % i)
        task_id = h.tasks_of(worker(1))[-1][0]
        h.advance(served)
        h.answer(worker(1), task_id, b"ok")


def early(h: Harness) -> list[bytes]:
    return [
        rid
        for rid, status, body in h.replies_of(client(1))
        if status == protocol.EXPIRED and UNREACHABLE in body[0].decode()
    ]


def test_a_task_that_cannot_make_its_deadline_is_answered_504_at_once_once_the_estimate_is_learnt() -> None:
    h = Harness()
    h.ready(worker(1))
    train(h, 7, 1.0)
    request(h, b"tight-early", deadline=0.5)  # 7 answered: no estimate used yet
    assert dispatched(h)[-1] == b"tight-early" and early(h) == []
    h.answer(worker(1), h.tasks_of(worker(1))[-1][0], b"ok")  # (answered at once: 0 s, the 8th service time)
    estimate = next(s for s in h.core.report(h.now).services if s.name == "echo").service_time_estimate
    assert estimate is not None and 0.8 < estimate < 1.0
    request(h, b"tight", deadline=0.5)
    request(h, b"delayed-past", delay=3.0, deadline=3.5)  # its not_before leaves less than the estimate
    request(h, b"roomy", deadline=5.0)
    assert early(h) == [b"tight", b"delayed-past"] and dispatched(h)[-1] == b"roomy"
    assert h.core.counters.deadline_unreachable == 2
    assert next(s for s in h.core.report(h.now).services if s.name == "echo").service_time_estimate < estimate
    # (eased: "roomy" was not in flight yet when the two were turned away)


def test_a_dispatch_answers_a_task_whose_time_left_ran_below_the_estimate_while_it_queued() -> None:
    h = Harness()
    h.ready(worker(1))
    train(h, 8, 1.0)
    request(h, b"busy")
    request(h, b"waits", deadline=3.0)
    request(h, b"next", deadline=60.0)
    h.advance(2.5)  # "waits" has 0.5 s left when the worker comes free: less than the 1 s estimate
    h.answer(worker(1), h.tasks_of(worker(1))[-1][0], b"ok")
    assert early(h) == [b"waits"] and dispatched(h)[-2:] == [b"busy", b"next"]


def test_off_every_task_is_dispatched_while_its_deadline_has_not_passed() -> None:
    h = Harness(deadline_estimate_after=None)  # type: ignore[arg-type]
    h.ready(worker(1))
    train(h, 20, 1.0)
    request(h, b"tight", deadline=0.5)
    assert early(h) == [] and dispatched(h)[-1] == b"tight"
    request(h, b"never", delay=2.0, deadline=1.0)  # never dispatchable: its not_before is after its deadline
    assert [rid for rid, status, _ in h.replies_of(client(1)) if status == protocol.EXPIRED] == [b"never"]


def test_the_estimate_eases_while_it_turns_tasks_away() -> None:
    stats = ServiceStats()
    for _ in range(8):
        stats.record(0.0, 1.0, 0.0)
    assert stats.ahead(8) == stats.estimate == 1.0 and stats.ahead(9) == 0.0 and stats.ahead(None) == 0.0
    stats.turned_away(in_flight=1)  # an answer will correct it
    assert stats.ahead(8) == 1.0
    for _ in range(35):
        stats.turned_away(in_flight=0)
    assert 0.49 < stats.ahead(8) < 0.5

"""Deadlines: a request's deadline in the sans-IO core, the peers' sessions, and end to end over real sockets."""

from __future__ import annotations

import threading
import time

import pytest
from core_harness import Harness, client, worker
from waiting import eventually

from generaldomo import App, Client, RequestExpired
from generaldomo.peers.task import TaskContext, takes_task
from generaldomo.sansio.broker.deadlines import COMPACT_AFTER, Deadlines
from generaldomo.sansio.broker.states import TaskState
from generaldomo.sansio.peer.session import CancelTask, ClientSession, RunTask, WorkerSession
from generaldomo.sansio.wire import protocol

MODERN = protocol.worker_info(None, 1)  # the peer info of a worker that understands fields and CANCEL


def request(h: Harness, rid: bytes, deadline: float | None, service: bytes = b"echo") -> None:
    fields = b"" if deadline is None else protocol.request_fields(deadline)
    h.feed(client(1), protocol.gdp_request(rid, service, [rid], fields))


def statuses(h: Harness) -> dict[bytes, bytes | None]:
    return {rid: status for rid, status, _ in h.replies_of(client(1))}


def advance_to_deadline(h: Harness, target: float) -> None:
    """Tick as the IO loop would, at each time the core asks for, up to ``target``, which must be one of them."""
    for _ in range(100):
        when = h.core.deadline()
        assert when is not None and when <= target
        h.advance(when - h.now)
        if h.now == target:
            return
    raise AssertionError("the core never asked for a tick at the deadline")


def test_fields_round_trip_and_bad_ones_are_malformed() -> None:
    frame = protocol.request_fields(1.5, "alice", -3)
    assert protocol.parse_fields(frame)[:5] == (1.5, "alice", -3, 0, None)
    assert protocol.parse_fields(b"")[:5] == (None, None, 0, 0, None)
    assert protocol.parse_fields(b"\x09\x02ab" + frame)[:5] == (1.5, "alice", -3, 0, None)  # an unknown tag is skipped
    for bad in (frame + frame[:6], frame[:-1], b"\x02\x01\x09", b"\x03\x01\x07", b"\x01\x02ab", b"\x03\x02\xff\xfe"):
        assert isinstance(protocol.parse_fields(bad), str)
        assert isinstance(protocol.parse(protocol.gdp_request(b"r", b"echo", [], bad)), protocol.Malformed)
    assert protocol.request_fields(10**9) == b"\x01\x04\xff\xff\xff\xff"  # clamped, never an overflow
    assert protocol.request_fields(-1.0) == b"\x01\x04\x00\x00\x00\x00"
    for kwargs in ({"priority": 6}, {"priority": True}, {"tenant": ""}, {"tenant": "a\nb"}, {"tenant": "x" * 65}):
        with pytest.raises(ValueError):
            protocol.request_fields(**kwargs)  # type: ignore[arg-type]


def test_a_queued_request_is_answered_504_at_its_deadline_and_never_dispatched() -> None:
    h = Harness()
    request(h, b"soon", 2.0)
    request(h, b"later", None)
    h.advance(1.9)
    assert statuses(h) == {}
    advance_to_deadline(h, 2.0)
    assert statuses(h) == {b"soon": protocol.EXPIRED}
    h.ready(worker(1))
    assert [body for _, _, body in h.tasks_of(worker(1))] == [(b"later",)]
    assert h.core.counters["past_deadline"] == 1 and h.core.report(h.now).services[0].expired == 1


def test_a_deadline_already_past_is_answered_at_once() -> None:
    h = Harness()
    h.ready(worker(1))
    request(h, b"late", 0.0)
    assert statuses(h) == {b"late": protocol.EXPIRED} and not h.tasks_of(worker(1)) and not h.core.tasks


def test_a_task_whose_deadline_passed_before_a_worker_came_is_not_dispatched_even_without_a_tick() -> None:
    h = Harness()
    request(h, b"stale", 1.0)
    request(h, b"fresh", 10.0)
    h.now = 5.0  # the IO loop has not ticked yet when the worker's READY comes
    h.ready(worker(1))
    assert [body for _, _, body in h.tasks_of(worker(1))] == [(b"fresh",)]
    assert statuses(h) == {b"stale": protocol.EXPIRED}


def test_a_reissued_task_keeps_its_deadline() -> None:
    h = Harness()
    h.ready(worker(1))
    request(h, b"r", 5.0)
    h.advance(3.0)
    h.feed(worker(1), protocol.worker_command(protocol.Dialect.GDP, protocol.DISCONNECT))  # lost: reissued
    assert statuses(h) == {}
    advance_to_deadline(h, 5.0)
    assert statuses(h) == {b"r": protocol.EXPIRED}
    h.ready(worker(2))
    assert not h.tasks_of(worker(2))


def test_workers_that_understand_fields_get_the_time_left_and_others_the_old_request() -> None:
    h = Harness()
    h.feed(worker(1), protocol.gdp_ready(b"echo", info=MODERN))
    h.ready(worker(2))
    request(h, b"a", 8.0)
    request(h, b"b", 8.0)
    request(h, b"c", None)
    modern, old = h.inbox[worker(1)], h.inbox[worker(2)]
    assert modern[0][1] == b"\x07" and protocol.parse_fields(modern[0][4])[:5] == (8.0, None, 0, 0, None)
    assert old[0][1] == b"\x02" and old[0][3:] == [b"echo", b"b"]
    h.answer(worker(1), h.tasks_of(worker(1))[0][0], b"a!")
    assert h.inbox[worker(1)][-1][1] == b"\x02"  # no deadline: the plain REQUEST


def test_a_running_task_past_its_deadline_is_answered_and_its_worker_told() -> None:
    h = Harness()
    h.feed(worker(1), protocol.gdp_ready(b"echo", info=MODERN))
    h.ready(worker(2))
    request(h, b"slow", 3.0)
    request(h, b"old-worker", 3.0)
    (task_id, _, _), (old_id, _, _) = h.tasks_of(worker(1))[0], h.tasks_of(worker(2))[0]
    advance_to_deadline(h, 3.0)
    assert statuses(h) == {b"slow": protocol.EXPIRED, b"old-worker": protocol.EXPIRED}
    assert h.inbox[worker(1)][-1] == protocol.worker_cancel(task_id)
    assert protocol.worker_cancel(old_id) not in h.inbox[worker(2)]  # an old worker cannot understand it
    assert h.core.tasks[task_id].state is TaskState.CANCELLED
    h.answer(worker(1), task_id, b"too late")
    h.answer(worker(2), old_id, b"too late")
    assert [status for _, status, _ in h.replies_of(client(1))] == [protocol.EXPIRED] * 2  # results dropped
    request(h, b"next", None)
    assert len(h.tasks_of(worker(1))) + len(h.tasks_of(worker(2))) == 3  # both serve again
    h.feed(client(1), protocol.gdp_client_heartbeat(ids=[b"slow"]))  # a re-ask gets the kept 504
    assert [status for rid, status, _ in h.replies_of(client(1)) if rid == b"slow"] == [protocol.EXPIRED] * 2


def test_a_cancel_is_passed_on_to_a_worker_that_understands_it() -> None:
    h = Harness()
    h.feed(worker(1), protocol.gdp_ready(b"echo", info=MODERN))
    request(h, b"r", None)
    task_id = h.tasks_of(worker(1))[0][0]
    h.feed(client(1), protocol.gdp_cancel(b"r"))
    assert h.inbox[worker(1)][-1] == protocol.worker_cancel(task_id)


def test_the_deadline_heap_forgets_answered_tasks_in_bounded_memory() -> None:
    h = Harness()
    h.ready(worker(1))
    for n in range(10 * COMPACT_AFTER):
        request(h, b"r%d" % n, 3600.0)
        h.answer(worker(1), h.tasks_of(worker(1))[-1][0], b"ok")
    heap = h.core._expiry._deadlines
    assert len(heap) == 0 and heap.slots <= 2 * COMPACT_AFTER + 2
    assert h.core.deadline() == h.core._next_sweep  # nothing left to expire


def test_deadlines_yields_due_tasks_soonest_first_and_skips_finished_ones() -> None:
    done: set[str] = set()
    heap: Deadlines[str] = Deadlines(lambda task: task in done)
    for when, task in ((3.0, "c"), (1.0, "a"), (2.0, "b")):
        heap.add(when, task)
    done.add("a")
    heap.forget()
    assert heap.soonest() == 2.0
    assert heap.due(2.5) == ["b"] and heap.due(2.5) == [] and heap.soonest() == 3.0


def test_the_client_session_sends_the_time_left_when_it_sends_again() -> None:
    session: ClientSession[None] = ClientSession(now=0.0)
    frames = session.submit(b"r", b"echo", [b"x"], None, 0.0, deadline=10.0, tenant="t", priority=2)
    assert frames[1] == b"\x06" and protocol.parse_fields(frames[4])[:5] == (10.0, "t", 2, 0, None)
    resent = session._resend(b"r", session.outstanding[b"r"], 4.0)
    assert protocol.parse_fields(resent.frames[4])[:5] == (6.0, "t", 2, 0, None) and resent.frames[5:] == [b"x"]
    assert session.submit(b"s", b"echo", [b"x"], None, 0.0)[1] == b"\x01"  # no fields: the plain REQUEST


def test_the_worker_session_turns_the_time_left_into_a_deadline_and_passes_a_cancel_on() -> None:
    session = WorkerSession(b"echo", now=0.0)
    session.start()
    (task,) = session.receive(
        protocol.worker_request(protocol.Dialect.GDP, b"t", b"echo", [b"x"], b"\x01\x04\x00\x00\x07\xd0"), 100.0
    )
    assert task == RunTask(b"t", b"echo", (b"x",), 102.0)
    assert session.receive(protocol.worker_cancel(b"other"), 100.5) == []
    assert session.receive(protocol.worker_cancel(b"t"), 100.5) == [CancelTask(b"t")]


def test_which_handlers_take_the_task() -> None:
    assert takes_task(lambda payload, task: b"")
    assert not takes_task(lambda payload: b"")
    assert not takes_task(lambda payload, scale=2: b"")  # a second parameter with a default is the user's
    assert not takes_task(len)


# ------------------------------------------------------------------------------------------ real sockets


def test_a_request_nobody_serves_in_time_is_answered_504_by_the_broker(brokers, endpoint_for) -> None:
    broker = brokers("router", [endpoint_for("tcp")])
    with Client(broker.endpoint("router", "tcp")) as c:
        future = c.submit("nobody-serves-this", b"x", deadline=0.5)
        with pytest.raises(RequestExpired, match="deadline"):
            future.result(30)
    assert broker.core.counters["past_deadline"] == 1


def test_handlers_read_the_time_left_and_stop_when_cancelled(transport, brokers, workers, endpoint_for) -> None:
    broker = brokers(transport, [endpoint_for("ipc")])
    endpoint = broker.endpoint(transport, "ipc")
    seen: list[float | None] = []
    stopped = threading.Event()

    def wait_for_cancel(payload: bytes, task: TaskContext) -> bytes:
        seen.append(task.time_left())
        if task.wait_cancelled(60):
            stopped.set()
        return b"done"

    workers(endpoint, transport, "slow", wait_for_cancel)
    with Client(endpoint, transport) as c:
        eventually(lambda: len(broker.core.workers) == 1, what="the worker to register")
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            c.request("slow", b"x", timeout=1.0)  # the timeout is the deadline: the worker hears of it
        eventually(stopped.is_set, what="the handler to be told its task is cancelled")
        assert time.monotonic() - started < 30
        assert seen and seen[0] is not None and 0 < seen[0] <= 1.0
    assert broker.core.counters["cancelled"] + broker.core.counters["past_deadline"] >= 1


def test_app_handlers_may_take_the_task_context(transport, brokers, workers, endpoint_for) -> None:
    from generaldomo.peers.app import Bound

    app = App("deadlines")

    @app.service("left", serializer="json")
    def left(value: int, task: TaskContext) -> dict[str, object]:
        remaining = task.time_left()
        return {"value": value, "left": remaining, "cancelled": task.cancelled}

    broker = brokers(transport, [endpoint_for("ipc")])
    endpoint = broker.endpoint(transport, "ipc")
    workers(endpoint, transport, "left", Bound(app.services[0]))
    with Client(endpoint, transport) as c:
        import json

        reply = json.loads(c.request("left", [b"\x00content-type:json", b"7"], timeout=20).frames[-1])
        assert reply["value"] == 7 and not reply["cancelled"] and 0 < reply["left"] <= 20
        reply = json.loads(c.submit("left", [b"\x00content-type:json", b"8"]).result(20).frames[-1])
        assert reply["left"] is None  # submit() without a deadline

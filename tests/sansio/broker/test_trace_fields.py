"""The broker core and a request's trace context: carried to the worker with the deadline, a malformed one left out of
the request (which is served) and counted, its bytes in the request's charge; the worker's session hands it on."""

from __future__ import annotations

from core_harness import Harness, client, worker

from generaldomo.sansio.peer.session import RunTask, WorkerSession
from generaldomo.sansio.wire import protocol
from generaldomo.sansio.wire.tracecontext import TraceContext

MODERN = protocol.worker_info(None, 1)  # the peer info of a worker that understands fields
PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def entry(tag: int, value: bytes) -> bytes:
    return bytes((tag, len(value))) + value


def test_a_trace_context_reaches_the_worker_and_a_malformed_one_is_left_out_and_counted() -> None:
    h = Harness()
    h.feed(worker(1), protocol.gdp_ready(b"echo", info=MODERN))
    trace = TraceContext(PARENT, "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")
    h.feed(client(1), protocol.gdp_request(b"a", b"echo", [b"x"], protocol.request_fields(5.0, trace=trace)))
    sent = h.inbox[worker(1)][-1]
    parsed = protocol.parse_fields(sent[4])
    assert sent[1] == b"\x07" and not isinstance(parsed, str) and parsed[5] == trace and parsed[0] is not None
    assert 0 < parsed[0] <= 5.0
    h.answer(worker(1), h.tasks_of(worker(1))[0][0], b"a!")

    bad = entry(protocol.FIELD_TRACEPARENT, PARENT.upper().encode()) + entry(protocol.FIELD_TRACESTATE, b"a=1")
    h.feed(client(1), protocol.gdp_request(b"b", b"echo", [b"y"], bad))  # no deadline, a malformed trace
    assert h.inbox[worker(1)][-1][1] == b"\x02"  # a plain REQUEST: nothing left to carry
    h.answer(worker(1), h.tasks_of(worker(1))[-1][0], b"b!")
    assert [(rid, status) for rid, status, _ in h.replies_of(client(1))] == [(b"a", b"200"), (b"b", b"200")]
    assert h.core.counters["trace_dropped"] == 1
    assert h.core.report(h.now).broker.counters["trace_dropped"] == 1

    state_only = protocol.request_fields(5.0) + entry(protocol.FIELD_TRACEPARENT, PARENT.encode())
    state_only += entry(protocol.FIELD_TRACESTATE, b"Not A Key=1")
    h.feed(client(1), protocol.gdp_request(b"c", b"echo", [b"z"], state_only))
    parsed = protocol.parse_fields(h.inbox[worker(1)][-1][4])
    assert not isinstance(parsed, str) and parsed[5] == TraceContext(PARENT)  # the tracestate alone left out
    assert h.core.counters["trace_dropped"] == 2


def test_the_trace_context_counts_in_the_requests_charge() -> None:
    plain, traced = Harness(), Harness()
    trace = TraceContext(PARENT, "k=" + "v" * 100)
    for h, fields in ((plain, protocol.request_fields(5.0)), (traced, protocol.request_fields(5.0, trace=trace))):
        h.feed(client(1), protocol.gdp_request(b"a", b"echo", [b"x"], fields))
    charges = [sum(size for _, kind, size in h.core.holdings() if kind.name == "TASK") for h in (plain, traced)]
    assert charges[1] - charges[0] == len(trace.traceparent) + len(trace.tracestate)


def test_the_worker_session_hands_the_trace_context_to_the_task() -> None:
    session = WorkerSession(b"echo", now=0.0)
    session.start()
    trace = TraceContext(PARENT)
    frames = protocol.worker_request(
        protocol.Dialect.GDP, b"t1", b"echo", [b"x"], protocol.request_fields(2.0, trace=trace)
    )
    [run] = [a for a in session.receive(frames, 0.0) if isinstance(a, RunTask)]
    assert run.trace == trace and run.deadline == 2.0


def test_a_traced_answer_gives_its_times_once_while_spans_are_on_and_nothing_else() -> None:
    h = Harness()
    h.feed(worker(1), protocol.gdp_ready(b"echo", info=MODERN))
    traced = protocol.request_fields(60.0, trace=TraceContext(PARENT, "rojo=1"))
    h.feed(client(1), protocol.gdp_request(b"off", b"echo", [b"x"], traced))  # spans off: no record
    h.answer(worker(1), h.tasks_of(worker(1))[-1][0], b"x!")
    assert not h.core.spans and h.core.spans.take() == []
    h.core.spans.on = True
    h.feed(client(1), protocol.gdp_request(b"plain", b"echo", [b"x"], protocol.request_fields(60.0)))
    h.answer(worker(1), h.tasks_of(worker(1))[-1][0], b"x!")  # no trace context: no record
    assert not h.core.spans
    h.advance(1.0)
    h.feed(client(1), protocol.gdp_request(b"busy", b"echo", [b"x"], traced))  # the worker takes it at once
    h.feed(client(1), protocol.gdp_request(b"later", b"echo", [b"y"], traced))  # queued behind it
    queued = h.now
    h.advance(2.0)
    h.answer(worker(1), h.tasks_of(worker(1))[-1][0], b"x!")  # "later" is dispatched now
    dispatched = h.now
    h.advance(3.0)
    h.answer(worker(1), h.tasks_of(worker(1))[-1][0], b"y!")
    first, second = h.core.spans.take()
    assert (first.service, first.status, first.trace) == ("echo", b"200", TraceContext(PARENT, "rojo=1"))
    assert (second.queued, second.dispatched, second.answered) == (queued, dispatched, dispatched + 3.0)
    assert first.dispatched == first.queued == queued and first.answered == dispatched
    assert not h.core.spans and h.core.spans.take() == []  # taken once: nothing kept


def test_a_traced_request_that_expires_in_the_queue_has_no_dispatch() -> None:
    h = Harness()
    h.core.spans.on = True
    fields = protocol.request_fields(1.0, trace=TraceContext(PARENT))
    h.feed(client(1), protocol.gdp_request(b"a", b"echo", [b"x"], fields))
    h.advance(5.0)
    [answered] = h.core.spans.take()
    assert answered.dispatched is None and answered.status == protocol.EXPIRED and answered.queued == 0.0

"""The sans-IO broker core, driven with frames and a fake clock (no sockets)."""

from __future__ import annotations

import pytest
from core_harness import Harness, client, worker
from hypothesis import given
from hypothesis import strategies as st
from worker_commands import parse_worker_command

from generaldomo.errors import ResolveError
from generaldomo.sansio.broker.actions import Beat, Cancel, Dismiss, Dispatch, Send
from generaldomo.sansio.broker.core import Peer
from generaldomo.sansio.broker.services.resolver import NameResolver
from generaldomo.sansio.broker.services.service import Service
from generaldomo.sansio.broker.states import WorkerState
from generaldomo.sansio.wire import protocol
from generaldomo.sansio.wire.events import Dialect


@given(st.integers(0, 20), st.integers(0, 20))
def test_requests_queue_until_workers_are_ready_and_go_fifo(requests: int, workers: int) -> None:
    h = Harness()
    for n in range(requests):
        h.request(client(0), b"r%d" % n)
    for n in range(workers):
        h.ready(worker(n))
    dispatched = [h.tasks_of(worker(n)) for n in range(workers)]
    assert sum(map(len, dispatched)) == min(requests, workers)
    # workers waited in order of readiness and got the oldest requests first
    bodies = [tasks[0][2] for tasks in dispatched if tasks]
    assert bodies == [(b"r%d" % n,) for n in range(min(requests, workers))]
    assert len(h.core.tasks) == requests


def round_robin(queues: dict[int, list[bytes]]) -> list[bytes]:
    """Fair shares of equal weights: one from each tenant in turn (in order of arrival), each in its order."""
    merged, lists = [], [list(q) for q in queues.values()]
    while any(lists):
        merged += [q.pop(0) for q in lists if q]
    return merged


@given(st.lists(st.sampled_from([b"a", b"b", b"c"]), max_size=30))
def test_fifo_per_tenant_fair_between_them_per_service_and_workers_reused(services: list[bytes]) -> None:
    h = Harness()
    for n, service in enumerate(services):
        h.request(client(n % 3), b"r%d" % n, service, b"%s-%d" % (service, n))
    for service in (b"a", b"b", b"c"):
        peer = Peer(1, service)
        h.ready(peer, service)
        served = 0
        while len(h.tasks_of(peer)) > served:
            task_id, description, body = h.tasks_of(peer)[served]
            assert description == service
            h.answer(peer, task_id, body[0], service)
            served += 1
        by_client: dict[int, list[bytes]] = {}  # each client is a tenant (one per connection)
        for n, s in enumerate(services):
            if s == service:
                by_client.setdefault(n % 3, []).append(b"%s-%d" % (s, n))
        assert [t[2][0] for t in h.tasks_of(peer)] == round_robin(by_client)
    for n in range(3):
        for rid, status, body in h.replies_of(client(n)):
            assert status == b"200"
            index = int(rid[1:])
            assert index % 3 == n and body == (b"%s-%d" % (services[index], index),)
    assert sum(len(h.replies_of(client(n))) for n in range(3)) == len(services)
    assert not h.core.tasks


def test_result_goes_to_the_client_that_asked() -> None:
    h = Harness()
    h.request(client(1), b"x1", body=b"one")
    h.request(client(2), b"x2", body=b"two")
    h.ready(worker(1))
    h.ready(worker(2))
    (t2, _, _), (t1, _, _) = h.tasks_of(worker(2))[0], h.tasks_of(worker(1))[0]
    h.answer(worker(2), t2, b"TWO")
    h.answer(worker(1), t1, b"ONE")
    assert h.replies_of(client(1)) == [(b"x1", b"200", (b"ONE",))]
    assert h.replies_of(client(2)) == [(b"x2", b"200", (b"TWO",))]


def test_lost_worker_task_is_reissued_at_the_front() -> None:
    h = Harness()
    h.request(client(0), b"first")
    h.request(client(0), b"second")
    h.ready(worker(1))
    task_id = h.tasks_of(worker(1))[0][0]
    h.feed(worker(1), protocol.worker_command(Dialect.GDP, protocol.DISCONNECT))
    h.ready(worker(2))
    assert h.tasks_of(worker(2))[0][0] == task_id
    assert h.core.counters["reissued"] == 1


def test_silent_worker_expires_and_its_task_is_reissued() -> None:
    h = Harness(heartbeat_interval=1.0, liveness=3)
    h.ready(worker(1))
    h.ready(worker(2))
    h.request(client(0), b"r")
    task_id = h.tasks_of(worker(1))[0][0]
    for _ in range(3):
        h.advance(1.0)
        h.feed(worker(2), protocol.worker_command(Dialect.GDP, protocol.HEARTBEAT))
    h.advance(1.0)
    assert worker(1) not in h.core.workers
    assert h.tasks_of(worker(2))[0][0] == task_id
    assert [protocol.HEARTBEAT] == list({parse_worker_command(m)[0] for m in h.inbox[worker(1)][1:]})


def reissued_from_1_to_2(h: Harness) -> bytes:
    """Worker 1 takes request r and disconnects; worker 2 gets it. Returns the task id."""
    h.request(client(0), b"r")
    h.ready(worker(1))
    task_id = h.tasks_of(worker(1))[0][0]
    h.feed(worker(1), protocol.worker_command(Dialect.GDP, protocol.DISCONNECT))
    h.ready(worker(2))
    return task_id


def test_late_result_of_presumed_dead_worker_is_dropped() -> None:
    h = Harness()
    task_id = reissued_from_1_to_2(h)
    h.answer(worker(2), task_id, b"from-2")
    h.answer(worker(1), task_id, b"from-1")  # comes back after the reissue
    assert h.replies_of(client(0)) == [(b"r", b"200", (b"from-2",))]
    assert h.core.counters["duplicates_dropped"] == 1
    assert h.inbox[worker(1)][-1] == protocol.worker_command(Dialect.GDP, protocol.DISCONNECT)


def test_only_the_holders_result_counts() -> None:
    # Issue 16 changes this on purpose: the presumed-dead worker no longer holds the task, so its result is
    # refused (it used to win as the first result); the worker that holds the reissued task answers.
    h = Harness()
    task_id = reissued_from_1_to_2(h)
    h.answer(worker(1), task_id, b"from-1")
    assert not h.replies_of(client(0)) and h.core.counters["results_refused"] == 1
    h.answer(worker(2), task_id, b"from-2")
    assert h.replies_of(client(0)) == [(b"r", b"200", (b"from-2",))]
    assert h.core.workers[worker(2)].state is WorkerState.WAITING


def test_task_lost_too_often_fails_with_503() -> None:
    h = Harness(max_attempts=2)
    h.request(client(0), b"poison")
    for n in range(2):
        h.ready(worker(n))
        h.feed(worker(n), protocol.worker_command(Dialect.GDP, protocol.DISCONNECT))
    [(rid, status, body)] = h.replies_of(client(0))
    assert (rid, status) == (b"poison", b"503") and b"2 times" in body[0]
    assert not h.core.tasks and h.core.counters["failed"] == 1


def test_retry_with_the_same_request_id_is_not_a_second_task() -> None:
    h = Harness()
    h.request(client(0), b"r")
    h.request(client(0), b"r")
    h.request(client(1), b"r")  # the same client, reconnected: its answer goes to the new connection
    assert len(h.core.tasks) == 1 and h.core.counters["retries_absorbed"] == 2
    h.ready(worker(1))
    h.answer(worker(1), h.tasks_of(worker(1))[0][0], b"R")
    assert h.replies_of(client(1)) == [(b"r", b"200", (b"R",))] and not h.replies_of(client(0))


def test_mmi_service() -> None:
    h = Harness()
    h.feed(client(0), protocol.gdp_request(b"1", b"mmi.service", [b"echo"]))
    h.ready(worker(1))
    h.feed(client(0), protocol.gdp_request(b"2", b"mmi.service", [b"echo"]))
    h.feed(client(0), protocol.gdp_request(b"3", b"mmi.nonesuch", []))
    h.feed(client(0), [b"", b"MDPC01", b"mmi.service", b"echo"])
    replies = h.replies_of(client(0))
    assert [r[2] for r in replies] == [(b"404",), (b"200",), (b"501",)]
    assert h.inbox[client(0)][-1] == [b"", b"MDPC01", b"mmi.service", b"200"]


def test_worker_may_not_register_an_mmi_service() -> None:
    h = Harness()
    h.ready(worker(1), b"mmi.service")
    assert worker(1) not in h.core.workers
    assert h.inbox[worker(1)] == [protocol.worker_command(Dialect.GDP, protocol.DISCONNECT)]


def test_unknown_worker_heartbeat_gets_disconnect() -> None:
    h = Harness()
    h.feed(worker(9), [b"", b"MDPW01", b"\x04"])
    assert h.inbox[worker(9)] == [[b"", b"MDPW01", b"\x05"]]


def test_second_mdp_ready_is_a_protocol_error() -> None:
    h = Harness()
    h.feed(worker(1), [b"", b"MDPW01", b"\x01", b"echo"])
    h.feed(worker(1), [b"", b"MDPW01", b"\x01", b"echo"])
    assert worker(1) not in h.core.workers
    assert h.inbox[worker(1)][-1] == [b"", b"MDPW01", b"\x05"]


def test_mdp_worker_round_trip_uses_task_id_as_address() -> None:
    h = Harness()
    h.feed(client(0), [b"", b"MDPC01", b"echo", b"hello"])
    h.feed(worker(1), [b"", b"MDPW01", b"\x01", b"echo"])
    [request] = h.inbox[worker(1)]
    assert request[:3] == [b"", b"MDPW01", b"\x02"] and request[4:] == [b"", b"hello"]
    h.feed(worker(1), [b"", b"MDPW01", b"\x03", request[3], b"", b"HELLO"])
    assert h.inbox[client(0)] == [[b"", b"MDPC01", b"echo", b"HELLO"]]
    assert h.core.workers[worker(1)].state is WorkerState.WAITING


def test_malformed_input_is_counted_not_fatal() -> None:
    h = Harness()
    for garbage in ([], [b"GET / HTTP/1.1"], [b"", b"MDPW01", b"\x03"], [b"GDPC01", b"\x01"]):
        h.feed(client(0), garbage)
    assert h.core.counters["malformed"] == 4 and not h.inbox


class PickyResolver(NameResolver):
    def for_request(self, description: bytes) -> Service:
        if description == b"bad":
            raise ResolveError("no such thing")
        if description == b"buggy":
            raise RuntimeError("plug-in bug")
        return super().for_request(description)


@pytest.mark.parametrize(("description", "text"), [(b"bad", b"no such thing"), (b"buggy", b"plug-in bug")])
def test_resolver_errors_answer_the_client(description: bytes, text: bytes) -> None:
    h = Harness()
    h.core.resolver = PickyResolver()
    h.request(client(0), b"r", description)
    [(_, status, body)] = h.replies_of(client(0))
    assert status == b"400" and text in body[0]
    h.request(client(0), b"s")
    h.ready(worker(1))
    assert h.tasks_of(worker(1))  # and the broker goes on


def test_partial_results_reach_streaming_clients_only() -> None:
    h = Harness()
    h.request(client(0), b"r")
    h.feed(client(1), [b"", b"MDPC01", b"echo", b"x"])
    h.feed(worker(1), [b"MDPW02", b"\x01", b"echo"])
    h.feed(worker(2), [b"MDPW02", b"\x01", b"echo"])
    t1 = h.inbox[worker(1)][0][2]
    t2 = h.inbox[worker(2)][0][2]
    for peer, task_id in ((worker(1), t1), (worker(2), t2)):
        h.feed(peer, [b"MDPW02", b"\x03", task_id, b"", b"part"])
        h.feed(peer, [b"MDPW02", b"\x04", task_id, b"", b"done"])
    assert h.replies_of(client(0)) == [(b"r", None, (b"part",)), (b"r", b"200", (b"done",))]
    assert h.inbox[client(1)] == [[b"", b"MDPC01", b"echo", b"done"]]


def test_close_disconnects_every_worker() -> None:
    h = Harness()
    h.ready(worker(1))
    h.feed(worker(2), [b"", b"MDPW01", b"\x01", b"echo"])
    sent = dict(h.core.close())
    assert sent == {worker(1): [b"GDPW01", b"\x06"], worker(2): [b"", b"MDPW01", b"\x05"]}


def test_the_core_returns_typed_actions_each_call_its_own() -> None:
    """Each message sent is an action of its kind (the harness checks every one against its frames), a
    ``Send`` that unpacks as ``(peer, frames)``; the list a call returns is its own: later calls leave it be."""
    h = Harness()
    ready = h.core.receive(worker(1), protocol.gdp_ready(b"echo", info=protocol.worker_info("host", 1)), h.now)
    asked = h.core.receive(client(0), protocol.gdp_request(b"r1", b"echo", [b"hi"]), h.now)
    assert ready == [] and [type(action) for action in asked] == [Dispatch]
    [(to, frames)] = asked
    assert to == worker(1) and isinstance(asked[0], Send)
    cancelled = h.core.receive(client(0), protocol.gdp_cancel(b"r1"), h.now)
    assert [type(action) for action in cancelled] == [Cancel] and asked == [Dispatch(to, frames)]
    beat = h.core.receive(client(0), protocol.gdp_client_heartbeat(ids=[b"r1"]), h.now)
    gone = h.core.receive(worker(9), protocol.worker_command(Dialect.GDP, protocol.HEARTBEAT), h.now)
    assert [type(action) for action in beat + gone] == [Beat, Dismiss] and gone[0].peer == worker(9)
    assert [type(action) for action in h.core.close()] == [Dismiss]
    assert [type(a) for a in asked + cancelled] == [Dispatch, Cancel]  # still as returned


def test_queued_requests_expire_with_504_running_ones_do_not() -> None:
    h = Harness(heartbeat_interval=1.0, queue_timeout=2.5)
    h.request(client(0), b"runs")
    h.ready(worker(1))
    h.request(client(0), b"waits")
    h.advance(1.0)
    h.feed(worker(1), protocol.worker_command(Dialect.GDP, protocol.HEARTBEAT))
    h.request(client(0), b"young")
    h.advance(1.0)
    h.feed(worker(1), protocol.worker_command(Dialect.GDP, protocol.HEARTBEAT))
    h.advance(1.0)
    assert [(r[0], r[1]) for r in h.replies_of(client(0))] == [(b"waits", b"504")]
    assert h.core.counters["expired"] == 1 and len(h.core.tasks) == 2
    assert not any(t.request_id == b"waits" for t in h.core.workers[worker(1)].service.pending)


def test_oversized_request_and_result_get_413() -> None:
    h = Harness(max_message=100)
    h.request(client(0), b"big", body=b"x" * 200)
    [(rid, status, _)] = h.replies_of(client(0))
    assert (rid, status) == (b"big", b"413") and not h.core.tasks
    h.request(client(0), b"small")
    h.ready(worker(1))
    task_id = h.tasks_of(worker(1))[0][0]
    h.answer(worker(1), task_id, b"y" * 200)
    assert h.replies_of(client(0))[-1][:2] == (b"small", b"413")
    assert h.core.workers[worker(1)].state is WorkerState.WAITING and h.core.counters["too_large"] == 2


def test_client_heartbeat_names_the_broker_instance() -> None:
    h = Harness()
    h.feed(client(0), protocol.gdp_client_heartbeat())
    assert [protocol.parse_broker_instance(m) for m in h.inbox[client(0)]] == [b"test"]


def test_workers_beyond_max_workers_are_told_to_go_and_counted() -> None:
    h = Harness(max_workers=3)
    for n in range(5):
        h.ready(worker(n))
    assert len(h.core.workers) == 3 and h.core.counters["workers_refused"] == 2
    for n in (3, 4):
        assert parse_worker_command(h.inbox[worker(n)][-1])[0] == protocol.DISCONNECT  # type: ignore[index]
    h.feed(worker(0), protocol.worker_command(Dialect.GDP, protocol.DISCONNECT))
    h.ready(worker(4))  # a place came free
    assert worker(4) in h.core.workers and len(h.core.workers) == 3
    h.request(client(0), b"r1")
    assert len(h.tasks_of(worker(1)) + h.tasks_of(worker(2)) + h.tasks_of(worker(4))) == 1

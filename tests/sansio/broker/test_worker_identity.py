"""A worker registering again from a new connection: the registration its id held elsewhere is retired at once
(its task reissued, or kept by a RESUME of that task); a peer with another CURVE key cannot name it."""

from __future__ import annotations

from core_harness import Harness, checked, client, worker
from hypothesis import given
from hypothesis import strategies as st

from generaldomo.sansio.broker.access import Credential, Role
from generaldomo.sansio.broker.core import Peer
from generaldomo.sansio.wire import protocol

NAME = "0123456789abcdef0123456789abcdef"


def named(name: str | None = NAME) -> bytes:
    return protocol.worker_info("node-7", 4321, name=name)


def keyed(key: str) -> Credential:
    return Credential(key, frozenset({Role.WORKER}))


def feed(h: Harness, peer: Peer, frames: list[bytes], credential: Credential | None = None) -> None:
    for to, out in checked(h.core.receive(peer, frames, h.now, credential)):
        h.inbox[to].append(out)


def test_a_ready_from_a_new_connection_retires_the_old_registration_and_its_task_goes_to_the_new() -> None:
    h = Harness()
    h.feed(worker(1), protocol.gdp_ready(b"echo", info=named()))
    h.request(client(0), b"r1")
    ((task_id, _, _),) = h.tasks_of(worker(1))  # then worker 1's connection is cut
    h.feed(worker(2), protocol.gdp_ready(b"echo", info=named()))
    assert set(h.core.workers) == {worker(2)}
    ((again, _, _),) = h.tasks_of(worker(2))  # reissued at once, to the live connection
    h.answer(worker(2), again, b"done")
    assert h.replies_of(client(0)) == [(b"r1", b"200", (b"done",))]
    counters = h.core.counters
    assert (counters["workers_replaced"], counters["reissued"], counters["workers_expired"]) == (1, 1, 0)
    h.request(client(0), b"r2")
    assert [t[2] for t in h.tasks_of(worker(2))][-1] == (b"r2",) and len(h.tasks_of(worker(1))) == 1
    h.answer(worker(1), task_id, b"late")  # the old connection's result, had it come: refused, nothing answered twice
    assert [r[0] for r in h.replies_of(client(0))] == [b"r1"]


def test_a_resume_of_the_running_task_from_a_new_connection_keeps_it_running_there() -> None:
    h = Harness()
    h.feed(worker(1), protocol.gdp_ready(b"echo", info=named()))
    h.request(client(0), b"r1")
    ((task_id, _, _),) = h.tasks_of(worker(1))
    h.feed(worker(2), protocol.gdp_resume(b"echo", task_id, named()))
    assert set(h.core.workers) == {worker(2)} and h.core.tasks[task_id].worker is h.core.workers[worker(2)]
    assert h.core.counters["reissued"] == 0
    h.answer(worker(2), task_id, b"done")
    assert h.replies_of(client(0)) == [(b"r1", b"200", (b"done",))]


def test_workers_without_an_id_or_with_another_keep_their_registrations() -> None:
    h = Harness()
    h.feed(worker(1), protocol.gdp_ready(b"echo", info=named()))
    h.feed(worker(2), protocol.gdp_ready(b"echo", info=named("another")))
    h.feed(worker(3), protocol.gdp_ready(b"echo", info=named(None)))
    h.feed(worker(4), protocol.gdp_ready(b"echo"))
    h.feed(worker(5), [b"", b"MDPW01", b"\x01", b"echo"])
    assert len(h.core.workers) == 5 and h.core.counters["workers_replaced"] == 0


def test_under_curve_only_the_same_key_can_name_a_worker() -> None:
    """A peer that learnt a worker's id but holds another key registers under its own key: the worker stays."""
    h = Harness()
    feed(h, worker(1), protocol.gdp_ready(b"echo", info=named()), keyed("alice"))
    feed(h, worker(2), protocol.gdp_ready(b"echo", info=named()), keyed("mallory"))
    assert set(h.core.workers) == {worker(1), worker(2)} and h.core.counters["workers_replaced"] == 0
    feed(h, worker(3), protocol.gdp_ready(b"echo", info=named()), keyed("alice"))  # alice's worker reconnects
    assert set(h.core.workers) == {worker(2), worker(3)} and h.core.counters["workers_replaced"] == 1


@given(st.none() | st.text(max_size=80))
def test_an_id_round_trips_and_one_out_of_bounds_is_left_out(name: str | None) -> None:
    event = protocol.parse(protocol.gdp_ready(b"echo", info=protocol.worker_info("h", 1, name=name)))
    valid = name is not None and 1 <= len(name) <= 64 and name.isprintable()
    assert getattr(event, "name", "no event") == (name if valid else None)


def test_a_task_lost_with_a_replaced_connection_is_not_counted_as_an_attempt() -> None:
    """max_attempts counts the runs lost with their workers (a poison task); a worker that registers again says
    that no task runs there: the task never ran, or its result was lost with the connection."""
    h = Harness(max_attempts=2)
    h.feed(worker(0), protocol.gdp_ready(b"echo", info=named()))
    h.request(client(0), b"r1")
    for n in range(1, 6):  # the connection is cut five times, each time just after the task was given to it
        h.feed(worker(n), protocol.gdp_ready(b"echo", info=named()))
        assert len(h.tasks_of(worker(n))) == 1 and h.replies_of(client(0)) == []
    ((task_id, _, _),) = h.tasks_of(worker(5))
    h.answer(worker(5), task_id, b"done")
    assert h.replies_of(client(0)) == [(b"r1", b"200", (b"done",))]
    assert (h.core.counters["workers_replaced"], h.core.counters["failed"]) == (5, 0)

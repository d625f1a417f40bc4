"""Hand-over in the sans-IO core: a task an earlier broker instance dispatched is taken over by the next one
(tickets, RESUME, HANDOVER, results of workers a restart forgot, the recovery window, acknowledgements)."""

from __future__ import annotations

import pytest
from core_harness import Harness, client, worker

from generaldomo.sansio.broker.access import Credential, Role
from generaldomo.sansio.broker.core import Peer
from generaldomo.sansio.wire import protocol
from generaldomo.sansio.wire.peer_events import BrokerHeartbeat, HeartbeatAnswer
from generaldomo.sansio.wire.ticket import Tickets, nonce, request_digest

KEY = bytes(range(32))
OTHER_KEY = bytes(32)


def first_instance(**settings: float) -> Harness:
    return Harness(handover_key=KEY, instance=b"I1I1", heartbeat_interval=1.0, **settings)


def restarted(**settings: float) -> Harness:
    """The next instance on the same state directory (same key), holding dispatch for 2 s."""
    return Harness(handover_key=KEY, instance=b"I2I2", recovering=True, seed=1, heartbeat_interval=1.0, **settings)


def dispatched(rid: bytes = b"rid-1", body: bytes = b"payload") -> tuple[Harness, bytes]:
    """An instance that gave worker 1 the request ``rid``; the task id (a ticket) the worker holds."""
    old = first_instance()
    old.ready(worker(1))
    old.request(client(1), rid, body=body)
    [(task_id, _, _)] = old.tasks_of(worker(1))
    return old, task_id


def wait(h: Harness, seconds: float, *alive: Peer) -> None:
    """Let ``seconds`` pass in half-second steps, the ``alive`` workers heartbeating."""
    for _ in range(int(seconds * 2)):
        for peer in alive:
            h.feed(peer, protocol.gdp_worker_command(protocol.HEARTBEAT))
        h.advance(0.5)


def heartbeats_of(h: Harness, peer: Peer) -> list[BrokerHeartbeat]:
    messages = map(protocol.read_worker_message, h.inbox[peer])
    return [m for m in messages if isinstance(m, BrokerHeartbeat)]


def test_tickets_name_the_request_and_only_the_key_reads_them() -> None:
    tickets = Tickets(KEY, b"I1I1")
    digest = request_digest(b"echo", [b"x"])
    ticket = tickets.issue(b"n" * 16, "echo", "client-key", b"rid", digest)
    read = Tickets(KEY, b"I2I2").read(ticket)
    assert read is not None and (read.instance, read.service, read.owner, read.request_id, read.digest) == (
        b"I1I1",
        "echo",
        "client-key",
        b"rid",
        digest,
    )
    assert nonce(ticket) == b"n" * 16
    assert Tickets(OTHER_KEY, b"I2I2").read(ticket) is None  # another state directory's
    for bad in (ticket[:-1], ticket + b"x", ticket[:40] + bytes([ticket[40] ^ 1]) + ticket[41:], b"n" * 16, b""):
        assert tickets.read(bad) is None
    assert tickets.issue(b"n" * 16, "echo", None, b"r" * 2000, digest) == b"n" * 16  # too long: a plain id
    assert request_digest(b"echo", [b"ab", b"c"]) != request_digest(b"echo", [b"a", b"bc"])


def test_a_resumed_task_answers_the_resent_request_without_running_it_again() -> None:
    _, task_id = dispatched()
    new = restarted()
    new.ready(worker(2))  # an idle worker of the new instance
    new.feed(worker(1), protocol.gdp_resume(b"echo", task_id))  # the busy worker registers again
    new.request(client(1), b"rid-1", body=b"payload")  # the client's resend
    wait(new, 5.0, worker(1), worker(2))  # past the recovery window
    assert new.tasks_of(worker(1)) == [] and new.tasks_of(worker(2)) == []  # run by nobody else
    new.answer(worker(1), task_id, b"result")
    assert new.replies_of(client(1)) == [(b"rid-1", protocol.OK, (b"result",))]
    assert new.core.counters["tasks_resumed"] == 1
    new.request(client(1), b"rid-2")  # the resumed worker waits again like any other
    new.request(client(1), b"rid-3")
    assert len(new.tasks_of(worker(1))) + len(new.tasks_of(worker(2))) == 2


def test_a_resend_that_came_first_is_held_in_the_window_then_given_to_the_resumed_worker() -> None:
    _, task_id = dispatched()
    new = restarted()
    new.ready(worker(2))
    new.request(client(1), b"rid-1", body=b"payload")
    assert new.tasks_of(worker(2)) == []  # within the recovery window: queued, not dispatched
    wait(new, 1.0, worker(2))
    new.feed(worker(1), protocol.gdp_resume(b"echo", task_id))
    wait(new, 2.0, worker(1), worker(2))
    assert new.tasks_of(worker(2)) == []
    new.answer(worker(1), task_id, b"result")
    assert new.replies_of(client(1)) == [(b"rid-1", protocol.OK, (b"result",))]
    new.request(client(2), b"other")  # after the window, dispatch as usual
    assert [body for _, _, body in new.tasks_of(worker(2))] == [(b"other",)]


def test_without_a_resume_the_window_ends_and_the_request_runs() -> None:
    new = restarted()
    new.ready(worker(2))
    new.request(client(1), b"rid-1")
    new.advance(1.0)
    assert new.tasks_of(worker(2)) == []
    new.advance(1.5)
    assert len(new.tasks_of(worker(2))) == 1
    fresh = first_instance()  # a first start (the key was new): no window
    fresh.ready(worker(2))
    fresh.request(client(1), b"rid-1")
    assert len(fresh.tasks_of(worker(2))) == 1


def test_a_result_from_a_worker_the_restart_forgot_is_kept_for_the_resend() -> None:
    _, task_id = dispatched()
    new = restarted()
    new.answer(worker(1), task_id, b"result")  # finished while no broker was up; READY + result to the new one
    assert new.core.counters["handed_over"] == 1 and worker(1) in new.core.workers  # and it registered
    new.request(client(1), b"rid-1", body=b"payload")
    assert new.replies_of(client(1)) == [(b"rid-1", protocol.OK, (b"result",))]
    wait(new, 5.0, worker(1))
    assert new.tasks_of(worker(1)) == []  # nothing ran again
    [beat, *_] = heartbeats_of(new, worker(1))
    assert beat.instance == b"I2I2" and beat.taken == (nonce(task_id),)  # the worker learns it was taken


def test_a_handover_keeps_the_answer_and_is_acknowledged() -> None:
    _, task_id = dispatched()
    new = restarted()
    new.ready(worker(1))
    new.feed(worker(1), protocol.gdp_handover(task_id, protocol.OK, [b"result"]))
    new.request(client(1), b"rid-1", body=b"payload")
    assert new.replies_of(client(1)) == [(b"rid-1", protocol.OK, (b"result",))]
    new.advance(1.0)
    assert heartbeats_of(new, worker(1))[0].taken == (nonce(task_id),)
    assert heartbeats_of(new, worker(1))[0].taken == (nonce(task_id),)  # once, in the first heartbeat only
    new.advance(1.0)
    assert heartbeats_of(new, worker(1))[-1].taken == ()


def test_a_handover_answers_a_live_request_and_the_other_run_is_let_go() -> None:
    _, task_id = dispatched()
    new = restarted(recovery=0.0)
    new.ready(worker(2))
    new.request(client(1), b"rid-1", body=b"payload")  # no window: it runs at worker 2 again
    [(again, _, _)] = new.tasks_of(worker(2))
    new.ready(worker(1))
    new.feed(worker(1), protocol.gdp_handover(task_id, protocol.OK, [b"first"]))
    new.answer(worker(2), again, b"second")  # dropped: the request was answered
    assert new.replies_of(client(1)) == [(b"rid-1", protocol.OK, (b"first",))]
    new.request(client(2), b"next")
    new.request(client(2), b"after")
    assert len(new.tasks_of(worker(1)) + new.tasks_of(worker(2))) == 3  # both wait again


def test_a_handover_answers_only_the_same_description_and_payload() -> None:
    _, task_id = dispatched(body=b"payload")
    new = restarted()
    new.ready(worker(1))
    new.feed(worker(1), protocol.gdp_handover(task_id, protocol.OK, [b"result"]))
    new.request(client(1), b"rid-1", body=b"another payload")  # the same id, another request
    wait(new, 5.0, worker(1))
    assert new.replies_of(client(1)) == []
    assert len(new.tasks_of(worker(1))) == 1  # it runs


def test_forged_foreign_and_own_tickets_are_not_taken_over() -> None:
    old, task_id = dispatched()
    forged = Tickets(OTHER_KEY, b"I1I1").issue(b"f" * 16, "echo", None, b"rid-1", request_digest(b"echo", [b"x"]))
    new = restarted()
    new.ready(worker(1))
    for fake in (forged, task_id[:-1] + bytes([task_id[-1] ^ 1])):
        new.feed(worker(1), protocol.gdp_handover(fake, protocol.OK, [b"evil"]))
    assert new.core.counters["handed_over"] == 0
    new.feed(worker(3), protocol.gdp_ready(b"echo", (forged, protocol.OK, [b"evil"])))
    assert worker(3) not in new.core.workers  # a forged result registers nobody: DISCONNECT
    # on the instance that issued it, a ticket is an ordinary task id: only its holder answers it
    old.ready(worker(4))
    old.feed(worker(4), protocol.gdp_handover(task_id, protocol.OK, [b"evil"]))
    old.answer(worker(4), task_id, b"evil")
    assert old.replies_of(client(1)) == [] and old.core.counters["results_refused"] == 1
    old.answer(worker(1), task_id, b"good")
    assert old.replies_of(client(1)) == [(b"rid-1", protocol.OK, (b"good",))]


def test_a_claim_whose_worker_dies_leaves_the_request_to_run_again() -> None:
    _, task_id = dispatched()
    new = restarted(liveness=2)
    new.feed(worker(1), protocol.gdp_resume(b"echo", task_id))
    new.advance(3.0)  # worker 1 silent past its expiry: forgotten, and its claim with it
    assert worker(1) not in new.core.workers
    new.ready(worker(2))
    new.request(client(1), b"rid-1", body=b"payload")
    assert len(new.tasks_of(worker(2))) == 1


def test_a_worker_resumed_on_a_broker_without_hand_over_waits_again_after_its_result() -> None:
    _, task_id = dispatched()
    plain = Harness()
    plain.feed(worker(1), protocol.gdp_resume(b"echo", task_id))
    plain.request(client(1), b"rid-1", body=b"payload")
    assert plain.tasks_of(worker(1)) == []  # busy: it takes no task
    plain.answer(worker(1), task_id, b"old result")  # dropped (nothing to take it over with)
    [(new_id, _, _)] = plain.tasks_of(worker(1))  # waiting again: the queued request goes to it
    plain.answer(worker(1), new_id, b"result")
    assert plain.replies_of(client(1)) == [(b"rid-1", protocol.OK, (b"result",))]
    plain.advance(3.0)
    assert heartbeats_of(plain, worker(1))[0] == BrokerHeartbeat()  # no instance: it holds no results


def test_under_curve_only_a_key_that_may_serve_the_service_hands_over() -> None:
    _, task_id = dispatched()
    new = restarted()
    other = Credential("other-worker", frozenset({Role.WORKER}), ("report.*",))
    peer = worker(5)
    for frames in (protocol.gdp_ready(b"report.x"), protocol.gdp_handover(task_id, protocol.OK, [b"evil"])):
        for to, out in new.core.receive(peer, frames, new.now, other):
            new.inbox[to].append(out)
    assert new.core.counters["handed_over"] == 0
    allowed = Credential("echo-worker", frozenset({Role.WORKER}), ("echo",))
    for to, out in new.core.receive(worker(6), protocol.gdp_resume(b"echo", task_id), new.now, allowed):
        new.inbox[to].append(out)
    assert new.core.counters["tasks_resumed"] == 0 and len(new.core._handover) == 1


@pytest.mark.parametrize("frames", [[b"GDPW01", b"\x07", b"echo"], [b"GDPW01", b"\x08", b"id"]])
def test_short_resume_and_handover_are_malformed(frames: list[bytes]) -> None:
    h = restarted()
    h.feed(worker(1), frames)
    assert h.core.counters["malformed"] == 1 and worker(1) not in h.core.workers


def test_mdp_workers_keep_todays_behaviour() -> None:
    _, task_id = dispatched()
    new = restarted()
    mdp_final = [b"", b"MDPW01", b"\x03", task_id, b"", b"result"]  # an MDP/0.1 worker's reply with a ticket
    new.feed(worker(7), mdp_final)
    assert new.core.counters["handed_over"] == 0 and worker(7) not in new.core.workers
    assert protocol.read_worker_message(new.inbox[worker(7)][-1]) is not None  # told DISCONNECT, as before
    new.feed(worker(8), [b"", b"MDPW01", b"\x01", b"echo"])
    new.advance(1.5)
    beats = new.inbox[worker(8)]
    assert beats and beats == [[b"", b"MDPW01", b"\x04"]] * len(beats)  # MDP heartbeats carry nothing new


def test_a_fetch_in_the_window_is_not_told_unknown_before_the_worker_resumes_and_gets_the_result() -> None:
    """A detached request's fetch asked just after a restart: its worker may still be coming back, so the new
    instance does not say it knows nothing of it until the window ends (it said 404 at once, and the result
    the worker handed over a moment later was never fetched); an id nobody claims is unknown after it."""
    _, task_id = dispatched(b"rid-1")
    new = restarted()

    def unknown(rid: bytes) -> tuple[bytes, ...]:
        new.inbox[client(3)].clear()
        new.feed(client(3), protocol.gdp_client_heartbeat(ids=[rid]))
        [answer] = [protocol.read_client_message(m) for m in new.inbox[client(3)]]
        assert isinstance(answer, HeartbeatAnswer)
        return answer.unknown

    assert unknown(b"rid-1") == () and unknown(b"never-sent") == ()  # in the window: not known to be unknown
    wait(new, 1.0)
    new.feed(worker(1), protocol.gdp_resume(b"echo", task_id))  # the worker comes back within the window
    wait(new, 2.0, worker(1))  # past the window
    assert unknown(b"rid-1") == () and unknown(b"never-sent") == (b"never-sent",)  # claimed; nobody's
    new.answer(worker(1), task_id, b"result")  # handed over: kept for its id
    new.inbox[client(3)].clear()
    new.feed(client(3), protocol.gdp_client_heartbeat(ids=[b"rid-1"]))
    assert new.replies_of(client(3)) == [(b"rid-1", protocol.OK, (b"result",))]

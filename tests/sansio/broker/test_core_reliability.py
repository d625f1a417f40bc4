"""The core's side of issue 10: kept answers and re-asks, CANCEL, queue budgets, silent clients, idle
services and bounded logs, driven with frames and a fake clock."""

from __future__ import annotations

import logging

import pytest
from core_harness import Harness, client, worker

from generaldomo.sansio.broker.accounts.ledger import MARGIN, request_charge
from generaldomo.sansio.broker.services.resolver import NameResolver
from generaldomo.sansio.broker.services.service import Service
from generaldomo.sansio.broker.states import TaskState, WorkerState
from generaldomo.sansio.wire import protocol
from generaldomo.sansio.wire.events import Dialect


def heartbeat(*rids: bytes) -> list[bytes]:
    return [protocol.GDP_CLIENT, b"\x04", *rids]


def cancel(rid: bytes) -> list[bytes]:
    return [protocol.GDP_CLIENT, b"\x05", rid]


def answered(h: Harness, rid: bytes, service: bytes = b"echo") -> None:
    """Client 0 asks ``rid``; worker 1 answers it."""
    h.request(client(0), rid, service)
    task_id = h.tasks_of(worker(1))[-1][0]
    h.answer(worker(1), task_id, rid.upper(), service)


def test_a_repeated_request_gets_the_kept_answer_without_running_again() -> None:
    h = Harness(keep_answers=10.0, liveness=100)
    h.ready(worker(1))
    answered(h, b"r")
    h.request(client(1), b"r")  # the same id again (say, after a reconnect): answered from the kept answer
    assert h.replies_of(client(1)) == [(b"r", b"200", (b"R",))] and h.inbox[client(1)][0] == h.inbox[client(0)][0]
    assert len(h.tasks_of(worker(1))) == 1 and h.core.counters["answers_resent"] == 1
    h.advance(10.0)
    h.request(client(1), b"r")  # no longer kept: a new task
    assert len(h.tasks_of(worker(1))) == 2


def test_a_heartbeat_reasks_kept_answers_again_and_names_unknown_ids() -> None:
    h = Harness()
    h.ready(worker(1))
    answered(h, b"done")
    h.request(client(0), b"running")
    h.feed(client(0), heartbeat(b"done", b"running", b"lost"))
    *resent, answer = h.inbox[client(0)][-2:]
    assert [protocol.parse_client_reply(m)[0] for m in resent] == [b"done"]
    assert answer == [protocol.GDP_CLIENT, b"\x04", b"test", b"lost"]
    h.feed(client(0), heartbeat())
    assert h.inbox[client(0)][-1] == [protocol.GDP_CLIENT, b"\x04", b"test"]  # a plain heartbeat as before


def test_a_heartbeat_with_too_many_ids_is_malformed() -> None:
    h = Harness()
    h.feed(client(0), heartbeat(*(b"%d" % n for n in range(protocol.MAX_REASKED + 1))))
    assert h.core.counters["malformed"] == 1 and not h.inbox


def test_kept_answers_stay_within_their_byte_budget() -> None:
    h = Harness(keep_bytes=4000, max_message=None)
    h.ready(worker(1))
    for n in range(20):
        h.request(client(0), b"r%d" % n, body=b"x" * 500)
        h.answer(worker(1), h.tasks_of(worker(1))[-1][0], b"y" * 500)
    report = h.core.report(h.now).broker
    assert report.kept_bytes <= 4000 and 0 < report.kept_answers < 20
    assert report.kept_evicted == 20 - report.kept_answers
    h.feed(client(0), heartbeat(b"r0", b"r19"))
    assert h.inbox[client(0)][-1] == [protocol.GDP_CLIENT, b"\x04", b"test", b"r0"]  # oldest evicted first


def test_cancel_of_a_queued_task_removes_it() -> None:
    h = Harness()
    h.request(client(0), b"gone")
    h.request(client(0), b"stays")
    h.feed(client(0), cancel(b"gone"))
    h.feed(client(0), cancel(b"never-asked"))
    assert [t.request_id for t in h.core.tasks.values()] == [b"stays"]
    h.ready(worker(1))
    assert [body for _, _, body in h.tasks_of(worker(1))] == [(b"stays",)]
    assert h.core.counters["cancelled"] == 1 and not h.replies_of(client(0))
    charge = request_charge(len(b"echo") + len(b"stays"), 1, b"stays", client(0).address)
    assert h.core.report(h.now).broker.queued_bytes == charge


def test_cancel_of_a_running_task_drops_its_result_and_frees_the_worker() -> None:
    h = Harness()
    h.ready(worker(1))
    h.request(client(0), b"doomed")
    h.request(client(0), b"next")
    [(task_id, _, _)] = h.tasks_of(worker(1))
    h.feed(client(0), cancel(b"doomed"))
    record = h.core.workers[worker(1)]
    assert record.state is WorkerState.FINISHING and h.core.tasks[task_id].state is TaskState.CANCELLED
    assert h.core.report(h.now).workers[0].state == "finishing"
    h.answer(worker(1), task_id, b"too late")
    assert not h.replies_of(client(0)) and task_id not in h.core.tasks
    assert [body for _, _, body in h.tasks_of(worker(1))][-1] == (b"next",)  # the worker went on


def test_a_cancelled_task_whose_worker_dies_is_not_reissued() -> None:
    h = Harness()
    h.ready(worker(1))
    h.request(client(0), b"doomed")
    h.feed(client(0), cancel(b"doomed"))
    h.feed(worker(1), protocol.worker_command(Dialect.GDP, protocol.DISCONNECT))
    assert not h.core.tasks and h.core.counters["reissued"] == 0
    assert h.core.report(h.now).broker.queued_bytes == 0


@pytest.mark.parametrize(("budget", "which"), [("queue_bytes", b"broker"), ("service_queue_bytes", b"service")])
def test_requests_beyond_a_queue_budget_get_429(budget: str, which: bytes) -> None:
    charge = request_charge(len(b"echo") + 20, 1, b"r0", client(0).address)  # each request's, ids and overhead too
    h = Harness(**{budget: 4 * charge + charge // 2, "connection_queue_share": 0.5})
    for n in range(10):  # one small request per connection: each gets in within the budget and its margin
        h.request(client(n), b"r%d" % n, body=b"x" * 20)
    fits = int((4 * charge + charge // 2) * (1 + MARGIN)) // charge
    statuses = [status for n in range(10) for _, status, _ in h.replies_of(client(n))]
    assert fits == 5 and statuses == [b"429"] * (10 - fits)
    assert which + b" queue budget" in h.replies_of(client(9))[0][2][0] and h.core.counters["over_budget"] == 5
    h.feed(client(1), [b"", b"MDPC01", b"echo", b"x" * 20])  # MDP clients get it the MMI way
    assert h.inbox[client(1)][-1][3] == b"429"
    h.ready(worker(1))
    h.answer(worker(1), h.tasks_of(worker(1))[0][0], b"done")  # an answer frees room in the budget
    assert h.replies_of(client(0))[-1][1] == b"200"
    h.request(client(9), b"more", body=b"x" * 20)
    assert len(h.replies_of(client(9))) == 1 and len(h.core.tasks) == fits  # queued: no second 429


def test_queued_tasks_of_a_silent_client_are_dropped() -> None:
    h = Harness(heartbeat_interval=1.0, client_expiry=3.0)
    h.request(client(0), b"abandoned")
    h.request(client(1), b"wanted")
    h.request(client(2), b"mdp-too")  # MDP clients have no heartbeat: never dropped
    h.feed(client(2), [b"", b"MDPC01", b"echo", b"mdp"])
    for _ in range(5):
        h.advance(1.0)
        h.feed(client(1), heartbeat())
    assert sorted(t.request_id or b"-" for t in h.core.tasks.values()) == [b"-", b"wanted"]
    assert h.core.counters["client_gone_dropped"] == 2


def test_the_default_client_silence_is_generous() -> None:
    h = Harness(heartbeat_interval=0.1)
    assert h.core.settings.client_silence == 10.0
    h = Harness(heartbeat_interval=5.0)
    assert h.core.settings.client_silence == 30.0


def test_idle_services_are_forgotten_and_leave_the_report() -> None:
    h = Harness(heartbeat_interval=1.0, queue_timeout=1.0, service_idle=5.0)
    h.core.set_flow("limited", h.now, concurrency=2)
    for n in range(200):
        h.request(client(0), b"r", b"unique-0")  # the same request again: a retry; new ids make new services
        h.request(client(0), b"r%d" % n, b"unique-%d" % n)
    h.request(client(0), b"l", b"limited")
    h.ready(worker(1), b"served")
    for _ in range(10):
        h.advance(1.0)
        h.feed(worker(1), protocol.worker_command(Dialect.GDP, protocol.HEARTBEAT))
        h.feed(client(0), heartbeat())
    assert sorted(s.name for s in h.core.report(h.now).services) == ["limited", "served"]
    assert h.core.counters["services_forgotten"] == 200 and h.core.counters["expired"] == 202
    h.request(client(0), b"again", b"unique-1")  # a forgotten service comes back when asked for
    assert "unique-1" in [s.name for s in h.core.report(h.now).services]


class ForgetfulResolver:
    """A third-party resolver from before ``forget`` existed."""

    def __init__(self) -> None:
        self.names = NameResolver()

    def for_worker(self, description: bytes) -> Service:
        return self.names.for_worker(description)

    def for_request(self, description: bytes) -> Service:
        return self.names.for_request(description)

    def find(self, description: bytes) -> Service | None:
        return self.names.find(description)

    def services(self) -> list[Service]:
        return list(self.names.services())


def test_a_resolver_without_forget_keeps_its_services() -> None:
    h = Harness(heartbeat_interval=1.0, queue_timeout=1.0, service_idle=2.0)
    h.core.resolver = ForgetfulResolver()  # type: ignore[assignment]
    h.request(client(0), b"r", b"once")
    for _ in range(6):
        h.advance(1.0)
        h.feed(client(0), heartbeat())
    assert [s.name for s in h.core.report(h.now).services] == ["once"]


def test_warnings_about_one_peer_are_rate_limited_but_counted(caplog: pytest.LogCaptureFixture) -> None:
    h = Harness(heartbeat_interval=1.0)
    with caplog.at_level(logging.WARNING, logger="generaldomo"):
        for _ in range(1000):
            h.feed(client(0), [b"junk"])
            h.feed(client(1), [b"junk"])
        assert len(caplog.records) == 2
        h.ready(worker(1))  # keeps the sweep going
        for _ in range(11):
            h.advance(1.0)
            h.feed(worker(1), protocol.worker_command(Dialect.GDP, protocol.HEARTBEAT))
    assert h.core.counters["malformed"] == 2000
    assert sum("999 more malformed warnings" in r.getMessage() for r in caplog.records) == 2

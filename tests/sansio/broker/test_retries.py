"""Retry policies in the sans-IO core: a worker's failed answer tried again after a backoff, within the deadline."""

from __future__ import annotations

import pytest
from core_harness import Harness, client, worker

from generaldomo.sansio.broker.core.expiry import PAST_DEADLINE
from generaldomo.sansio.broker.core.retries import PAST_RETRY
from generaldomo.sansio.broker.flow.flow import FlowLimits
from generaldomo.sansio.broker.flow.retry import DEFAULT, RetryPolicy, retry_text
from generaldomo.sansio.broker.states import TaskState
from generaldomo.sansio.wire import protocol

MARKED = (b"upstream down", protocol.RETRY_MARK)


def fail(h: Harness, w: int, status: bytes = protocol.UNAVAILABLE, body: tuple[bytes, ...] = MARKED) -> bytes:
    """Worker ``w`` answers its latest task with ``status`` and ``body``; the task's id."""
    task_id = h.tasks_of(worker(w))[-1][0]
    h.feed(worker(w), protocol.gdp_ready(b"echo", (task_id, status, list(body))))
    return task_id


def test_a_marked_503_is_retried_with_backoff_and_answered_once() -> None:
    h = Harness()
    h.core.set_flow("echo", 0.0, retry={"retries": 2, "backoff": {"min": 1.0, "max": 8.0}})
    h.ready(worker(1))
    h.request(client(1), b"r1")
    first = fail(h, 1)
    assert h.replies_of(client(1)) == []  # no answer: held for its backoff
    (task,) = h.core.tasks.values()
    assert task.state is TaskState.QUEUED and task in task.service.delayed and task.retries == 1
    assert len(h.tasks_of(worker(1))) == 1  # not before the backoff: 0.5 to 1 s
    h.advance(0.49)
    assert len(h.tasks_of(worker(1))) == 1
    h.advance(0.52)
    assert [t[0] for t in h.tasks_of(worker(1))] == [first, first]  # the same task, again
    fail(h, 1)
    h.advance(1.99)  # the second backoff: 1 to 2 s
    assert len(h.tasks_of(worker(1))) == 3
    h.answer(worker(1), first, b"done")
    assert h.replies_of(client(1)) == [(b"r1", protocol.OK, (b"done",))]
    report = h.core.report(h.now).services[0]
    assert (report.retried, report.delayed, report.completed) == (2, 0, 1)
    assert h.core.counters.retried == 2


def test_retries_run_out_and_the_last_answer_goes_to_the_client_without_the_mark() -> None:
    h = Harness()
    h.core.set_flow("echo", 0.0, retry={"retries": 1, "backoff": {"min": 0.1, "max": 0.1}})
    h.ready(worker(1))
    h.request(client(1), b"r1")
    fail(h, 1)
    h.advance(0.2)
    fail(h, 1)
    assert h.replies_of(client(1)) == [(b"r1", protocol.UNAVAILABLE, (b"upstream down",))]
    assert h.core.counters.retries_exhausted == 1 and not h.core.tasks


def test_an_unmarked_status_is_retried_only_when_the_policy_names_it() -> None:
    h = Harness()
    h.ready(worker(1))
    h.request(client(1), b"r1")
    fail(h, 1, protocol.WORKER_ERROR, (b"boom",))
    assert h.replies_of(client(1)) == [(b"r1", protocol.WORKER_ERROR, (b"boom",))]  # no policy: answered
    h.core.set_flow("echo", h.now, retry={"statuses": [500]})
    h.request(client(1), b"r2")
    fail(h, 1, protocol.WORKER_ERROR, (b"boom",))
    assert len(h.replies_of(client(1))) == 1 and h.core.counters.retried == 1


def test_without_a_policy_a_marked_answer_is_retried_by_the_defaults_and_zero_retries_turns_it_off() -> None:
    h = Harness()
    h.ready(worker(1))
    h.request(client(1), b"r1")
    for retry in range(DEFAULT.retries):
        fail(h, 1)
        h.advance(DEFAULT.wait(retry + 1, 1.0))
    fail(h, 1)
    assert h.replies_of(client(1)) == [(b"r1", protocol.UNAVAILABLE, (b"upstream down",))]
    assert h.core.counters.retried == DEFAULT.retries
    h.core.set_flow("echo", h.now, retry={"retries": 0})
    h.request(client(1), b"r2")
    fail(h, 1)
    assert len(h.replies_of(client(1))) == 2 and h.core.counters.retried == DEFAULT.retries


def test_a_retry_whose_backoff_ends_past_the_deadline_is_answered_504_at_once() -> None:
    h = Harness()
    h.core.set_flow("echo", 0.0, retry={"backoff": {"min": 4.0, "max": 4.0}})
    h.ready(worker(1))
    h.feed(client(1), protocol.gdp_request(b"r1", b"echo", [b"x"], protocol.request_fields(1.0)))
    fail(h, 1)
    assert h.replies_of(client(1)) == [(b"r1", protocol.EXPIRED, (PAST_RETRY,))]
    assert h.core.counters.retries_past_deadline == 1 and not h.core.tasks


def test_a_held_task_cancelled_or_expired_is_answered_once_and_forgotten() -> None:
    h = Harness()
    h.core.set_flow("echo", 0.0, retry={"backoff": {"min": 2.0, "max": 2.0}})
    h.ready(worker(1))
    h.feed(client(1), protocol.gdp_request(b"r1", b"echo", [b"x"], protocol.request_fields(2.5)))
    fail(h, 1)
    h.advance(1.0)  # its retry comes at 1 to 2 s: a late tick finds it held past its deadline
    (task,) = h.core.tasks.values()
    assert task in task.service.delayed
    h.now += 2.0
    h.advance(0.0)
    assert h.replies_of(client(1)) == [(b"r1", protocol.EXPIRED, (PAST_DEADLINE,))]
    h.request(client(2), b"r2")
    fail(h, 1)
    h.feed(client(2), protocol.gdp_cancel(b"r2"))
    assert not h.core.tasks and h.core.report(h.now).services[0].delayed == 0
    h.advance(5.0)
    assert len(h.tasks_of(worker(1))) == 2 and h.replies_of(client(2)) == []


@pytest.mark.parametrize(
    ("text", "policy"),
    [
        ("3", RetryPolicy(retries=3)),
        ("retries=2/backoff=0.5..4/statuses=500+502", RetryPolicy(2, 0.5, 4.0, (500, 502))),
        ("backoff=20..", RetryPolicy(min=20.0, max=20.0)),
    ],
)
def test_the_text_form_reads_and_writes_a_policy(text: str, policy: RetryPolicy) -> None:
    assert RetryPolicy.of(retry_text(text)) == policy
    assert RetryPolicy.of(retry_text(policy.text())) == policy
    assert FlowLimits().merged({"retry": policy.as_json()}).retry == policy


@pytest.mark.parametrize(
    "text", ["retries=101", "retries=-1", "backoff=0..1", "backoff=5..1", "statuses=404", "statuses=500+500", "x=1", ""]
)
def test_a_bad_policy_says_what_is_wrong(text: str) -> None:
    with pytest.raises(ValueError, match="retr"):
        retry_text(text)


def test_the_backoff_doubles_up_to_its_max_and_the_jitter_keeps_it_within_half() -> None:
    policy = RetryPolicy(retries=10, min=0.25, max=3.0)
    assert [policy.wait(n, 1.0) for n in range(1, 7)] == [0.25, 0.5, 1.0, 2.0, 3.0, 3.0]
    assert [policy.wait(n, 0.0) for n in (1, 4, 100)] == [0.125, 1.0, 1.5]


def test_a_handed_over_answer_marked_for_a_retry_reaches_the_client_without_the_mark() -> None:
    """A run an earlier instance dispatched is not retried by the next one: its answer stands, unmarked."""
    old = Harness(handover_key=b"k" * 32, instance=b"I1I1")
    old.ready(worker(1))
    old.request(client(1), b"rid-1", body=b"payload")
    [(task_id, _, _)] = old.tasks_of(worker(1))
    new = Harness(handover_key=b"k" * 32, instance=b"I2I2", recovering=True, seed=1)
    new.ready(worker(1))
    new.feed(worker(1), protocol.gdp_handover(task_id, protocol.UNAVAILABLE, list(MARKED)))
    new.request(client(1), b"rid-1", body=b"payload")
    assert new.replies_of(client(1)) == [(b"rid-1", protocol.UNAVAILABLE, (b"upstream down",))]


def test_a_retry_is_not_a_run_lost_with_its_worker() -> None:
    """``max_attempts`` (3) counts the runs lost with their workers: two retries and two losses do not fail a task."""
    h = Harness(heartbeat_interval=1000.0)
    h.core.set_flow("echo", 0.0, retry={"backoff": {"min": 0.01, "max": 0.01}})
    h.ready(worker(1))
    h.request(client(1), b"r1")
    for _ in range(2):
        fail(h, 1)
        h.advance(0.02)
    for n in (2, 3):  # its worker leaves twice: the task is reissued to the next one
        h.feed(worker(n - 1), protocol.gdp_worker_command(protocol.DISCONNECT))
        h.ready(worker(n))
    task_id = h.tasks_of(worker(3))[-1][0]
    h.answer(worker(3), task_id, b"done", b"echo")
    assert h.replies_of(client(1)) == [(b"r1", protocol.OK, (b"done",))]

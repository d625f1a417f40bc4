"""Random interleavings of requests (with and without deadlines), workers' answers (successes, answers marked for a
retry, statuses the policy names or not), cancels, policy changes and time against the sans-IO core's retries.

Invariants: a request is answered at most once; a task is dispatched at most ``retries + 1`` times under the
policy in force (workers never leave here, so no reissue adds attempts); no task is dispatched at or after its
deadline, and none is answered after it; a task held for a retry is QUEUED, held off its queue (a delayed task)
and in no worker's hands; a cancelled request is never answered. At the end, once the
workers answer everything with success and time passes, every request not cancelled has had its one answer and
the core holds nothing.
"""

from __future__ import annotations

from collections import Counter

from core_harness import Harness, client, worker
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from generaldomo.sansio.broker.flow.retry import DEFAULT
from generaldomo.sansio.broker.records import Task
from generaldomo.sansio.broker.states import TaskState
from generaldomo.sansio.wire import protocol

WORKERS = (worker(1), worker(2))
CLIENT = client(1)
ANSWERS = {
    "ok": (protocol.OK, [b"done"]),
    "marked": (protocol.UNAVAILABLE, [b"down", protocol.RETRY_MARK]),
    "unmarked": (protocol.UNAVAILABLE, [b"down"]),
    "error": (protocol.WORKER_ERROR, [b"boom"]),
}


def body_of(task: Task) -> bytes:
    return task.body[0]


class RetryMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.h = Harness(heartbeat_interval=1000.0)  # workers are never silent long enough to be forgotten
        for peer in WORKERS:
            self.h.ready(peer)
        self.retries = DEFAULT.retries  # the most retries of the policies in force so far
        self.current, self.statuses = DEFAULT.retries, False  # the policy in force: its retries, whether 500 retries
        self.sent: dict[bytes, float | None] = {}  # request id -> its deadline (broker time), None: none
        self.cancelled: set[bytes] = set()
        self.dispatches: Counter[bytes] = Counter()
        self.seen = {peer: 0 for peer in WORKERS}  # dispatches of each worker read so far
        self.answered: Counter[bytes] = Counter()
        self.read = 0  # replies read so far

    def _observe(self) -> None:
        """Read what the core sent since the last step: dispatches (checked against deadlines) and answers."""
        h = self.h
        for peer in WORKERS:
            tasks = h.tasks_of(peer)
            for _, _, body in tasks[self.seen[peer] :]:
                rid = body[0]
                self.dispatches[rid] += 1
                deadline = self.sent[rid]
                assert deadline is None or h.now < deadline, f"{rid!r} dispatched at {h.now}, deadline {deadline}"
                assert self.dispatches[rid] <= self.retries + 1, f"{rid!r} dispatched {self.dispatches[rid]} times"
            self.seen[peer] = len(tasks)
        replies = [r for r in h.replies_of(CLIENT) if r[1] is not None]
        for rid, status, _ in replies[self.read :]:
            self.answered[rid] += 1
            assert self.answered[rid] == 1, f"{rid!r} answered twice"
            assert rid not in self.cancelled, f"cancelled {rid!r} answered"
            deadline = self.sent[rid]
            assert deadline is None or h.now <= deadline or status == protocol.EXPIRED
        self.read = len(replies)

    @rule(deadline=st.none() | st.integers(1, 6))
    def request(self, deadline: int | None) -> None:
        rid = b"r%d" % len(self.sent)
        self.sent[rid] = None if deadline is None else self.h.now + deadline
        fields = b"" if deadline is None else protocol.request_fields(float(deadline))
        self.h.feed(CLIENT, protocol.gdp_request(rid, b"echo", [rid], fields))
        self._observe()

    @rule(n=st.sampled_from(range(len(WORKERS))), answer=st.sampled_from(sorted(ANSWERS)))
    def answer(self, n: int, answer: str) -> None:
        peer = WORKERS[n]
        record = self.h.core.workers[peer]
        if record.task is None:
            return
        task, status, body = record.task, *ANSWERS[answer]
        before = task.retries
        self.h.feed(peer, protocol.gdp_ready(b"echo", (task.id, status, body)))
        self._observe()
        retried = answer == "marked" or (answer == "error" and self.statuses)
        if body_of(task) in self.cancelled:  # its result dropped
            assert task.state is TaskState.DONE and not self.answered[body_of(task)]
        elif retried and before < self.current and self.current > 0:  # held for a retry, or answered 504 at once
            held = task in task.service.delayed
            assert held or self.answered[body_of(task)] == 1
            assert not held or (task.state is TaskState.QUEUED and task.retries == before + 1)
        else:  # answered as it is
            assert task.state is TaskState.DONE and self.answered[body_of(task)] == 1

    @rule(seconds=st.sampled_from([0.01, 0.05, 0.2, 0.5, 1.0, 3.0]))
    def advance(self, seconds: float) -> None:
        self.h.advance(seconds)
        self._observe()

    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        live = sorted(rid for rid in self.sent if not self.answered[rid] and rid not in self.cancelled)
        if not live:
            return
        rid = data.draw(st.sampled_from(live))
        self.cancelled.add(rid)
        self.h.feed(CLIENT, protocol.gdp_cancel(rid))
        self._observe()

    @rule(retries=st.integers(0, 3), low=st.sampled_from([0.05, 0.5, 2.0]), statuses=st.sampled_from([[], [500]]))
    def policy(self, retries: int, low: float, statuses: list[int]) -> None:
        self.retries = max(self.retries, retries)  # tasks retried under an earlier policy keep their count
        self.current, self.statuses = retries, bool(statuses)
        policy = {"retries": retries, "backoff": {"min": low, "max": 4 * low}, "statuses": statuses}
        self.h.core.set_flow("echo", self.h.now, retry=policy)

    @invariant()
    def held_tasks_are_out_of_queues_and_counted(self) -> None:
        tasks = self.h.core.tasks.values()
        (service,) = self.h.core.resolver.services()
        held = [t for t in tasks if t in service.delayed]
        assert all(t.worker is None and t.state is TaskState.QUEUED for t in held)
        assert not any(t in held for t in service.pending)

    def teardown(self) -> None:
        h = self.h
        for _ in range(200):  # bounded: each round answers what the workers hold, then lets the backoffs end
            for peer in WORKERS:
                record = h.core.workers[peer]
                if record.task is not None:
                    h.feed(peer, protocol.gdp_ready(b"echo", (record.task.id, protocol.OK, [b"done"])))
                    self._observe()
            h.advance(1.0)
            self._observe()
            if not h.core.tasks:
                break
        assert not h.core.tasks
        for rid in self.sent:
            assert self.answered[rid] == (0 if rid in self.cancelled else 1), rid


TestRetries = RetryMachine.TestCase
TestRetries.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)

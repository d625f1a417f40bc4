"""Random interleavings of delayed requests, deadlines, workers and time against the sans-IO core.

Invariants: a delayed task is never dispatched before its time; held tasks hold no other task back (no worker
waits while a task its service could give it is queued, and none is held past its time once the core ticked when it
asked); an early ``504`` (deadline-aware dispatch) comes only when the estimate says so: the time the task had
left was less than the service's estimated service time, that estimate learnt from enough answered tasks (or
its not-before time was not before its deadline); every request is answered at most once, and in the end every one
is answered.
"""

from __future__ import annotations

import re

from core_harness import checked
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from worker_commands import parse_worker_command

from generaldomo.sansio.broker.core import BrokerCore, Peer, Settings
from generaldomo.sansio.broker.core.expiry import UNREACHABLE
from generaldomo.sansio.broker.states import WorkerState
from generaldomo.sansio.wire import protocol

CLIENT = Peer(0, b"client")
WORKERS = tuple(Peer(1, b"w%d" % n) for n in range(2))
AFTER = 3  # answered tasks before the estimate is used
_EARLY = re.compile(rb"\((\d+\.\d+) s left, (\d+\.\d+) s estimated\)")


class DelayMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.core = BrokerCore(
            settings=Settings(1.0, 3, deadline_estimate_after=AFTER, keep_answers=1000.0),
            instance=b"test",
            random=__import__("random").Random(0).randbytes,
        )
        self.now = 0.0
        self.n = 0
        self.due: dict[bytes, float] = {}  # request id -> the earliest time it may be dispatched
        self.deadline: dict[bytes, float] = {}
        self.answers: dict[bytes, bytes] = {}
        self.running: dict[Peer, bytes] = {}  # worker -> task id it runs
        for worker in WORKERS:
            self._feed(worker, protocol.gdp_ready(b"echo"))

    def _feed(self, peer: Peer, frames: list[bytes]) -> None:
        self._act(self.core.receive(peer, frames, self.now))

    def _act(self, out: list) -> None:  # type: ignore[type-arg]
        for peer, frames in checked(out):
            if peer == CLIENT:
                reply = protocol.parse_client_reply(frames)
                if reply is None:
                    continue  # a heartbeat's answer
                rid, status, _, body = reply
                assert rid not in self.answers, "answered twice"
                self.answers[rid] = status
                if status == protocol.EXPIRED and body and UNREACHABLE.encode() in body[0]:
                    self._check_early(rid, body[0])
                continue
            parsed = parse_worker_command(frames)
            if parsed and parsed[0] == protocol.REQUEST:
                task_id, _, *body = parsed[1]
                rid = body[0]
                assert self.now >= self.due[rid], f"{rid!r} dispatched at {self.now}, before {self.due[rid]}"
                assert peer not in self.running
                self.running[peer] = task_id

    def _check_early(self, rid: bytes, reason: bytes) -> None:
        found = _EARLY.search(reason)
        assert found is not None, reason
        left, estimate = float(found[1]), float(found[2])
        deadline, due = self.deadline[rid], self.due[rid]
        if deadline <= due + 1e-3:  # its not-before time leaves it no time
            return
        assert left <= estimate + 1e-3, reason  # the estimate said so
        assert estimate > 0 and self._service().stats.completed >= AFTER, reason
        assert abs(left - (deadline - max(self.now, due))) < 2e-3, (reason, self.now, deadline)

    def _service(self):  # type: ignore[no-untyped-def]
        return next(s for s in self.core.resolver.services() if s.name == "echo")

    @rule(delay=st.sampled_from([None, 0.3, 1.0, 2.5, 6.0]), deadline=st.sampled_from([None, 0.2, 1.0, 3.0, 9.0]))
    def submit(self, delay: float | None, deadline: float | None) -> None:
        self.n += 1
        rid = b"r%d" % self.n
        self.due[rid] = self.now + (delay or 0.0)
        self.deadline[rid] = float("inf") if deadline is None else self.now + deadline
        fields = protocol.request_fields(deadline, not_before=delay)
        self._feed(CLIENT, protocol.gdp_request(rid, b"echo", [rid], fields))

    @precondition(lambda self: bool(self.running))
    @rule(which=st.integers(0, 1))
    def answer(self, which: int) -> None:
        self._answer(list(self.running)[which % len(self.running)])

    def _answer(self, worker: Peer) -> None:
        task_id = self.running.pop(worker)
        self._feed(worker, protocol.gdp_ready(b"echo", (task_id, protocol.OK, [b"ok"])))

    @rule(seconds=st.sampled_from([0.05, 0.4, 1.0, 3.0]))
    def wait(self, seconds: float) -> None:
        """Let time pass, ticking whenever the core asks (as the IO loop does), and heartbeating as peers do."""
        end = self.now + seconds
        while self.now < end:  # in steps of at most half a heartbeat interval, the peers heartbeating after each
            step = min(end, self.now + 0.5)
            for _ in range(1000):
                when = self.core.deadline()
                if when is None or when > step:
                    break
                self.now = max(self.now, when)
                self._act(self.core.tick(self.now))
            self.now = step
            self._act(self.core.tick(self.now))
            for worker in WORKERS:
                self._feed(worker, protocol.gdp_worker_command(protocol.HEARTBEAT))
            self._feed(CLIENT, protocol.gdp_client_heartbeat())

    @invariant()
    def held_tasks_hold_nobody_back(self) -> None:
        service = self._service() if any(s.name == "echo" for s in self.core.resolver.services()) else None
        if service is None:
            return
        assert not (service.waiting and service.pending and service.flow.admits(self.now)), "a worker waits"
        nxt = service.delayed.next_due()
        assert nxt is None or nxt > self.now or self.core.deadline() is not None

    def teardown(self) -> None:
        # every request is answered in the end: the workers answer, time passes
        for _ in range(100):
            for worker in list(self.running):
                self._answer(worker)
            if len(self.answers) == self.n:
                break
            self.wait(3.0)
        assert len(self.answers) == self.n, set(self.due) - set(self.answers)
        assert all(w.state is not WorkerState.BUSY for w in self.core.workers.values())


TestDelays = DelayMachine.TestCase
TestDelays.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)

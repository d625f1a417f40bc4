"""Random interleavings of clients, workers, failures and time against the sans-IO core.

Invariants: every accepted request is answered exactly once, and only to the client that asked with the
result of its own request; no task is held by two workers; counters add up; lost tasks are reissued.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from generaldomo.sansio import protocol
from generaldomo.sansio.core import BrokerCore, Peer, Settings
from generaldomo.sansio.events import Dialect

SERVICES = (b"a", b"b")
CLIENTS = tuple(Peer(0, b"c%d" % n) for n in range(3))
SCANNER = Peer(2, b"scanner")
INTERVAL = 1.0
LIVENESS = 3
MAX_ATTEMPTS = 3
QUEUE_TIMEOUT = 6.0


class BrokerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        settings = Settings(INTERVAL, LIVENESS, MAX_ATTEMPTS, queue_timeout=QUEUE_TIMEOUT)
        self.core = BrokerCore(settings=settings, instance=b"sm")
        self.now = 0.0
        self.serial = 0
        self.expected: dict[tuple[Peer, bytes], bytes] = {}  # accepted request -> its body
        self.finals: Counter[tuple[Peer, bytes]] = Counter()
        self.failed: set[tuple[Peer, bytes]] = set()
        self.expired: set[tuple[Peer, bytes]] = set()
        self.live: dict[Peer, bytes] = {}  # worker -> its service
        self.holding: dict[Peer, tuple[bytes, bytes]] = {}  # worker -> (task id, body) it was given
        self.silent: set[Peer] = set()
        self.ghosts: list[tuple[Peer, bytes, bytes, bytes]] = []  # forgotten worker, service, task id, body
        self.next_worker = 0

    # ------------------------------------------------------------------------------------------ plumbing

    def deliver(self, out: list) -> None:
        for peer, frames in out:
            if peer == SCANNER:
                continue  # whatever garbage gets back is not checked here
            if peer in CLIENTS:
                parsed = protocol.parse_client_reply(frames)
                assert parsed is not None
                rid, status, _, body = parsed
                key = (peer, rid)
                assert key in self.expected, "a reply to a request this client never made"
                if status is None:
                    continue
                self.finals[key] += 1
                if status == protocol.OK:
                    assert body == (self.expected[key] + b"!",), "a result for another request"
                elif status == protocol.EXPIRED:
                    self.expired.add(key)
                else:
                    assert status == protocol.UNAVAILABLE
                    self.failed.add(key)
                continue
            parsed = protocol.parse_worker_command(frames)
            assert parsed is not None
            command, args = parsed
            if command == protocol.REQUEST:
                assert peer in self.live and peer not in self.holding, "a task for a worker that is not waiting"
                self.holding[peer] = (args[0], args[2])
            elif command == protocol.DISCONNECT and peer in self.live:
                self.forget(peer)

    def feed(self, peer: Peer, frames: list[bytes]) -> None:
        self.deliver(self.core.receive(peer, frames, self.now))

    def forget(self, peer: Peer) -> None:
        service = self.live.pop(peer)
        self.silent.discard(peer)
        if peer in self.holding:
            task_id, body = self.holding.pop(peer)
            self.ghosts.append((peer, service, task_id, body))

    # ------------------------------------------------------------------------------------------ rules

    @rule(client=st.sampled_from(CLIENTS), service=st.sampled_from(SERVICES))
    def request(self, client: Peer, service: bytes) -> None:
        self.serial += 1
        rid = b"%s-%d" % (client.address, self.serial)
        body = b"%s/%s/%s" % (client.address, rid, service)
        self.expected[(client, rid)] = body
        self.feed(client, protocol.gdp_request(rid, service, [body]))

    def unanswered(self) -> list[tuple[Peer, bytes]]:
        return sorted(key for key in self.expected if not self.finals[key])

    @precondition(lambda self: self.unanswered())
    @rule(data=st.data())
    def retry(self, data: st.DataObject) -> None:
        client, rid = data.draw(st.sampled_from(self.unanswered()))
        service = self.expected[(client, rid)].rsplit(b"/", 1)[1]
        before = len(self.core.tasks)
        self.feed(client, protocol.gdp_request(rid, service, [self.expected[(client, rid)]]))
        assert len(self.core.tasks) == before, "a retry of a live request became a second task"

    @rule(service=st.sampled_from(SERVICES))
    def worker_joins(self, service: bytes) -> None:
        self.next_worker += 1
        peer = Peer(1, self.next_worker)
        self.live[peer] = service
        self.feed(peer, protocol.gdp_ready(service))

    @precondition(lambda self: self.holding)
    @rule(data=st.data())
    def worker_answers(self, data: st.DataObject) -> None:
        peer = data.draw(st.sampled_from(sorted(self.holding)))
        task_id, body = self.holding.pop(peer)
        self.feed(peer, protocol.gdp_ready(self.live[peer], (task_id, protocol.OK, [body + b"!"])))

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def worker_disconnects(self, data: st.DataObject) -> None:
        peer = data.draw(st.sampled_from(sorted(self.live)))
        self.forget(peer)
        self.feed(peer, protocol.worker_command(Dialect.GDP, protocol.DISCONNECT))

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def worker_falls_silent(self, data: st.DataObject) -> None:
        self.silent.add(data.draw(st.sampled_from(sorted(self.live))))

    @rule(seconds=st.sampled_from([0.5, 1.0, 2.5]))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds
        for peer in sorted(self.live):
            if peer not in self.silent:
                self.feed(peer, protocol.worker_command(Dialect.GDP, protocol.HEARTBEAT))
        out = self.core.tick(self.now)
        for peer in [p for p in self.live if p not in self.core.workers]:
            assert peer in self.silent, "a heartbeating worker was expired"
            self.forget(peer)
        self.deliver(out)

    @precondition(lambda self: self.ghosts)
    @rule(data=st.data())
    def ghost_answers_late(self, data: st.DataObject) -> None:
        index = data.draw(st.integers(0, len(self.ghosts) - 1))
        peer, service, task_id, body = self.ghosts.pop(index)
        self.feed(peer, protocol.gdp_ready(service, (task_id, protocol.OK, [body + b"!"])))
        if peer in self.core.workers:  # a ghost that answered is registered again by its READY
            self.live[peer] = service

    @rule(
        service=st.sampled_from(SERVICES),
        rate=st.sampled_from([None, 0.5, 2.0]),
        concurrency=st.sampled_from([None, 1, 2]),
    )
    def flow_limits_change(self, service: bytes, rate: float | None, concurrency: int | None) -> None:
        self.deliver(self.core.set_flow(service.decode(), rate, 1, concurrency, self.now))

    @rule(garbage=st.lists(st.binary(max_size=6), max_size=4))
    def garbage_arrives(self, garbage: list[bytes]) -> None:
        self.feed(SCANNER, garbage)

    # ------------------------------------------------------------------------------------------ invariants

    @invariant()
    def answered_at_most_once(self) -> None:
        assert all(count <= 1 for count in self.finals.values())

    @invariant()
    def no_task_held_twice(self) -> None:
        holders = [w.task.id for w in self.core.workers.values() if w.task is not None]
        assert len(holders) == len(set(holders))
        for task in self.core.tasks.values():
            assert task.worker is None or task.worker.task is task

    @invariant()
    def flight_is_counted_right(self) -> None:
        for service in self.core.resolver.services():
            flying = [t for t in self.core.tasks.values() if t.service is service and t.in_flight]
            assert service.flow.in_flight == len(flying)
            assert all(t.worker is not None for t in flying)

    @invariant()
    def counters_add_up(self) -> None:
        c = self.core.counters
        accepted = len(self.expected)
        assert accepted == c["completed"] + len(self.core.tasks)
        assert c["failed"] == len(self.failed)
        assert c["expired"] == len(self.expired)

    def teardown(self) -> None:
        # Drain: limits lifted, fresh reliable workers answer everything left; then every request has exactly
        # one answer.
        for service in SERVICES:
            self.deliver(self.core.set_flow(service.decode(), None, 1, None, self.now))
            self.worker_joins(service)
        for _ in range(10 * (len(self.expected) + 1)):
            if not self.holding:
                break
            peer = sorted(self.holding)[0]
            task_id, body = self.holding.pop(peer)
            self.feed(peer, protocol.gdp_ready(self.live[peer], (task_id, protocol.OK, [body + b"!"])))
        assert not self.core.tasks
        assert all(self.finals[key] == 1 for key in self.expected), "a request was never answered"


BrokerMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestBrokerMachine = BrokerMachine.TestCase

"""Random interleavings of broker restarts (a new core instance on the same hand-over key), clients resending,
workers finishing, resuming and handing over, against the sans-IO core and the worker sessions.

Invariants: no request runs twice (the workers count the runs of each request; no worker is lost here, so a
second run could only come from a restart); every answer a client gets is its own request's result; and at the
end, after time has passed and every worker answered, every request has been answered.
"""

from __future__ import annotations

import random

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from generaldomo.sansio.broker.core import BrokerCore, Peer, Settings
from generaldomo.sansio.config.settings import PeerSettings
from generaldomo.sansio.peer.session import Reconnect, RunTask, ToBroker, WorkerSession
from generaldomo.sansio.wire import protocol
from generaldomo.sansio.wire.peer_events import BrokerDisconnect, BrokerHeartbeat, TaskRequest

KEY = bytes(range(32))
INTERVAL = 1.0
CLIENTS = tuple(Peer(0, b"c%d" % n) for n in range(2))
WORKERS = tuple(range(1, 4))
SERVICE = b"s"


class Worker:
    """A worker process: its session, the socket generation it is on (a new peer address per socket)."""

    def __init__(self, number: int, now: float) -> None:
        self.number = number
        self.session = WorkerSession(SERVICE, PeerSettings(INTERVAL, 3), now)
        self.socket = 0
        self.running: RunTask | None = None
        self.outbox: list[list[bytes]] = [list(a.frames) for a in self.session.start() if isinstance(a, ToBroker)]

    @property
    def peer(self) -> Peer:
        return Peer(1, b"w%d.%d" % (self.number, self.socket))


class RestartMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.instances = 0
        self.core = self.new_core(recovering=False)
        self.serial = 0
        self.expected: dict[tuple[Peer, bytes], bytes] = {}
        self.answered: set[tuple[Peer, bytes]] = set()
        self.runs: dict[bytes, int] = {}  # body -> times a worker started it
        self.known_instance: dict[Peer, bytes | None] = dict.fromkeys(CLIENTS)
        self.workers = {n: Worker(n, self.now) for n in WORKERS}
        self.flush_workers()

    def new_core(self, recovering: bool) -> BrokerCore:
        self.instances += 1
        return BrokerCore(
            settings=Settings(INTERVAL, 3, keep_answers=1000.0, client_expiry=1000.0),
            instance=b"I%03d" % self.instances,
            started=self.now,
            random=random.Random(self.instances).randbytes,
            handover_key=KEY,
            recovering=recovering,
        )

    # ------------------------------------------------------------------------------------------ plumbing

    def deliver(self, out: list) -> None:
        for peer, frames in out:
            if peer in CLIENTS:
                self.client_gets(peer, frames)
                continue
            worker = next((w for w in self.workers.values() if w.peer == peer), None)
            if worker is None:
                continue  # an old socket of a worker: closed
            message = protocol.read_worker_message(frames)
            if isinstance(message, TaskRequest):
                self.runs[message.body[0]] = self.runs.get(message.body[0], 0) + (worker.running is None)
            self.worker_acts(worker, worker.session.receive(frames, self.now))
            assert isinstance(message, TaskRequest | BrokerHeartbeat | BrokerDisconnect)

    def worker_acts(self, worker: Worker, actions: list) -> None:
        for action in actions:
            if isinstance(action, Reconnect):
                worker.socket += 1
            elif isinstance(action, RunTask):
                assert worker.running is None
                worker.running = action
            else:
                worker.outbox.append(list(action.frames))

    def flush_workers(self) -> None:
        for worker in self.workers.values():
            while worker.outbox:
                self.deliver(self.core.receive(worker.peer, worker.outbox.pop(0), self.now))

    def client_gets(self, client: Peer, frames: list[bytes]) -> None:
        if frames[:2] == [protocol.GDP_CLIENT, b"\x04"]:
            instance, unknown = frames[2], frames[3:]
            if self.known_instance[client] not in (None, instance):
                unknown = [rid for c, rid in self.expected if c == client]  # a restart: send everything again
            self.known_instance[client] = instance
            for rid in unknown:
                if (client, rid) not in self.answered:
                    self.send((client, rid))
            return
        parsed = protocol.parse_client_reply(frames)
        assert parsed is not None
        rid, status, _, body = parsed
        assert status == protocol.OK and body == (self.expected[(client, rid)] + b"!",), "another request's result"
        self.answered.add((client, rid))

    def send(self, key: tuple[Peer, bytes]) -> None:
        client, rid = key
        self.deliver(self.core.receive(client, protocol.gdp_request(rid, SERVICE, [self.expected[key]]), self.now))

    # ------------------------------------------------------------------------------------------ rules

    @rule(client=st.sampled_from(CLIENTS))
    def request(self, client: Peer) -> None:
        self.serial += 1
        rid = b"r%d" % self.serial
        self.expected[(client, rid)] = b"%s/%s" % (client.address, rid)
        self.send((client, rid))

    @precondition(lambda self: any(w.running for w in self.workers.values()))
    @rule(data=st.data())
    def worker_finishes(self, data: st.DataObject) -> None:
        worker = data.draw(st.sampled_from([w for w in self.workers.values() if w.running]))
        task, worker.running = worker.running, None
        assert task is not None
        self.worker_acts(worker, worker.session.finish(protocol.OK, [task.body[0] + b"!"], self.now))
        self.flush_workers()

    @rule()
    def broker_restarts(self) -> None:
        """kill -9: the core's state is gone; what was in flight to it is lost; the next one starts."""
        for worker in self.workers.values():
            worker.outbox.clear()
        self.core = self.new_core(recovering=True)

    @rule(seconds=st.sampled_from([0.5, 1.0]))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds
        for worker in self.workers.values():
            self.worker_acts(worker, worker.session.tick(self.now))
            if worker.running is not None:  # the heartbeat thread of a busy worker heartbeats too
                beat = protocol.gdp_worker_command(protocol.HEARTBEAT)
                if beat not in worker.outbox:
                    worker.outbox.append(beat)
        self.flush_workers()
        for client in CLIENTS:  # a client heartbeats while it waits, asking about what it waits for
            waiting = [r for c, r in self.expected if c == client and (c, r) not in self.answered]
            if waiting:
                self.deliver(self.core.receive(client, protocol.gdp_client_heartbeat(ids=waiting[:64]), self.now))
        self.deliver(self.core.tick(self.now))
        self.flush_workers()

    # ------------------------------------------------------------------------------------------ invariants

    @invariant()
    def nothing_runs_twice(self) -> None:
        assert all(n <= 1 for n in self.runs.values()), self.runs

    def teardown(self) -> None:
        for _ in range(200):
            if set(self.expected) <= self.answered:
                break
            running = [w for w in self.workers.values() if w.running]
            if running:
                self.worker_finishes_now(running[0])
            else:
                self.time_passes(1.0)
        assert set(self.expected) <= self.answered, "a request was never answered"
        self.nothing_runs_twice()

    def worker_finishes_now(self, worker: Worker) -> None:
        task, worker.running = worker.running, None
        assert task is not None
        self.worker_acts(worker, worker.session.finish(protocol.OK, [task.body[0] + b"!"], self.now))
        self.flush_workers()


RestartMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
TestRestartMachine = RestartMachine.TestCase

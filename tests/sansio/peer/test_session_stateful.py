"""Random interleavings against the sans-IO peer sessions (client and worker), with a fake clock and a scripted broker.

The broker here is a model: it holds the requests it was sent, answers them in any order (sometimes twice),
keeps its answers (as the real one does for ``keep_answers``), answers heartbeats with its instance and the
asked ids it does not know, restarts (forgetting everything, and whatever was in flight) and goes silent.
Invariants: every submitted request resolves exactly once (checked as it happens, and at the end after the
broker has answered everything); nothing is resent while the broker answers (a request goes out again only
after a reconnect, a restart, or the broker saying it does not know it); after a restart every outstanding
request is resent exactly once; a reply carries the body of its own request.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from generaldomo.sansio.config.settings import PeerSettings
from generaldomo.sansio.peer.session import (
    ClientSession,
    Fail,
    Progress,
    Reconnect,
    Resolve,
    RunTask,
    ToBroker,
    WorkerSession,
)
from generaldomo.sansio.wire import protocol
from generaldomo.sansio.wire.events import (
    Dialect,
    WorkerDisconnect,
    WorkerHandover,
    WorkerHeartbeat,
    WorkerReady,
    WorkerReply,
    WorkerResume,
)
from generaldomo.sansio.wire.peer_events import HeartbeatAnswer

INTERVAL = 1.0
LIVENESS = 3
PEER = PeerSettings(INTERVAL, LIVENESS)


class FakeBroker:
    """What a broker that keeps answers does with a client's messages."""

    def __init__(self, instance: bytes) -> None:
        self.instance = instance
        self.held: dict[bytes, bytes] = {}  # request id -> body, queued or running
        self.kept: dict[bytes, bytes] = {}  # request id -> the answer it sent
        self.silent = False

    def read(self, frames: list[bytes]) -> list[list[bytes]]:
        if self.silent:
            return []
        command, rest = frames[1], frames[2:]
        if command == protocol.gdp_request(b"", b"", [])[1]:
            request_id, _description, *body = rest
            if request_id in self.kept:
                return [self.final(request_id)]
            self.held[request_id] = body[0]
            return []
        if command == protocol.CANCEL_BYTE:
            self.held.pop(rest[0], None)
            return []
        answers = [self.final(rid) for rid in rest if rid in self.kept]
        unknown = [rid for rid in rest if rid not in self.kept and rid not in self.held]
        return [*answers, protocol.gdp_client_heartbeat(self.instance, unknown)]

    def answer(self, request_id: bytes) -> list[bytes]:
        self.kept[request_id] = self.held.pop(request_id) + b"!"
        return self.final(request_id)

    def final(self, request_id: bytes) -> list[bytes]:
        return [protocol.GDP_CLIENT, b"\x03", request_id, protocol.OK, b"", self.kept[request_id]]


class SessionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.session: ClientSession[bytes] = ClientSession(PEER, self.now)
        self.restarts = 0
        self.broker = FakeBroker(b"i0")
        self.to_broker: list[list[bytes]] = []
        self.to_client: list[list[bytes]] = []
        self.bodies: dict[bytes, bytes] = {}  # submitted request id -> body
        self.resolved: Counter[bytes] = Counter()
        self.cancelled: set[bytes] = set()
        self.sends: Counter[bytes] = Counter()  # REQUEST messages per request id
        self.may_resend: set[bytes] = set()  # ids a reason to send again has come for since last sent
        self.client_instance: bytes | None = None
        self.serial = 0
        self.fetches: set[bytes] = set()  # ids fetched (sent by "another client": put in the broker directly)

    # ------------------------------------------------------------------------------------------ plumbing

    def outstanding(self) -> set[bytes]:
        return {rid for rid in self.bodies if not self.resolved[rid] and rid not in self.cancelled}

    def act(self, actions: list) -> None:
        for action in actions:
            if isinstance(action, ToBroker):
                self.sent(list(action.frames))
            elif isinstance(action, Reconnect):
                self.to_broker.clear()  # a new socket: what was in flight on the old one is lost
                self.to_client.clear()
                self.may_resend |= self.outstanding()
            elif isinstance(action, Resolve):
                rid = action.request_id
                assert rid in self.bodies and rid not in self.cancelled, "a reply to nothing outstanding"
                self.resolved[rid] += 1
                assert self.resolved[rid] == 1, "resolved twice"
                if action.status == protocol.NOT_FOUND:  # only a fetch the broker does not know
                    assert rid in self.fetches and rid not in self.broker.held and rid not in self.broker.kept
                else:
                    assert action.status == protocol.OK and action.body == (self.bodies[rid] + b"!",)
                assert action.token == rid
            else:
                assert isinstance(action, Progress | Fail)
                assert action.request_id in self.outstanding()

    def sent(self, frames: list[bytes]) -> None:
        if frames[1] == b"\x01":
            rid = frames[2]
            if self.sends[rid]:
                assert rid in self.may_resend, "resent while the broker answers"
            self.may_resend.discard(rid)
            self.sends[rid] += 1
        self.to_broker.append(frames)

    def deliver(self, frames: list[bytes]) -> None:
        message = protocol.read_client_message(frames)
        restarted = (
            isinstance(message, HeartbeatAnswer)
            and self.client_instance is not None
            and message.instance != self.client_instance
        )
        if isinstance(message, HeartbeatAnswer):
            self.client_instance = message.instance
            self.may_resend |= set(message.unknown) & self.outstanding()
            if restarted:
                self.may_resend |= self.outstanding()
        before = {rid: self.sends[rid] for rid in self.outstanding() - self.fetches}  # (a fetch asks again)
        self.act(self.session.receive(frames, self.now))
        if restarted:
            assert {rid: self.sends[rid] - n for rid, n in before.items()} == dict.fromkeys(before, 1)

    # ------------------------------------------------------------------------------------------ rules

    @rule(body=st.binary(max_size=3))
    def submit(self, body: bytes) -> None:
        self.serial += 1
        rid = b"r%d" % self.serial
        self.bodies[rid] = body
        self.sent(self.session.submit(rid, b"echo", [body], rid, self.now))

    @rule(known=st.booleans(), body=st.binary(max_size=3))
    def fetch(self, known: bool, body: bytes) -> None:
        """Wait for the answer to a request another client sent (``known``: the broker holds it) or to an id
        the broker never saw: it resolves once, with the answer or 404."""
        self.serial += 1
        rid = b"f%d" % self.serial
        self.bodies[rid] = body
        self.fetches.add(rid)
        if known:
            self.broker.held[rid] = body
        self.sent(self.session.fetch(rid, rid, self.now))

    @precondition(lambda self: self.outstanding())
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        rid = data.draw(st.sampled_from(sorted(self.outstanding())))
        self.cancelled.add(rid)
        self.act(self.session.cancel(rid))

    @precondition(lambda self: self.to_broker)
    @rule(count=st.integers(1, 5))
    def broker_reads(self, count: int) -> None:
        for frames in self.to_broker[:count]:
            self.to_client += self.broker.read(frames)
        del self.to_broker[:count]

    @precondition(lambda self: self.broker.held and not self.broker.silent)
    @rule(data=st.data(), twice=st.booleans())
    def broker_answers(self, data: st.DataObject, twice: bool) -> None:
        rid = data.draw(st.sampled_from(sorted(self.broker.held)))  # in any order
        answer = self.broker.answer(rid)
        self.to_client += [answer, answer] if twice else [answer]

    @precondition(lambda self: self.broker.held and not self.broker.silent)
    @rule(data=st.data())
    def broker_streams(self, data: st.DataObject) -> None:
        rid = data.draw(st.sampled_from(sorted(self.broker.held)))
        self.to_client.append([protocol.GDP_CLIENT, b"\x02", rid, b"part"])

    @precondition(lambda self: self.to_client)
    @rule(count=st.integers(1, 5))
    def client_reads(self, count: int) -> None:
        arrived, self.to_client = self.to_client[:count], self.to_client[count:]
        for frames in arrived:
            self.deliver(frames)

    @precondition(lambda self: self.to_client)
    @rule()
    def a_reply_is_lost(self) -> None:  # the pipe to the client was full
        self.to_client.pop(0)

    @rule()
    def broker_restarts(self) -> None:
        self.restarts += 1
        self.broker = FakeBroker(b"i%d" % self.restarts)
        self.to_broker.clear()
        self.to_client.clear()

    @rule(silent=st.booleans())
    def broker_silence(self, silent: bool) -> None:
        self.broker.silent = silent

    @rule(seconds=st.sampled_from([0.1, 0.5, 1.0, 2.5, 100.0]))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds
        self.act(self.session.tick(self.now))

    @rule()
    def garbage_arrives(self) -> None:
        self.act(self.session.receive([b"junk", b"\x03"], self.now))

    # ------------------------------------------------------------------------------------------ invariants

    @invariant()
    def the_session_holds_what_is_outstanding(self) -> None:
        assert set(self.session.outstanding) == self.outstanding()
        assert all(n <= 1 for n in self.resolved.values())

    def teardown(self) -> None:
        """The broker comes back and answers everything: every request resolves, once."""
        self.broker.silent = False
        for _ in range(200):
            if not self.outstanding():
                break
            for frames in self.to_broker:
                self.to_client += self.broker.read(frames)
            self.to_broker.clear()
            for rid in sorted(self.broker.held):
                self.to_client.append(self.broker.answer(rid))
            arrived, self.to_client = self.to_client, []
            for frames in arrived:
                self.deliver(frames)
            self.now += INTERVAL
            self.act(self.session.tick(self.now))
        assert not self.outstanding(), f"never resolved: {sorted(self.outstanding())}"
        assert all(self.resolved[rid] == 1 for rid in self.bodies if rid not in self.cancelled)


TestSessionMachine = SessionMachine.TestCase
TestSessionMachine.settings = settings(max_examples=300, stateful_step_count=60, deadline=None)


NAME = "worker-1"
GOODBYE = tuple(protocol.gdp_worker_command(protocol.DISCONNECT))


class WorkerSessionMachine(RuleBasedStateMachine):
    """The worker's life cycle: READY, one task at a time, its result inside the next READY, heartbeats, silence
    and DISCONNECT leading to a new registration, and nothing after its own DISCONNECT."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.session = WorkerSession(b"echo", PEER, self.now, protocol.worker_info(None, 1, name=NAME))
        self.running: bytes | None = None
        self.results: Counter[bytes] = Counter()
        self.tasks = 0
        self.stopped = False
        self.finishing = False  # asked to stop after the running task
        self.goodbyes = 0
        self.last_beat = self.now
        self.sent: set[bytes] = set()  # task ids whose result went out (READY or HANDOVER)
        self.acked: set[bytes] = set()  # those a heartbeat named as taken
        self.takes_handover: bool | None = None  # the last heartbeat named an instance (None: none came yet)
        self.act(self.session.start())

    def act(self, actions: list) -> None:
        for action in actions:
            if isinstance(action, RunTask):
                assert self.running is None, "two tasks at once"
                self.running = action.task_id
                continue
            if isinstance(action, Reconnect):
                assert not self.stopped
                # DISCONNECT on the old socket, unless a task runs (RESUME claims it) or the broker refused that one
                quiet = self.running is not None or action.reason == "registering again after the refusal"
                assert action.farewell == (() if quiet else GOODBYE), "a wrong farewell"
                continue
            frames = list(action.frames)
            event = protocol.parse(frames)
            assert not self.stopped or isinstance(event, WorkerDisconnect), "sent after DISCONNECT"
            if isinstance(event, WorkerReply):
                assert event.task_id == self.running or event.final
                self.results[event.task_id] += event.final
                if self.takes_handover is not False:
                    self.sent.add(event.task_id)
            elif isinstance(event, WorkerHandover):  # a finished task's result, not known to be taken
                assert self.results[event.task_id] == 1 and event.task_id not in self.acked
                assert self.takes_handover is not False and event.task_id in self.sent
            elif isinstance(event, WorkerResume):
                assert event.task_id == self.running and self.takes_handover is not False
            elif isinstance(event, WorkerHeartbeat):
                assert self.now - self.last_beat >= INTERVAL - 1e-9
                self.last_beat = self.now
            elif isinstance(event, WorkerDisconnect):
                self.goodbyes += 1
            else:
                assert isinstance(event, WorkerReady) and self.running is None
            if isinstance(event, WorkerReady | WorkerResume):  # the same name on every socket (none: the plain form)
                assert event.name in (NAME, None)

    @rule()
    def broker_sends_a_task(self) -> None:
        self.tasks += 1
        task = protocol.worker_request(Dialect.GDP, b"t%d" % self.tasks, b"echo", [b"x"])
        self.act(self.session.receive(task, self.now))

    @rule(message=st.sampled_from([protocol.HEARTBEAT, protocol.DISCONNECT]))
    def broker_says(self, message: str) -> None:
        if message == protocol.HEARTBEAT:  # a plain one: no hand-over, nothing held
            self.takes_handover = False
            self.sent.clear()
        self.act(self.session.receive(protocol.worker_command(Dialect.GDP, message), self.now))

    @rule(instance=st.sampled_from([b"I1I1", b"I2I2"]), data=st.data())
    def hand_over_broker_beats(self, instance: bytes, data: st.DataObject) -> None:
        """A hand-over broker's heartbeat (instance I1, or I2 after a restart), taking some results."""
        taken = data.draw(st.lists(st.sampled_from(sorted(self.sent)), unique=True) if self.sent else st.just([]))
        self.acked.update(taken)
        self.takes_handover = True
        self.act(self.session.receive(protocol.worker_heartbeat(instance, taken), self.now))

    @precondition(lambda self: self.running is not None)
    @rule(partial=st.booleans())
    def handler_finishes(self, partial: bool) -> None:
        if partial:
            self.act(self.session.partial([b"part"]))
        task_id, self.running = self.running, None
        finishing, self.finishing = self.finishing, False
        self.act(self.session.finish(protocol.OK, [b"x"], self.now))
        assert self.results[task_id] == (0 if self.stopped else 1)
        self.stopped = self.stopped or finishing

    @rule(seconds=st.sampled_from([0.3, 1.0, 2.5, 100.0]))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds
        self.act(self.session.tick(self.now))

    @rule(finish=st.booleans())
    def stop(self, finish: bool) -> None:
        self.act(self.session.stop(finish))
        self.stopped = self.stopped or not finish or self.running is None
        self.finishing = finish and not self.stopped

    @invariant()
    def says_goodbye_once(self) -> None:
        assert self.goodbyes == (1 if self.stopped else 0)
        assert all(n == 1 for n in self.results.values())

    @invariant()
    def holds_what_was_not_taken(self) -> None:
        held = {task_id for task_id in self.results if task_id in self.session.held}  # (task ids are nonces)
        assert not held & self.acked
        if self.takes_handover is not False:
            assert held == (self.sent - self.acked)


TestWorkerSessionMachine = WorkerSessionMachine.TestCase
TestWorkerSessionMachine.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)

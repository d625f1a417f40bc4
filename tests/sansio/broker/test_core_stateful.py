"""Random interleavings of clients, workers, failures and time against the sans-IO core.

Invariants: every accepted request is answered at most once per ask (a re-ask may get the kept answer again), only
to the client that asked, with the result of its own request; a cancelled request is never answered; no task is held
by two workers; counters add up; lost tasks are reissued; the bytes of held requests never exceed the queue budgets;
no task is dispatched after its deadline, a request is never answered 504 for its deadline before that deadline, and
a worker that understands CANCEL is told when the task it runs is cancelled or passes its deadline (and only then);
a task a worker answers 429 ("slow down") is queued again, never lost nor failed for it (only losing its worker
max_attempts times fails it), and the service's adapted rate stays within its bounds and never above a configured
rate; a task a worker answers 503 marked for a retry is held and queued again, never lost, and answered that 503
only once it has had its retries. A task its worker fails (500) is answered once and kept as a dead letter; an
admin's replay of one is a new task answered once, to the admin, never to the first client, and a letter is replayed
at most once; the dead letters kept are those made less those replayed, dropped and evicted. At the end, after every
client re-asks about what it still waits for (and asks again for what the broker does not know), every request that
was not cancelled has been answered.
"""

from __future__ import annotations

import json
import random
from collections import Counter

from core_harness import checked
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from worker_commands import parse_worker_command

from generaldomo.sansio.broker.access import Credential, Role
from generaldomo.sansio.broker.accounts.ledger import MARGIN, Holding, request_charge
from generaldomo.sansio.broker.core import BrokerCore, Peer, Settings
from generaldomo.sansio.broker.flow.adaptive import AdaptiveLimits
from generaldomo.sansio.broker.flow.flow import FlowLimits
from generaldomo.sansio.broker.flow.retry import DEFAULT
from generaldomo.sansio.broker.mmi import FlowChange
from generaldomo.sansio.broker.states import TaskState
from generaldomo.sansio.wire import protocol
from generaldomo.sansio.wire.dialects import PREFIX
from generaldomo.sansio.wire.events import Dialect

SERVICES = (b"a", b"b")
# three direct clients, and two behind one proxy (one connection: envelope addresses with a shared first hop)
CLIENTS = (*(Peer(0, b"c%d" % n) for n in range(3)), *(Peer(0, (b"proxy", b"p%d" % n)) for n in range(2)))
SCANNER = Peer(2, b"scanner")
THIEF = Peer(0, b"thief")  # another client key that replays the others' request ids (with credentials only)
ADMIN = Peer(0, b"admin")  # replays dead letters (mmi.dead)
INTERVAL = 1.0
LIVENESS = 3
MAX_ATTEMPTS = 3
QUEUE_TIMEOUT = 6.0
# a request here is charged its overhead and about 20 bytes: the budgets bite after a dozen queued requests
QUEUE_BYTES = 12 * request_charge(20, 1, b"", b"")
SERVICE_QUEUE_BYTES = 8 * request_charge(20, 1, b"", b"")
Key = tuple[Peer, bytes]


class BrokerMachine(RuleBasedStateMachine):
    keyed = False  # peers without credentials: request ids match by id alone

    def __init__(self) -> None:
        super().__init__()
        settings = Settings(
            INTERVAL, LIVENESS, MAX_ATTEMPTS, queue_timeout=QUEUE_TIMEOUT, queue_bytes=QUEUE_BYTES,
            service_queue_bytes=SERVICE_QUEUE_BYTES, keep_answers=4.0, keep_bytes=8192, service_idle=2.0,
            client_expiry=INTERVAL * LIVENESS,
        )  # fmt: skip
        self.core = BrokerCore(settings=settings, instance=b"sm", random=random.Random(0).randbytes)
        self.now = 0.0
        self.serial = 0
        self.expected: dict[Key, bytes] = {}  # every request made -> its body
        self.asks: Counter[Key] = Counter()  # times a request was sent or re-asked about
        self.finals: Counter[Key] = Counter()  # final answers the broker sent
        self.lost: Counter[Key] = Counter()  # of those, the ones the client's pipe lost
        self.losing: set[Peer] = set()  # clients whose next final answer is lost
        self.failed: Counter[Key] = Counter()  # final answers of each status
        self.expired: Counter[Key] = Counter()
        self.cancelled: set[Key] = set()
        self.quiet: set[Peer] = set()  # clients that stopped heartbeating
        self.live: dict[Peer, bytes] = {}  # worker -> its service
        self.holding: dict[Peer, tuple[bytes, bytes]] = {}  # worker -> (task id, body) it was given
        self.tried_again: Counter[bytes] = Counter()  # bodies of the tasks answered 503 marked for a retry
        self.silent: set[Peer] = set()
        self.ghosts: list[tuple[Peer, bytes, bytes, bytes]] = []  # forgotten worker, service, task id, body
        self.next_worker = 0
        self.loose: set[str] = set()  # services whose byte limit changed while tasks flew
        self.deadlines: dict[Key, float] = {}  # requests with a deadline -> when (the broker's clock)
        self.modern: set[Peer] = set()  # workers that say they understand request fields and CANCEL
        self.told: set[bytes] = set()  # task ids a worker was told to drop
        self.tenants: dict[Key, tuple[str | None, int]] = {}  # requests' tenant and priority fields
        self.flags: dict[Key, int] = {}  # requests' flags (detached, known service)
        self.served: set[bytes] = set()  # services a worker ever joined
        self.not_found: dict[Key, frozenset[bytes]] = {}  # requests answered 404 -> services served by then
        self.losses: Counter[bytes] = Counter()  # request body -> times its task was lost with a worker
        self.garbage_answers = 0  # final answers the scanner got (garbage may read as a request, refused or served)
        self.mmi_asked: set[bytes] = set()  # the admin's mmi.dead request ids
        self.replays: set[bytes] = set()  # request ids of the replays the broker accepted
        self.replay_finals: Counter[bytes] = Counter()  # final answers the admin got for them
        self.replay_statuses: Counter[bytes] = Counter()  # and their statuses
        self.replayed: set[bytes] = set()  # dead letters' ids replayed
        self.names: dict[Peer, str] = {}  # modern workers -> the name their peer info gives
        self.keys: dict[Peer, str] = {}  # workers that reconnected, or forged a name -> the key they hold

    # ------------------------------------------------------------------------------------------ plumbing

    def deliver(self, out: list) -> None:
        for peer, frames in checked(out):
            if peer == SCANNER:  # what garbage gets back is only counted: a final answer, or a reply in another dialect
                parsed_reply = protocol.parse_client_reply(frames)
                final = parsed_reply is not None and parsed_reply[1] is not None
                other = any(  # (an MDP client reads every reply as an answer)
                    tuple(frames[: len(prefix)]) == prefix
                    for (dialect, worker), prefix in PREFIX.items()
                    if not worker and dialect is not Dialect.GDP
                )
                self.garbage_answers += final or other
                continue
            if peer in CLIENTS or peer == THIEF:
                self.client_gets(peer, frames)
                continue
            if peer == ADMIN:
                self.admin_gets(frames)
                continue
            parsed = parse_worker_command(frames)
            assert parsed is not None
            command, args = parsed
            if command == protocol.REQUEST:
                assert peer in self.live and peer not in self.holding, "a task for a worker that is not waiting"
                task = self.core.tasks[args[0]]
                assert task.deadline is None or task.deadline > self.now, "a task dispatched after its deadline"
                fields = frames[1] == b"\x07"
                assert fields == (peer in self.modern and task.deadline is not None), "fields for an old worker"
                self.holding[peer] = (args[0], args[2])
            elif command == protocol.CANCEL:
                assert peer in self.modern, "a CANCEL to a worker that does not understand one"
                assert self.holding[peer][0] == args[0], "a CANCEL of a task the worker does not hold"
                assert self.core.tasks[args[0]].state is TaskState.CANCELLED
                self.told.add(args[0])
            elif command == protocol.DISCONNECT and peer in self.live:
                self.forget(peer)

    def client_gets(self, peer: Peer, frames: list[bytes]) -> None:
        if frames[:2] == [protocol.GDP_CLIENT, b"\x04"]:  # the answer to a heartbeat: re-send what it does not know
            assert frames[2] == b"sm"
            for rid in frames[3:]:
                if (peer, rid) in self.expected and (peer, rid) not in self.cancelled:  # (a thief asks others' ids)
                    self.send_request((peer, rid))
            return
        parsed = protocol.parse_client_reply(frames)
        assert parsed is not None
        rid, status, _, body = parsed
        key = (peer, rid)
        assert key in self.expected, "a reply to a request this client never made"
        assert key not in self.cancelled, "an answer to a cancelled request"
        if status is None:
            return
        self.finals[key] += 1
        if status == protocol.OK:
            assert body == (self.expected[key] + b"!",), "a result for another request"
        elif status == protocol.EXPIRED:
            self.expired[key] += 1
            if b"deadline" in body[0]:
                assert self.deadlines[key] <= self.now, "a 504 before the request's deadline"
        elif status == protocol.UNAVAILABLE:
            self.failed[key] += 1
            if body == (b"try again",):  # its retries spent: the last answer, without the retry mark
                assert self.tried_again[self.expected[key]] > DEFAULT.retries, "answered before its retries"
            else:
                assert self.losses[self.expected[key]] >= MAX_ATTEMPTS, "failed, but not lost with its workers"
        elif status == protocol.WORKER_ERROR:
            assert body == (b"boom",), "another failure than the worker's"
        elif status == protocol.NOT_FOUND:
            service = self.expected[key].rsplit(b"/", 1)[1]
            assert self.flags.get(key, 0) & protocol.FLAG_KNOWN_SERVICE, "a 404 to a request that did not ask"
            # (a 404 lost earlier comes again from the kept answers when re-asked about, even after a worker for
            # the service joined: it is checked against the services served when it was made)
            served = self.not_found.setdefault(key, frozenset(self.served))
            assert service not in served, "a 404 for a service that had workers"
        else:
            assert status == protocol.OVER_BUDGET and b"budget" in body[0]
        if peer in self.losing:
            self.losing.discard(peer)
            self.lost[key] += 1

    def admin_gets(self, frames: list[bytes]) -> None:
        """An answer to the admin: of an ``mmi.dead`` request (a replay accepted: its request id), or a replay's."""
        parsed = protocol.parse_client_reply(frames)
        assert parsed is not None
        rid, status, _, body = parsed
        if status is None:
            return
        if rid in self.mmi_asked:
            if status == protocol.OK and b"request_id" in body[0]:
                answer = json.loads(body[0])
                self.replays.add(bytes.fromhex(answer["request_id"]))
                assert answer["replayed"] not in self.replayed, "a dead letter replayed twice"
                self.replayed.add(answer["replayed"])
            return
        assert rid in self.replays, "an answer to the admin for no replay"
        self.replay_finals[rid] += 1
        self.replay_statuses[status] += 1

    def credential(self, peer: Peer) -> Credential | None:
        if not self.keyed or peer == SCANNER:
            return None
        if peer == ADMIN:
            return Credential("key-admin", frozenset({Role.ADMIN}))
        role = Role.WORKER if peer.link == 1 else Role.CLIENT
        return Credential(self.keys.get(peer, f"key-{peer.address!r}"), frozenset({role}))

    def owner(self, peer: Peer) -> str | None:
        credential = self.credential(peer)
        return credential.key if credential is not None else None

    def clients(self) -> tuple[Peer, ...]:
        return (*CLIENTS, THIEF) if self.keyed else CLIENTS

    def feed(self, peer: Peer, frames: list[bytes]) -> None:
        self.deliver(self.core.receive(peer, frames, self.now, self.credential(peer)))

    def send_request(self, key: Key) -> None:
        client, rid = key
        self.asks[key] += 1
        service = self.expected[key].rsplit(b"/", 1)[1]
        deadline = self.deadlines.get(key)
        left = None if deadline is None else deadline - self.now  # the time left now
        tenant, priority = self.tenants.get(key, (None, 0))
        flags = self.flags.get(key, 0)
        fields = protocol.request_fields(left, tenant, priority, flags)
        self.feed(client, protocol.gdp_request(rid, service, [self.expected[key]], fields))

    def reask(self, client: Peer, rids: list[bytes]) -> None:
        for rid in rids:
            self.asks[(client, rid)] += 1
        self.feed(client, [protocol.GDP_CLIENT, b"\x04", *rids])

    def forget(self, peer: Peer) -> None:
        service = self.live.pop(peer)
        self.silent.discard(peer)
        if peer in self.holding:
            task_id, body = self.holding.pop(peer)
            self.ghosts.append((peer, service, task_id, body))
            self.losses[body] += 1

    def unanswered(self) -> list[Key]:
        keys = (key for key in self.expected if self.finals[key] == self.lost[key] and key not in self.cancelled)
        return sorted(keys, key=repr)

    def live_keys(self) -> set[tuple[str | None, bytes]]:
        keys = [t.key for t in self.core.tasks.values() if t.state is not TaskState.CANCELLED and t.key]
        return {(None, k) if isinstance(k, bytes) else k for k in keys}  # the core keys unauthenticated ids bare

    # ------------------------------------------------------------------------------------------ rules

    @rule(
        client=st.sampled_from(CLIENTS), service=st.sampled_from(SERVICES),
        deadline=st.sampled_from([None, None, 0.0, 1.0, 3.0]),
        tenant=st.sampled_from([None, "t1", "t2"]),
        priority=st.sampled_from([0, 0, 2, -3]),
        flags=st.sampled_from([0, 0, protocol.FLAG_DETACHED, protocol.FLAG_KNOWN_SERVICE]),
    )  # fmt: skip
    def request(
        self, client: Peer, service: bytes, deadline: float | None, tenant: str | None = None, priority: int = 0,
        flags: int = 0,
    ) -> None:  # fmt: skip
        self.serial += 1
        name = b"/".join(client.address) if isinstance(client.address, tuple) else client.address
        rid = b"%s-%d" % (name, self.serial)
        self.expected[(client, rid)] = b"%s/%s/%s" % (name, rid, service)
        self.tenants[(client, rid)] = (tenant, priority)
        self.flags[(client, rid)] = flags
        if deadline is not None:
            self.deadlines[(client, rid)] = self.now + deadline
        self.send_request((client, rid))

    @precondition(lambda self: self.unanswered())
    @rule(data=st.data())
    def retry(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(self.unanswered()))
        was_live = (self.owner(key[0]), key[1]) in self.live_keys()
        before = len(self.core.tasks)
        self.send_request(key)
        if was_live:
            assert len(self.core.tasks) == before, "a retry of a live request became a second task"

    @precondition(lambda self: self.unanswered())
    @rule(data=st.data())
    def client_reasks(self, data: st.DataObject) -> None:
        client = data.draw(st.sampled_from(sorted({peer for peer, _ in self.unanswered()}, key=repr)))
        mine = [rid for peer, rid in self.unanswered() if peer == client]
        self.reask(client, data.draw(st.lists(st.sampled_from(mine), min_size=1, max_size=4, unique=True)))

    @rule(client=st.sampled_from(CLIENTS))
    def clients_pipe_loses_an_answer(self, client: Peer) -> None:
        self.losing.add(client)

    @precondition(lambda self: self.unanswered())
    @rule(data=st.data())
    def client_cancels(self, data: st.DataObject) -> None:
        client, rid = key = data.draw(st.sampled_from(self.unanswered()))
        self.cancelled.add(key)
        self.feed(client, [protocol.GDP_CLIENT, b"\x05", rid])
        assert (self.owner(client), rid) not in self.live_keys(), "a cancelled request is still live"

    @precondition(lambda self: self.keyed and self.expected)
    @rule(data=st.data(), action=st.sampled_from(["request", "reask", "cancel"]))
    def thief_replays_an_id(self, data: st.DataObject, action: str) -> None:
        victim, rid = data.draw(st.sampled_from(sorted((k for k in self.expected if k[0] != THIEF), key=repr)))
        before = self.live_keys()
        if action == "request":  # becomes the thief's own request, answered to it with its own result
            service = self.expected[(victim, rid)].rsplit(b"/", 1)[1]
            self.expected.setdefault((THIEF, rid), b"thief/%s/%s" % (rid, service))
            self.cancelled.discard((THIEF, rid))  # asking again after a cancel is a new request
            self.send_request((THIEF, rid))
        elif action == "reask":
            self.reask(THIEF, [rid])
        else:
            self.feed(THIEF, [protocol.GDP_CLIENT, b"\x05", rid])
        assert {k for k in before if k[0] != self.owner(THIEF)} <= self.live_keys(), "the thief touched a request"

    @rule(client=st.sampled_from(CLIENTS))
    def client_falls_quiet(self, client: Peer) -> None:
        self.quiet.add(client)

    @rule(service=st.sampled_from(SERVICES), modern=st.booleans())
    def worker_joins(self, service: bytes, modern: bool = False) -> None:
        self.served.add(service)  # (the broker remembers it for its served_memory, longer than any run here)
        self.next_worker += 1
        peer = Peer(1, self.next_worker)
        self.live[peer] = service
        if modern:
            self.modern.add(peer)
            self.names[peer] = f"worker-{self.next_worker}"
        self.feed(peer, protocol.gdp_ready(service, info=self.info(peer)))

    def info(self, peer: Peer) -> bytes | None:
        """A worker's peer info: modern ones say they understand fields and CANCEL, and give their name."""
        return protocol.worker_info(None, 1, name=self.names[peer]) if peer in self.modern else None

    def reconnected(self, old: Peer) -> Peer:
        """A new connection of the worker at ``old``, whose own is gone (it says nothing more): its name, key and
        service at a new peer."""
        self.next_worker += 1
        new = Peer(1, self.next_worker)
        service = self.live[old]
        self.keys[new] = self.owner(old) or ""
        self.names[new] = self.names[old]
        self.modern.add(new)
        self.forget(old)
        self.live[new] = service
        return new

    @precondition(lambda self: any(peer in self.names for peer in self.live))
    @rule(data=st.data(), running=st.booleans())
    def worker_reconnects(self, data: st.DataObject, running: bool) -> None:
        """A worker registers again from a new connection (its old one cut): its old registration leaves at once, so
        no task goes there (``deliver`` checks that tasks go to live workers only). One that runs a task says so
        (RESUME): it keeps that task."""
        old = data.draw(st.sampled_from(sorted(peer for peer in self.live if peer in self.names)))
        held = self.holding.get(old)
        running = running and held is not None and held[0] in self.core.tasks
        replaced = self.core.counters["workers_replaced"]
        new = self.reconnected(old)
        if running:
            assert held is not None
            self.ghosts.remove((old, self.live[new], *held))
            self.losses[held[1]] -= 1
            self.holding[new] = held
            self.feed(new, protocol.gdp_resume(self.live[new], held[0], self.info(new)))
            assert self.core.tasks[held[0]].worker is self.core.workers[new], "a resumed task not at its new connection"
        else:
            self.feed(new, protocol.gdp_ready(self.live[new], info=self.info(new)))
        assert old not in self.core.workers and new in self.core.workers
        assert self.core.counters["workers_replaced"] == replaced + 1

    @precondition(lambda self: self.keyed and any(peer in self.names for peer in self.live))
    @rule(data=st.data())
    def worker_forges_a_name(self, data: st.DataObject) -> None:
        """A peer with another key gives a live worker's name: it registers under its own key, and the worker it
        named stays registered."""
        named = data.draw(st.sampled_from(sorted(peer for peer in self.live if peer in self.names)))
        self.next_worker += 1
        forger = Peer(1, self.next_worker)
        self.names[forger], self.keys[forger] = self.names[named], f"forger-{self.next_worker}"
        self.modern.add(forger)
        self.live[forger] = self.live[named]
        replaced = self.core.counters["workers_replaced"]
        self.feed(forger, protocol.gdp_ready(self.live[forger], info=self.info(forger)))
        assert named in self.core.workers and forger in self.core.workers, "a forged name evicted a worker"
        assert self.core.counters["workers_replaced"] == replaced

    @precondition(lambda self: self.holding)
    @rule(data=st.data())
    def worker_answers(self, data: st.DataObject) -> None:
        peer = data.draw(st.sampled_from(sorted(self.holding)))
        task_id, body = self.holding.pop(peer)
        self.feed(peer, protocol.gdp_ready(self.live[peer], (task_id, protocol.OK, [body + b"!"])))

    @precondition(lambda self: self.holding)
    @rule(data=st.data())
    def worker_fails(self, data: st.DataObject) -> None:
        peer = data.draw(st.sampled_from(sorted(self.holding)))
        task_id, _ = self.holding.pop(peer)
        self.feed(peer, protocol.gdp_ready(self.live[peer], (task_id, protocol.WORKER_ERROR, [b"boom"])))

    @precondition(lambda self: len(self.core.dead_letters) or self.replayed)
    @rule(data=st.data(), drop=st.booleans())
    def admin_replays_or_drops_a_dead_letter(self, data: st.DataObject, drop: bool) -> None:
        letters = self.core.dead_letters
        kept = [
            (s.service, letter.id.hex()) for s in letters.services(10) for letter in letters.letters(s.service, 100)[0]
        ]
        gone = [(service.decode(), task_id) for service in SERVICES for task_id in sorted(self.replayed)]
        service, task_id = data.draw(st.sampled_from(kept + gone))
        self.serial += 1
        rid = b"mmi-%d" % self.serial
        self.mmi_asked.add(rid)
        args = json.dumps({"service": service, "id": task_id}).encode()
        self.feed(ADMIN, protocol.gdp_request(rid, b"mmi.dead", [b"drop" if drop else b"replay", args]))

    @precondition(lambda self: self.holding)
    @rule(data=st.data(), retry_after=st.sampled_from([None, b"0.5", b"2", b"junk"]))
    def worker_says_slow_down(self, data: st.DataObject, retry_after: bytes | None) -> None:
        peer = data.draw(st.sampled_from(sorted(self.holding)))
        task_id, _ = self.holding.pop(peer)
        task = self.core.tasks[task_id]
        running, throttled = task.state is TaskState.RUNNING, self.core.counters["throttled"]
        body = [b"slow down"] if retry_after is None else [b"slow down", retry_after]
        self.feed(peer, protocol.gdp_ready(self.live[peer], (task_id, b"429", body)))
        if running:
            assert self.core.counters["throttled"] == throttled + 1
            assert task.state in (TaskState.QUEUED, TaskState.RUNNING) and task.id in self.core.tasks, "429'd: lost"

    @precondition(lambda self: self.holding)
    @rule(data=st.data())
    def worker_says_try_again(self, data: st.DataObject) -> None:
        peer = data.draw(st.sampled_from(sorted(self.holding)))
        task_id, body = self.holding.pop(peer)
        task = self.core.tasks[task_id]
        running = task.state is TaskState.RUNNING
        answer = (task_id, protocol.UNAVAILABLE, [b"try again", protocol.RETRY_MARK])
        self.feed(peer, protocol.gdp_ready(self.live[peer], answer))
        if running:  # held for a retry (queued, off its queue), or answered (its retries spent, its deadline near)
            self.tried_again[body] += 1
            held = task.id in self.core.tasks and task in task.service.delayed
            assert (held and task.state is TaskState.QUEUED) or task.state is TaskState.DONE, "tried again: lost"

    @precondition(lambda self: self.holding and len(self.live) > 1)
    @rule(data=st.data())
    def worker_forges_a_result(self, data: st.DataObject) -> None:
        holder = data.draw(st.sampled_from(sorted(self.holding)))
        forger = data.draw(st.sampled_from(sorted(p for p in self.live if p != holder)))
        task_id, _ = self.holding[holder]
        refused = self.core.counters["results_refused"]
        self.feed(forger, protocol.gdp_partial(task_id, [b"forged"]))
        assert self.core.counters["results_refused"] == refused + 1

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
        for client in self.clients():
            if client not in self.quiet:
                self.feed(client, protocol.gdp_client_heartbeat())
        detached = [t for t in self.core.tasks.values() if t.detached and t.state is TaskState.QUEUED]
        out = self.core.tick(self.now)
        for task in detached:  # a detached request outlives its quiet client: only an answer ends it
            assert task.id in self.core.tasks or task.state is TaskState.DONE, "a detached request was dropped"
            if task.id not in self.core.tasks:
                assert any(to == task.client and frames[2:3] == [task.request_id] for to, frames in out)
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
        size=st.sampled_from([None, 20, 40]),  # a request here is about 15 bytes
        adaptive=st.sampled_from([None, AdaptiveLimits(1, 2), AdaptiveLimits(2, 4)]),
        tenants=st.sampled_from([None, {"t1": {"weight": 2}}, {"*": {"concurrency": 1}, "t2": {"rate": 1.0}}]),
    )
    def flow_limits_change(
        self, service: bytes, rate: float | None, concurrency: int | None, size: int | None,
        adaptive: AdaptiveLimits | None, tenants: dict[str, dict[str, float]] | None = None,
    ) -> None:  # fmt: skip
        if any(s.flow.in_flight for s in self.core.resolver.services() if s.name == service.decode()):
            self.loose.add(service.decode())  # a limit lowered now may sit below what already flies
        limits = FlowLimits(rate, 1, concurrency, size, adaptive).merged({"tenants": tenants})
        self.deliver(self.core.apply_flow(FlowChange(service.decode(), limits), self.now))

    @rule(garbage=st.lists(st.binary(max_size=6), max_size=4))
    def garbage_arrives(self, garbage: list[bytes]) -> None:
        rejected, answers = self.core.counters["rejected"], self.garbage_answers
        self.feed(SCANNER, garbage)
        refused = self.core.counters["rejected"] - rejected  # a request in the garbage, refused (a 400, 404...)
        assert refused <= self.garbage_answers - answers, "garbage refused without an answer"

    # ------------------------------------------------------------------------------------------ invariants

    @invariant()
    def answered_at_most_once_per_ask(self) -> None:
        assert all(count <= self.asks[key] for key, count in self.finals.items())

    @invariant()
    def replays_answered_once_and_dead_letters_accounted_for(self) -> None:
        assert all(n == 1 for n in self.replay_finals.values()), "a replay answered twice"
        c, letters = self.core.counters, self.core.dead_letters
        assert len(letters) == c.dead_lettered - c.dead_replayed - c.dead_dropped - letters.evicted
        kept = {letter.id for s in letters.services(10) for letter in letters.letters(s.service, 1000)[0]}
        assert not kept & set(self.core.tasks), "a dead letter that is also a live task"
        assert not {bytes.fromhex(i) for i in self.replayed} & kept, "a replayed letter still kept"

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
    def flight_bytes_within_limits(self) -> None:
        for service in self.core.resolver.services():
            flow = service.flow
            flying = [t for t in self.core.tasks.values() if t.service is service and t.in_flight]
            assert flow.in_flight_bytes == sum(t.size for t in flying)
            if not flying:
                self.loose.discard(service.name)
            elif flow.bytes_in_flight is not None and service.name not in self.loose:
                assert flow.in_flight_bytes <= flow.bytes_in_flight or len(flying) == 1
            if flow.adaptive is not None:
                assert flow.adaptive.limits.min <= flow.adaptive.limit <= flow.adaptive.limits.max

    @invariant()
    def counters_add_up(self) -> None:
        c = self.core.counters
        answered = sum(self.finals.values()) + self.garbage_answers + sum(self.replay_finals.values())
        assert answered == c["completed"] + c["answers_resent"] + c["rejected"]
        # a lost answer re-asked for comes again from the kept answers (not counted again by the broker), or
        # once it is no longer kept, the request runs again (and may fail or expire again)
        replays = self.replay_statuses  # (a replay may fail or expire too: its answer goes to the admin)
        assert len(self.failed) <= c["failed"] - replays[protocol.UNAVAILABLE] <= sum(self.failed.values())
        assert len(self.expired) <= c["expired"] - replays[protocol.EXPIRED] <= sum(self.expired.values())

    @invariant()
    def the_ledger_adds_up(self) -> None:
        ledger = self.core.ledger
        held: Counter[object] = Counter()
        counts: Counter[tuple[object, Holding]] = Counter()
        for where, kind, size in self.core.holdings():
            held[where] += size
            counts[where, kind] += 1
        assert ledger.total == sum(held.values()) and len(ledger) == len(held)
        assert all(ledger.account(where).bytes == size for where, size in held.items())
        assert all(ledger.account(where).count(kind) == n for (where, kind), n in counts.items())

    @invariant()
    def adapted_rates_within_bounds_and_never_above_the_configured_rate(self) -> None:
        for service in self.core.resolver.services():
            flow = service.flow
            rate = flow.backoff.rate
            if rate is not None:
                assert flow.backoff.limits.min <= rate or (flow.rate is not None and rate == flow.rate)
                assert flow.rate is None or rate <= flow.rate
            if flow.rate is not None:
                assert flow.rate_in_force is not None and flow.rate_in_force <= flow.rate

    @invariant()
    def tenants_in_flight_are_counted_right_and_within_their_caps(self) -> None:
        for service in self.core.resolver.services():
            flying = Counter(t.tenant for t in self.core.tasks.values() if t.service is service and t.in_flight)
            for key, limits, _, in_flight, _, _ in service.pending.busiest(10**6):
                assert in_flight == flying[key]
                if limits.concurrency is not None and service.name not in self.loose:
                    assert in_flight <= limits.concurrency
            queued = sum(t.state is TaskState.QUEUED for t in self.core.tasks.values() if t.service is service)
            assert len(service.pending) + len(service.delayed) == queued  # (held: a retry's backoff)

    @invariant()
    def modern_workers_are_told_of_every_drop(self) -> None:
        for peer, (task_id, _) in self.holding.items():
            task = self.core.tasks.get(task_id)
            if peer in self.modern and task is not None and task.worker is not None and task.worker.peer == peer:
                assert (task.state is TaskState.CANCELLED) == (task_id in self.told)

    @invariant()
    def queued_bytes_within_budget(self) -> None:
        report = self.core.report(self.now)
        assert report.broker.queued_bytes <= QUEUE_BYTES * (1 + MARGIN)  # small requests get in within a margin
        assert all(s.queued_bytes <= SERVICE_QUEUE_BYTES * (1 + MARGIN) for s in report.services)
        held = sum(t.charge for t in self.core.tasks.values())
        assert held == report.broker.queued_bytes

    def teardown(self) -> None:
        # Drain: limits lifted, fresh reliable workers answer everything; every client re-asks about what it
        # still waits for and asks again for what the broker does not know; then every request not cancelled
        # has an answer.
        self.quiet.clear()
        self.losing.clear()
        for service in SERVICES:  # no limits; an adapted rate (from 429s) high enough to hold nothing back
            unlimited = FlowLimits().merged({"burst": 1, "backoff": {"min": 1e9}})
            self.deliver(self.core.apply_flow(FlowChange(service.decode(), unlimited), self.now))
        self.time_passes(2.5)  # past any retry_after
        for service in SERVICES:
            self.worker_joins(service)
        for _ in range(10 * (len(self.expected) + 1)):
            self.now += 0.001  # (a rate, however high, refills with time)
            self.deliver(self.core.tick(self.now))
            waiting = self.unanswered()
            if not waiting and not self.holding:
                break
            if self.holding:
                peer = sorted(self.holding)[0]
                task_id, body = self.holding.pop(peer)
                self.feed(peer, protocol.gdp_ready(self.live[peer], (task_id, protocol.OK, [body + b"!"])))
            else:
                client, _ = waiting[0]
                self.reask(client, [rid for peer, rid in waiting if peer == client][: protocol.MAX_REASKED])
        assert not self.unanswered(), "a request was never answered"


class KeyedBrokerMachine(BrokerMachine):
    """The same with authenticated peers: request ids are scoped to the client's key, and a thief replays them."""

    keyed = True


BrokerMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
KeyedBrokerMachine.TestCase.settings = settings(max_examples=100, stateful_step_count=40, deadline=None)
TestBrokerMachine = BrokerMachine.TestCase
TestKeyedBrokerMachine = KeyedBrokerMachine.TestCase


def test_a_kept_404_comes_again_after_a_worker_for_its_service_joined() -> None:
    """A request asking for a known service is answered 404 (no worker had served it), the client's pipe loses
    the answer, a worker for the service joins and leaves; re-asked about at the drain, the request gets the kept
    404 again, which the model checks against the services served when it was made."""
    machine = BrokerMachine()
    client, service = CLIENTS[1], b"b"
    machine.time_passes(0.5)
    machine.request(client, service, None, flags=protocol.FLAG_KNOWN_SERVICE)  # within the grace: it waits
    (key,) = machine.expected
    machine.clients_pipe_loses_an_answer(client)
    for _ in range(20):  # the grace runs out within QUEUE_TIMEOUT: the 404 is made, and lost
        if machine.finals[key]:
            break
        machine.time_passes(1.0)
    assert machine.finals[key] == machine.lost[key] == 1 and machine.not_found[key] == frozenset()
    machine.worker_joins(service)
    worker = Peer(1, machine.next_worker)
    machine.forget(worker)
    machine.feed(worker, protocol.worker_command(Dialect.GDP, protocol.DISCONNECT))
    resent = machine.core.counters["answers_resent"]
    machine.teardown()
    assert machine.finals[key] == 2 and machine.core.counters["answers_resent"] == resent + 1


def test_garbage_answered_as_a_request_is_counted_as_answered() -> None:
    """Garbage that reads as an MDP request is a request: for the empty service name it is refused at once (a 400
    to the scanner, counted as rejected), for a served service a worker runs it (completed, its answer to the
    scanner); either answer is counted with the clients' final answers, with and without keys."""
    for machine in (BrokerMachine(), KeyedBrokerMachine()):
        machine.client_falls_quiet(CLIENTS[0])
        machine.garbage_arrives([b"", b"MDPC01", b""])
        assert machine.core.counters["rejected"] == machine.garbage_answers == 1
        machine.counters_add_up()
        machine.worker_joins(SERVICES[0])
        machine.garbage_arrives([b"", b"MDPC01", SERVICES[0], b"x"])
        (worker,) = machine.holding
        task_id, body = machine.holding.pop(worker)
        machine.feed(worker, protocol.gdp_ready(SERVICES[0], (task_id, protocol.OK, [body + b"!"])))
        assert machine.core.counters["completed"] == 1 and machine.garbage_answers == 2
        machine.counters_add_up()
        machine.teardown()

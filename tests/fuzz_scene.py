"""A sans-IO broker core among honest peers of every dialect and hostile ones, for the fuzzer's core tests.

The honest peers follow the protocol: clients of every dialect ask the honest service for a unique body and
check what comes back; workers of every dialect register for it, heartbeat and echo each task's body with a
``!``. Hostile peers send whatever :mod:`fuzz_strategies` makes, over a ROUTER link (with envelopes, split by
the links' own rule) or a SERVER link. :meth:`Scene.check` holds the invariants after every step: no error was
caught by the core's barrier (``internal_errors``), the ledger adds up to what the core holds and stays within
its budgets and caps, and nothing an honest peer received breaks the protocol; :meth:`Scene.drain` serves the
honest requests to the end and :meth:`Scene.leave` checks that every account is back to zero once everybody
has gone.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from collections.abc import Iterable

import attrs
from core_harness import checked
from fuzz_strategies import shown as _shown

from generaldomo.sansio.broker.access import Credential, Role
from generaldomo.sansio.broker.accounts.ledger import MARGIN, Holding
from generaldomo.sansio.broker.core import BrokerCore, Peer, Send
from generaldomo.sansio.config.settings import DEFAULT_MAX_FRAMES, Settings
from generaldomo.sansio.wire import envelope, protocol
from generaldomo.sansio.wire.events import Dialect
from generaldomo.sansio.wire.peer_events import BrokerDisconnect, FinalReply, TaskCancel, TaskRequest

ROUTER, SERVER = 0, 1
KIB, MIB = 1024, 1024 * 1024
SERVICE = b"echo"
ERRORS = "internal_errors"
# small budgets and caps, so that a few hostile messages reach every limit
SETTINGS = Settings(
    heartbeat_interval=1.0, liveness=3, max_attempts=3, queue_timeout=20.0, max_message=256 * KIB,
    queue_bytes=3 * MIB, service_queue_bytes=2 * MIB, keep_answers=5.0, keep_bytes=256 * KIB, service_idle=5.0,
    dead_seconds=5.0,
    max_workers=48, held_bytes=4 * MIB, connection_bytes=MIB, connection_requests=40, connection_services=12,
)  # fmt: skip
STATUSES = {protocol.OK, protocol.OVER_BUDGET, protocol.UNAVAILABLE, protocol.EXPIRED}  # what honest peers may get
HOSTILE_IDENTITIES = (b"hostile-a", b"hostile-b", b"\x00\x00\x00\x00\x07")  # ROUTER identities (one generated-like)
HOSTILE_ROUTING_IDS = (9001, 9002)  # SERVER routing ids
KNOWN = 64  # task ids the hostile peers remember (theirs and any they saw)
# What a reply may carry beyond a result of max_message bytes (its ids, status, timing and an envelope of up to
# 16 hops of 255 bytes), and beyond max_frames frames. A status page is bounded by its page size instead (at
# most 1000 services and 1000 workers, descriptions cut at 256 bytes: about 1.8 MB); with this scene's caps
# (48 workers, 12 services per connection) a page of everything is well within the same bound.
REPLY_SLACK = 64 * KIB
REPLY_FRAMES = 24


class Caught(logging.Handler):
    """Keeps the tracebacks the core's barrier logs, for the failure message."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.texts: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.texts.append(self.format(record))


@attrs.define(eq=False)
class HonestWorker:
    peer: Peer
    dialect: Dialect
    features: bool = False
    registered: bool = False
    task: tuple[bytes, tuple[bytes, ...]] | None = None  # (task id or MDP address, body) it runs

    def ready(self) -> list[bytes]:
        if self.dialect is Dialect.GDP:
            info = protocol.worker_info("host", 7) if self.features else None
            return protocol.gdp_ready(SERVICE, info=info)
        return [*_worker_prefix(self.dialect), _worker_byte(self.dialect, protocol.READY), SERVICE]

    def answer(self) -> list[bytes]:
        assert self.task is not None
        task_id, body = self.task
        self.task = None
        result = tuple(frame + b"!" for frame in body)
        if self.dialect is Dialect.GDP:
            return protocol.gdp_ready(SERVICE, (task_id, protocol.OK, result))
        return [*_worker_prefix(self.dialect), _worker_byte(self.dialect, protocol.FINAL), task_id, b"", *result]

    def heartbeat(self) -> list[bytes]:
        return protocol.worker_command(self.dialect, protocol.HEARTBEAT)


def _worker_prefix(dialect: Dialect) -> tuple[bytes, ...]:
    return protocol.PREFIX[dialect, True]


def _worker_byte(dialect: Dialect, command: str) -> bytes:
    return protocol.WORKER_COMMANDS[dialect][command].to_bytes(1, "big")


@attrs.define(eq=False)
class HonestClient:
    peer: Peer
    dialect: Dialect
    waiting: dict[bytes, bytes] = attrs.field(factory=dict)  # GDP: request id -> body; MDP: body -> body
    answered: Counter[bytes] = attrs.field(factory=Counter)  # request id (MDP: body) -> final answers
    errors: int = 0  # MDP error answers (they name no request)
    statuses: Counter[bytes] = attrs.field(factory=Counter)
    asked: int = 0

    def request(self, rid: bytes, body: bytes) -> list[bytes]:
        self.asked += 1
        if self.dialect is Dialect.GDP:
            self.waiting[rid] = body
            return protocol.gdp_request(rid, SERVICE, [body])
        self.waiting[body] = body
        if self.dialect is Dialect.MDP01:
            return protocol.mdp_client_request(SERVICE, [body])
        prefix = protocol.PREFIX[self.dialect, False]
        return [*prefix, protocol.CLIENT_COMMANDS[self.dialect][protocol.REQUEST].to_bytes(1, "big"), SERVICE, body]

    def hears(self, frames: list[bytes]) -> None:
        """A message from the broker: a final answer to one of its requests, exactly once, with its own body."""
        if self.dialect is Dialect.GDP:
            message = protocol.read_client_message(frames)
            if not isinstance(message, FinalReply):
                return  # a heartbeat's answer (its requests are not re-asked) or a partial result
            rid, status = bytes(message.request_id), bytes(message.status)
            assert rid in self.waiting or rid in self.answered, "an answer to a request this client never made"
            self.answered[rid] += 1
            assert self.answered[rid] == 1, "a request answered twice"
            body = self.waiting.pop(rid)
            self.statuses[status] += 1
            assert status in STATUSES, f"an honest request answered {status!r}: {message.body!r}"
            if status == protocol.OK:
                assert message.body == (body + b"!",), "an answer with another request's result"
            return
        body = _mdp_client_body(self.dialect, frames)
        assert body, f"a malformed answer to an {self.dialect.value} client: {frames!r}"
        first = bytes(body[0])
        if first in STATUSES - {protocol.OK}:
            self.errors += 1
            self.statuses[first] += 1
            return
        assert first.endswith(b"!") and first[:-1] in self.waiting, f"an answer to no request: {body!r}"
        del self.waiting[first[:-1]]
        self.answered[first[:-1]] += 1
        self.statuses[protocol.OK] += 1

    @property
    def unanswered(self) -> int:
        if self.dialect is Dialect.GDP:
            return len(self.waiting)
        return len(self.waiting) - self.errors


def _mdp_client_body(dialect: Dialect, frames: list[bytes]) -> list[bytes] | None:
    """The body of an MDP reply to a client (a PARTIAL never comes: honest workers send none)."""
    prefix = list(protocol.PREFIX[dialect, False])
    if frames[: len(prefix)] != prefix:
        return None
    rest = frames[len(prefix) :]
    if dialect is Dialect.MDP01:
        return rest[1:] if rest and rest[0] == SERVICE else None
    final = protocol.CLIENT_COMMANDS[dialect][protocol.FINAL].to_bytes(1, "big")
    if not rest or rest[0] != final:
        return None
    if dialect is Dialect.MDP02:
        return rest[2:] if len(rest) > 1 and rest[1] == SERVICE else None
    return rest[1:]


class Scene:
    """A core, its honest peers and what the hostile ones learnt; ``keyed``: every peer has a CURVE-style
    credential (hostile ones with random roles), else none has (plaintext); ``handover``: the core hands tasks
    over across restarts (task ids are tickets, workers may RESUME and HANDOVER)."""

    def __init__(
        self, seed: int = 0, keyed: bool = False, settings: Settings = SETTINGS, handover: bool = False
    ) -> None:
        self.core = BrokerCore(
            settings=settings, instance=b"fuzz", random=random.Random(seed).randbytes,
            handover_key=b"k" * 32 if handover else None,
        )  # fmt: skip
        self.settings = settings
        self.keyed = keyed
        assert settings.max_message is not None
        self.reply_bound = settings.max_message + REPLY_SLACK
        self.now = 0.0
        self.ids = random.Random(seed + 1)
        self.serial = 0
        self.workers: dict[Peer, HonestWorker] = {}
        self.clients: dict[Peer, HonestClient] = {}
        self.tasks: list[bytes] = []  # task ids seen going to anybody: what a hostile peer may forge
        self.requests: list[bytes] = []  # request ids the hostile peers used
        self.given: dict[Peer, tuple[Dialect, bytes]] = {}  # hostile peers given a task: its dialect and id
        self.caught = Caught()
        logging.getLogger("generaldomo").addHandler(self.caught)

    def close(self) -> None:
        logging.getLogger("generaldomo").removeHandler(self.caught)

    # ------------------------------------------------------------------------------------------ peers

    def add_worker(self, dialect: Dialect, features: bool = False) -> HonestWorker:
        peer = (
            Peer(SERVER, 100 + len(self.workers)) if len(self.workers) % 2 else Peer(ROUTER, b"w%d" % len(self.workers))
        )
        worker = self.workers[peer] = HonestWorker(peer, dialect, features)
        self.register(worker)
        return worker

    def register(self, worker: HonestWorker) -> None:
        worker.registered = True
        self.feed(worker.peer, worker.ready(), self.honest_credential(Role.WORKER))

    def add_client(self, dialect: Dialect) -> HonestClient:
        peer = (
            Peer(ROUTER, b"c%d" % len(self.clients)) if len(self.clients) % 2 else Peer(SERVER, 200 + len(self.clients))
        )
        client = self.clients[peer] = HonestClient(peer, dialect)
        return client

    def ask(self, client: HonestClient) -> None:
        self.serial += 1
        body = b"body-%d" % self.serial
        self.feed(client.peer, client.request(self.ids.randbytes(16), body), self.honest_credential(Role.CLIENT))

    def honest_credential(self, role: Role) -> Credential | None:
        return Credential(f"honest-{role.value}", frozenset({role})) if self.keyed else None

    def answer(self, worker: HonestWorker) -> None:
        self.feed(worker.peer, worker.answer(), self.honest_credential(Role.WORKER))

    def hostile(self, frames: list[bytes], sender: int, hops: list[bytes], credential: Credential | None) -> None:
        """``frames`` from hostile sender number ``sender``: one of the ROUTER identities (behind ``hops``) or
        one of the SERVER routing ids."""
        if sender < len(HOSTILE_IDENTITIES):
            address, message = envelope.split(HOSTILE_IDENTITIES[sender], [*hops, *frames])
            peer = Peer(ROUTER, address)
        else:
            peer, message = Peer(SERVER, HOSTILE_ROUTING_IDS[sender % len(HOSTILE_ROUTING_IDS)]), frames
        self.hostile_at(peer, message, credential)

    def hostile_at(self, peer: Peer, frames: list[bytes], credential: Credential | None) -> None:
        """``frames`` from the hostile ``peer``."""
        if len(frames) > 2 and frames[0] == protocol.GDP_CLIENT and 0 < len(frames[2]) <= 255:
            self.requests = [*self.requests[-KNOWN:], bytes(frames[2])]
        self.feed(peer, frames, credential if self.keyed else None)

    def feed(self, peer: Peer, frames: list[bytes], credential: Credential | None = None) -> None:
        self.route(self.core.receive(peer, frames, self.now, credential))

    def advance(self, seconds: float) -> None:
        """Time passes: the honest peers heartbeat (an unregistered worker registers again), then the core ticks."""
        self.now += seconds
        for worker in self.workers.values():
            if worker.registered:
                self.feed(worker.peer, worker.heartbeat(), self.honest_credential(Role.WORKER))
            else:
                self.register(worker)
        for client in self.clients.values():
            if client.dialect is Dialect.GDP:
                self.feed(client.peer, protocol.gdp_client_heartbeat(), self.honest_credential(Role.CLIENT))
        self.route(self.core.tick(self.now))

    def route(self, out: Iterable[Send]) -> None:
        for peer, frames in checked(out):
            size = sum(map(len, frames))
            assert size <= self.reply_bound, f"a reply of {size} bytes: {_shown(frames)}"
            assert len(frames) <= DEFAULT_MAX_FRAMES + REPLY_FRAMES, f"a reply of {len(frames)} frames"
            if peer in self.workers:
                self._to_worker(self.workers[peer], frames)
            elif peer in self.clients:
                self.clients[peer].hears(frames)
            else:
                self._to_hostile(peer, frames)

    def _to_worker(self, worker: HonestWorker, frames: list[bytes]) -> None:
        if worker.dialect is Dialect.GDP:
            message = protocol.read_worker_message(frames)
            if isinstance(message, TaskRequest):
                assert worker.registered and worker.task is None, "a task for a worker that is not waiting"
                worker.task = (bytes(message.task_id), tuple(map(bytes, message.body)))
                self.tasks = [*self.tasks[-KNOWN:], worker.task[0]]
            elif isinstance(message, BrokerDisconnect):
                worker.registered, worker.task = False, None
            else:
                assert not isinstance(message, TaskCancel) or worker.features, "a CANCEL to an old worker"
                assert not isinstance(message, protocol.Malformed), f"a malformed message to a worker: {frames!r}"
            return
        prefix = list(_worker_prefix(worker.dialect))
        assert frames[: len(prefix)] == prefix and len(frames) > len(prefix), f"not for this worker: {frames!r}"
        command = frames[len(prefix)]
        if command == _worker_byte(worker.dialect, protocol.REQUEST):
            assert worker.registered and worker.task is None, "a task for a worker that is not waiting"
            address, empty, *body = frames[len(prefix) + 1 :]
            assert empty == b"", f"an MDP request without its empty frame: {frames!r}"
            worker.task = (bytes(address), tuple(map(bytes, body)))
            self.tasks = [*self.tasks[-KNOWN:], worker.task[0]]
        elif command == _worker_byte(worker.dialect, protocol.DISCONNECT):
            worker.registered, worker.task = False, None
        else:
            assert command == _worker_byte(worker.dialect, protocol.HEARTBEAT), f"an odd command: {frames!r}"

    def _to_hostile(self, peer: Peer, frames: list[bytes]) -> None:
        """Remember the task a hostile peer is given (to answer, or to forge with)."""
        for dialect in Dialect:
            prefix = list(_worker_prefix(dialect))
            request = [*prefix, _worker_byte(dialect, protocol.REQUEST)]
            fields = [*prefix, b"\x07"] if dialect is Dialect.GDP else None
            start = len(request)
            if len(frames) > start and (frames[:start] == request or frames[:start] == fields):
                self.given[peer] = (dialect, bytes(frames[start]))
                self.tasks = [*self.tasks[-KNOWN:], bytes(frames[start])]
                return

    # ------------------------------------------------------------------------------------------ invariants

    def check(self) -> None:
        """The invariants that hold after every step."""
        core, settings = self.core, self.settings
        assert core.counters[ERRORS] == 0, "the core's barrier caught an error:\n" + "\n".join(self.caught.texts)
        ledger = core.ledger
        held: Counter[object] = Counter()
        counts: Counter[tuple[object, Holding]] = Counter()
        for where, kind, size in core.holdings():
            held[where] += size
            counts[where, kind] += 1
        assert ledger.total == sum(held.values()) and len(ledger) == len(held), "the ledger does not add up"
        assert all(ledger.account(where).bytes == size for where, size in held.items()), "an account is wrong"
        assert all(ledger.account(where).count(kind) == n for (where, kind), n in counts.items())
        kept = ledger.by_kind[Holding.KEPT]
        assert kept <= settings.keep_bytes, "kept answers beyond their budget"
        assert settings.held_bytes is not None and settings.connection_bytes is not None
        assert ledger.total - kept <= settings.held_bytes * (1 + MARGIN), "the ledger beyond its total budget"
        for where in held:
            account = ledger.account(where)
            assert account.bytes - account.kept <= settings.connection_bytes, "a connection beyond its budget"
            for kind, cap in ledger.caps.items():
                assert account.count(kind) <= cap, f"a connection beyond its cap of {kind.value}"
        assert settings.max_workers is not None and len(core.workers) <= settings.max_workers

    def drain(self, rounds: int = 200) -> None:
        """Serve until every honest request has its answer (bounded: the queue timeout answers the rest)."""
        for _ in range(rounds):
            for worker in self.workers.values():
                if worker.task is not None:
                    self.answer(worker)
            if not any(client.unanswered for client in self.clients.values()):
                return
            self.advance(self.settings.heartbeat_interval / 2)
            self.check()
        left = {client.dialect.value: client.unanswered for client in self.clients.values()}
        raise AssertionError(f"honest requests never answered: {left}")

    def answered_once(self) -> None:
        """Every honest request got exactly one final answer."""
        for client in self.clients.values():
            assert client.unanswered == 0 and all(n == 1 for n in client.answered.values())
            assert sum(client.answered.values()) + client.errors == client.asked

    def leave(self) -> None:
        """Everybody goes (honest workers say DISCONNECT, the others fall silent); once every expiry has passed,
        the core holds nothing for anybody."""
        for worker in self.workers.values():
            if worker.registered:
                self.feed(worker.peer, protocol.worker_command(worker.dialect, protocol.DISCONNECT))
        self.workers.clear()
        self.clients.clear()
        settings = self.settings
        assert settings.queue_timeout is not None and settings.service_idle is not None
        patience = (settings.queue_timeout + settings.expiry) * settings.max_attempts + settings.client_silence
        patience += settings.keep_answers + 2 * settings.service_idle + settings.dead_seconds
        end = self.now + 2 * patience
        while self.now < end:
            self.advance(settings.heartbeat_interval)
            self.check()
        core = self.core
        assert not core.tasks and not core.workers, "tasks or workers left after everybody went"
        assert core.ledger.total == 0 and len(core.ledger) == 0, f"accounts left: {core.ledger.top(5)}"
        # flow limits an admin key set are the operator's (kept, with their services, while idle); a peer's go
        left = {service.name for service in core.resolver.services()}
        assert left <= set(core.flows), f"services left: {sorted(left - set(core.flows))}"
        assert not core.flows or self.keyed, "flow limits left that no admin set"

"""The broker core: a sans-IO state machine that pairs client requests with workers.

Rules of this file:

- Everything that decides what the broker does lives here: registration, dispatch, heartbeats, expiry,
  reissue, duplicate suppression, kept answers, budgets, roles and MMI answers.
- It reads no socket, no clock and no random source of its own. It is fed ``(peer, frames, now, credential)``
  by :meth:`BrokerCore.receive` and clock ticks by :meth:`BrokerCore.tick`, and returns the messages to send,
  in order, as typed actions (:mod:`generaldomo.sansio.broker.actions`: ``Dispatch``, ``Respond``, ``Forward``,
  ``Beat``, ``Cancel``, ``Dismiss``, each a ``Send(peer, frames)``, which is all the IO layer reads of them);
  task ids come from the ``random`` callable it is given.
- Each kind of event (:mod:`generaldomo.sansio.wire.events`) has one handler, typed for it, in one table keyed by
  the event's class (another for those over ``max_message``). A handler gets the event and the message's turn
  (``_Message``: sender, time, credential, and the actions so far); the helpers it calls get that turn, or a
  tick's (``_Turn``: the time and the actions), rather than each of those one by one.
- Neither :meth:`BrokerCore.receive` nor :meth:`BrokerCore.tick` raises an ``Exception``: each message and each
  periodic job is handled inside a barrier (:mod:`generaldomo.sansio.barrier`) that counts and logs an
  unexpected error, and returns what was to be sent until then, so that no message stops the broker.
- It does not know which transport a peer came over; a :class:`Peer` is an opaque ``(link, address)`` pair,
  and neither its reports nor its logs show the address (only a keyed hash of it).
- It does not know how descriptions map to services (the resolver's job), how a service orders its queues
  (the service's job), how frames are laid out (the protocol module's job), what management requests mean
  (:mod:`generaldomo.sansio.broker.mmi`, which returns the changes it wants) or the life-cycle tables
  (:mod:`generaldomo.sansio.broker.states`, the only way its records change state).

Theory of operation. A worker's READY joins the service its description resolves to and waits there. A
client's request becomes a *task* with a random 16-byte id, queued on the service its description resolves to,
if the broker's queue budgets allow its bytes (else ``429``). Whenever a service has both a waiting worker and
a queued task, the service picks a pair and the task is sent to the worker, which is then busy. The final
reply *of the worker that holds the task* completes it: the result goes to the client that asked (and is kept
for ``keep_answers`` seconds, for the client's re-asks) and the worker waits again; a result from anybody else
is dropped and counted. A worker that says DISCONNECT, re-registers, or stays silent for ``liveness`` heartbeat
intervals is forgotten; the task it held goes back to the front of its service's queue, unless it has already
been tried ``max_attempts`` times, in which case the client gets an error reply. generaldomo clients put a
unique request id in every request, scoped to their key when they have one; a request whose id is live (a
retry, perhaps over a new connection) is not a new task: its answer goes to the latest sender. A cancelled
task leaves its queue, or, when running, has its result dropped. Queued tasks of a generaldomo client silent
for ``client_silence`` are dropped, unless the request is *detached* (its answer is fetched later by its id, a
re-ask); a queued request without a request id (every MDP request: nobody is heard waiting for it) is answered
``504`` after ``anonymous_queue_timeout``. So every queued request has an owner whose silence or departure frees
it, and one connection's requests hold at most ``connection_queue_share`` of ``queue_bytes``. Services with
nothing in them are forgotten after ``service_idle``. A request that asks to fail fast
for an unknown service is answered ``404`` at once when its service has no worker now and had none within
``served_memory`` (:mod:`generaldomo.sansio.broker.served`), once the broker has run ``known_service_grace`` (one that
came within it is answered so when it ends, if its service still has nobody). A broker
that stops for good first stops accepting requests (``503``) while it serves those it holds, then answers the rest
``503`` (:meth:`BrokerCore.abandon`), so that none is left without an answer.

Flow control: a service's limits (:mod:`generaldomo.sansio.broker.flow.flow`: rate, concurrency, an adaptive cap,
request bytes in flight) hold its dispatches back; the service times of answered tasks teach the adaptive cap.
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from generaldomo import errors
from generaldomo.errors import ResolveError
from generaldomo.sansio.barrier import INTERNAL_ERRORS, Barrier
from generaldomo.sansio.broker import mmi
from generaldomo.sansio.broker.access import NEEDS, Credential, Role
from generaldomo.sansio.broker.accounts.kept import KeptAnswers
from generaldomo.sansio.broker.accounts.ledger import (
    OVERHEAD,
    Connection,
    Kind,
    Ledger,
    Refusal,
    address_bytes,
    connection,
    exceeds,
    flow_charge,
    request_charge,
)
from generaldomo.sansio.broker.accounts.pacing import Pacer, resend_cost
from generaldomo.sansio.broker.actions import Beat, Cancel, Dismiss, Dispatch, Forward, Respond, Send
from generaldomo.sansio.broker.deadlines import Deadlines
from generaldomo.sansio.broker.flow.backoff import rest
from generaldomo.sansio.broker.flow.flow import Flow, FlowLimits
from generaldomo.sansio.broker.records import (
    Claim,
    Peer,
    RequestKey,
    Task,
    Worker,
    displaced,
    is_displaced,
    request_key,
)  # fmt: skip
from generaldomo.sansio.broker.report import (
    DESCRIPTION_BYTES,
    PAGE_BYTES,
    BrokerReport,
    ConnectionReport,
    Endpoint,
    LedgerReport,
    NextPage,
    ServiceReport,
    SettingsReport,
    StatusQuery,
    StatusReport,
    WorkerReport,
    page,
)
from generaldomo.sansio.broker.served import MAX_NAMES, ServedRecently
from generaldomo.sansio.broker.services.resolver import NameResolver, Resolver
from generaldomo.sansio.broker.services.service import Service
from generaldomo.sansio.broker.states import IN_FLIGHT, TASK, WORKER, Step, TaskState, WorkerState
from generaldomo.sansio.config.settings import Settings
from generaldomo.sansio.labels import PeerLabels
from generaldomo.sansio.lograte import LogLimiter
from generaldomo.sansio.queues import Queue
from generaldomo.sansio.wire import limits, protocol
from generaldomo.sansio.wire.events import (
    ClientCancel,
    ClientHeartbeat,
    ClientRequest,
    Dialect,
    Event,
    Malformed,
    WorkerDisconnect,
    WorkerHandover,
    WorkerHeartbeat,
    WorkerReady,
    WorkerReply,
    WorkerResume,
)
from generaldomo.sansio.wire.ticket import Ticket, Tickets, nonce, request_digest

__all__ = ["MMI_PREFIX", "BrokerCore", "Peer", "Send", "Settings", "Task", "Worker"]
log = logging.getLogger(__name__)

MMI_PREFIX = b"mmi."
TASK_ID_BYTES = 16
ECHO_BYTES = 16 * 1024  # bytes of unknown request ids one HEARTBEAT answer names at most
BEATS_PER_TICK = 1024  # workers one tick heartbeats (and checks for silence) at most: a long table waits its turn
TOP_CONNECTIONS = 10  # connections the status report names, those holding the most bytes
MAX_HOSTS = 32  # hosts the status report counts workers of by name; the others' are summed as "other"
_ALL = StatusQuery()
_UNSET = FlowLimits()
# The rows of the life-cycle tables the core uses, looked up once: a move is one dict lookup, and one the table
# lacks raises IllegalTransition (machine, state, step).
_W_DISPATCH, _W_RESULT = WORKER.row(Step.DISPATCH), WORKER.row(Step.RESULT)
_W_CANCEL, _W_LEAVE = WORKER.row(Step.CANCEL), WORKER.row(Step.LEAVE)
_T_DISPATCH, _T_REISSUE = TASK.row(Step.DISPATCH), TASK.row(Step.REISSUE)
_T_CANCEL, _T_FINISH = TASK.row(Step.CANCEL), TASK.row(Step.FINISH)


_CHARGED = "charged to the connection whose message made it, as "
# What may grow on a peer's behalf, and what charges or bounds it: every attribute of the core that is a
# container or one of its parts, and of a service (``service.NAME``). tests/sansio/test_holdings.py enumerates
# both and fails for one that is not declared here (or declared and gone): a new structure is threaded through
# the ledger, or says what else bounds it, when it is added.
HOLDINGS: dict[str, str] = {
    "_adopted": _CHARGED + "services",
    "_barrier": "bounded: a count per kind of error and a rate-limited log",
    "_beats": _CHARGED + "workers",
    "_by_request": _CHARGED + "tasks",
    "_changed": "flow entries (charged as flows, or the operator's), until the IO layer takes them",
    "_claims": _CHARGED + "workers (a resumed worker's claim)",
    "_deadlines": _CHARGED + "tasks (finished entries compacted)",
    "_endpoints": "the operator's (set_endpoints)",
    "_flow_charges": _CHARGED + "flows",
    "_flow_idle_since": _CHARGED + "flows",
    "_handlers": "fixed: one per kind of event",
    "_heard": _CHARGED + "clients (beyond the budgets a client is not listened to)",
    "_held": _CHARGED + "services",
    "_hosts": _CHARGED + "workers",
    "_idle_since": _CHARGED + "services",
    "_kept": _CHARGED + "kept answers, within keep_bytes",
    "_large": "fixed: one per kind of event",
    "_message": "one message's turn, emptied for each",
    "_pacer": "pacing: lines bounded in bytes of waiting requests (pacing.WAITING_BYTES)",
    "_resting": _CHARGED + "workers",
    "_served": "bounded: served.MAX_NAMES names",
    "_tasks": _CHARGED + "tasks",
    "_throttled": _CHARGED + "services",
    "_warnings": "bounded: rate-limited per connection, flushed each sweep",
    "_workers": _CHARGED + "workers",
    "counters": "fixed: names the code gives (a refusal's per kind of holding)",
    "flows": _CHARGED + "flows (with their tenants' limits), or the operator's",
    "ledger": "the ledger: an account only while its connection holds something",
    "resolver": _CHARGED + "services",
    "settings": "fixed: the operator's",
    "service.flow": _CHARGED + "services (its limits: flows)",
    "service.pending": _CHARGED + "tasks, and fair.KEEP_IDLE idle tenants as services",
    "service.stats": _CHARGED + "services",
    "service.waiting": _CHARGED + "workers",
    "service.workers": _CHARGED + "workers",
}


class _Turn:
    """One call into the core (a message, a tick, a flow change, a stop): the time it was fed, and the actions it
    returns, in order, as its handlers and helpers add them."""

    __slots__ = ("now", "out")

    def __init__(self, now: float) -> None:
        self.now = now
        self.out: list[Send] = []


class _Message(_Turn):
    """The turn of one message: also who sent it, and the credential it came with (None: not authenticated).

    The core keeps one and fills it in for each message (its ``out`` a new list, returned to the caller): the
    handling of a message is never re-entered, and an object made per message would cost the hot path about 2 %
    of the core's instructions. Nothing keeps it, or its ``out``, beyond the message's handling."""

    __slots__ = ("credential", "peer")

    def __init__(self) -> None:
        super().__init__(0.0)
        self.peer: Peer = Peer(-1, b"")
        self.credential: Credential | None = None

    @property
    def owner(self) -> str | None:
        """The sender's key, which scopes its request ids (None: not authenticated)."""
        return None if self.credential is None else self.credential.key


E = TypeVar("E", bound=Event)
Handler = Callable[[E, _Message], None]  # the handler of one kind of event, given the message's turn


def _on(kind: type[E], handler: Handler[E]) -> tuple[type, Handler[Any]]:
    """An entry of a handler table: the handler of events of ``kind``, typed for that kind (the table, keyed by
    the event's class, cannot say that each value takes its key's events: each entry says it)."""
    return kind, handler


class BrokerCore:
    """The broker's state machine; see the module docstring.

    Args:
        resolver: maps descriptions to services (default: by name).
        settings: timing and limits (:class:`Settings`).
        instance: the broker's instance id, told to clients (random per start).
        started: the time (on the clock ``now`` reads) the broker started.
        random: gives n random bytes (task ids); ``os.urandom`` or a seeded generator in tests.

    Example:
        >>> import random
        >>> from generaldomo import BrokerCore, Peer
        >>> from generaldomo.sansio.wire import protocol
        >>> core = BrokerCore(instance=b"doc!", random=random.Random(1).randbytes)
        >>> worker, client = Peer(1, b"w"), Peer(0, b"c")
        >>> core.receive(worker, protocol.gdp_ready(b"echo"), now=0.0)
        []
        >>> request = protocol.gdp_request(b"r1", b"echo", [b"hi"])
        >>> [(peer, frames[1]) for peer, frames in core.receive(client, request, 0.1)]  # a REQUEST to the worker
        [(Peer(link=1, address=b'w'), b'\\x02')]
    """

    def __init__(
        self,
        resolver: Resolver | None = None,
        settings: Settings | None = None,
        instance: bytes = b"",
        started: float = 0.0,
        *,
        random: Callable[[int], bytes],
        handover_key: bytes | None = None,
        recovering: bool = False,
    ) -> None:
        """``handover_key`` (the state directory's) turns hand-over on: tasks of generaldomo clients get tickets
        for ids, and results of tasks earlier instances dispatched are taken over; ``recovering`` (a broker
        started again on a state directory) holds dispatch back for the first ``recovery_window`` seconds."""
        self.resolver: Resolver = resolver if resolver is not None else NameResolver()
        self.settings = settings or Settings()
        self.counters: Counter[str] = Counter()
        self.started = started
        self.flows: dict[str, FlowLimits] = {}  # flow limits by service name, applied to services as they appear
        self._changed: dict[str, mmi.FlowChange] = {}  # the latest flow change per name, until taken
        self._instance = instance
        self._random = random
        self.labels = PeerLabels(random(16))  # the links name peers with it too
        settings = self.settings
        self.ledger = Ledger(
            settings.held_bytes,
            settings.connection_bytes,
            {
                Kind.TASK: settings.connection_requests,
                Kind.WORKER: settings.connection_workers,
                Kind.SERVICE: settings.connection_services,
                Kind.FLOW: settings.connection_services,
            },
        )
        self._workers: dict[Peer, Worker] = {}  # in order of registration
        self._serial = 0  # the serial of the latest registered worker
        self._hosts: Counter[str] = Counter()  # registered workers per announced host ("unknown": none)
        self._beats: Queue[Worker] = Queue(tracked=True)  # registered workers, next heartbeat due first
        self._tasks: dict[bytes, Task] = {}  # in order of acceptance
        self._by_request: dict[RequestKey, Task] = {}
        self._kept = KeptAnswers(settings.keep_answers, settings.keep_bytes, self.ledger)
        self._served = ServedRecently(settings.served_memory)
        self._heard: OrderedDict[Peer, float] = OrderedDict()  # generaldomo clients -> last heard, oldest first
        self._held: dict[Service, int] = {}  # bytes charged for the live tasks of each service
        self._held_total = 0
        self._idle_since: dict[Service, float] = {}
        self._throttled: dict[Service, float] = {}  # services held back by their rate limit -> when to retry
        self._graced = False  # True once the requests that asked to fail fast within the grace were looked at
        self._deadlines: Deadlines[Task] = Deadlines(_finished)  # the live tasks that carry a deadline
        self._resting: Deadlines[Worker] = Deadlines(_awake)  # workers a 429's retry_after holds back, until when
        self._adopted: dict[Service, tuple[Connection, int]] = {}  # services seen -> who made them, at what charge
        self._flow_charges: dict[str, tuple[Connection, int]] = {}  # flow entries peers set -> who, at what charge
        self._flow_idle_since: dict[str, float] = {}
        self._endpoints: list[tuple[str, str]] = []
        self._warnings = LogLimiter(log)
        self._barrier = Barrier(log, "the broker core")
        self._trace = log.isEnabledFor(logging.DEBUG)  # a line per dispatch (-vv), decided once: free when off
        self._next_sweep: float | None = None
        self._stopping = False  # new requests are answered 503 (see stop_accepting)
        self._message = _Message()  # the turn of the message being handled (see receive)
        # expensive management requests: each connection's work per second, and those waiting for it
        self._pacer: Pacer[tuple[Peer, ClientRequest, Credential | None]] = Pacer()
        self._paced_due: float | None = None  # when the next waiting one may go
        self._handlers: dict[type, Handler[Any]] = dict(
            (
                _on(ClientRequest, self._on_request),
                _on(ClientHeartbeat, self._on_client_heartbeat),
                _on(ClientCancel, self._on_cancel),
                _on(WorkerReady, self._on_ready),
                _on(WorkerReply, self._on_reply),
                _on(WorkerHeartbeat, self._on_heartbeat),
                _on(WorkerDisconnect, self._on_disconnect),
                _on(Malformed, self._on_malformed),
                _on(WorkerResume, self._on_resume),
                _on(WorkerHandover, self._on_handover),
            )
        )
        self._large: dict[type, Handler[Any]] = dict(  # those over max_message
            (
                _on(ClientRequest, self._on_large_request),
                _on(WorkerReply, self._on_large_reply),
                _on(WorkerHandover, self._on_large_handover),
            )
        )
        self._tickets = None if handover_key is None else Tickets(handover_key, instance)
        self._claims: dict[RequestKey, Worker] = {}  # requests that resumed workers run, until they arrive
        self._hold_until = started + self.settings.recovery_window if recovering and self._tickets else None

    # ------------------------------------------------------------------------------------------- public

    @property
    def workers(self) -> dict[Peer, Worker]:
        """Registered workers by peer (read only)."""
        return self._workers

    @property
    def tasks(self) -> dict[bytes, Task]:
        """Live tasks (queued, running or cancelled while running) by task id (read only)."""
        return self._tasks

    @property
    def instance(self) -> bytes:
        """The id of this broker instance, told to clients so they notice a restart."""
        return self._instance

    def receive(
        self, peer: Peer, frames: Sequence[bytes], now: float, credential: Credential | None = None
    ) -> list[Send]:
        """Act on one message from ``peer``, authenticated as ``credential`` if given; return what to send. Never
        raises an ``Exception``: one its handling raised is counted (``internal_errors``) and logged, and what
        was to be sent until then is returned (:mod:`generaldomo.sansio.barrier`).

        Args:
            peer: where the message came from.
            frames: its frames.
            now: the time, on the clock the core is fed.
            credential: the sender's CURVE credential (None: not authenticated).
        """
        message = self._message  # (one statement per field: no tuple made)
        message.peer = peer
        message.now = now
        message.credential = credential
        out: list[Send] = []
        message.out = out
        try:
            event = protocol.parse(frames)
            kind = type(event)
            if credential is None or self._permits(event, message, credential):
                limit = self.settings.max_message
                if limit is not None and kind in self._large and sum(map(len, frames)) > limit:  # (a call less)
                    self._large[kind](event, message)
                else:
                    self._handlers[kind](event, message)
        except Exception:
            self._caught("a message", now)
        del message.out  # the kept turn must not hold what is sent (a large frame's buffer) until the next message
        if self._next_sweep is None:
            self._next_sweep = now + self.settings.heartbeat_interval
        return out

    def deadline(self) -> float | None:
        """The time at which :meth:`tick` next has work to do, or None if it has none."""
        soonest = self._next_sweep
        if self._beats:
            beat = self._beats[0].beat
            soonest = beat if soonest is None else min(beat, soonest)
        if self._deadlines:
            due = self._deadlines.soonest()
            if due is not None and (soonest is None or due < soonest):
                soonest = due
        if self._throttled:
            due = min(self._throttled.values())
            if soonest is None or due < soonest:
                soonest = due
        if self._resting:
            due = self._resting.soonest()
            if due is not None and (soonest is None or due < soonest):
                soonest = due
        due = self._paced_due
        if due is not None and (soonest is None or due < soonest):
            soonest = due
        return soonest

    def tick(self, now: float) -> list[Send]:
        """Heartbeat the workers whose turn has come (at most :data:`BEATS_PER_TICK` of them: a later tick
        does the rest), expiring the silent ones; do the other periodic work when its time has come, answer
        the tasks whose deadline has passed, then dispatch what rate limits now allow; return what to send.

        Args:
            now: the time, on the clock the core is fed.
        """
        turn = _Turn(now)
        if self._beats and self._beats[0].beat <= now:
            self._heartbeat(turn)
        if self._next_sweep is not None and now >= self._next_sweep:
            try:
                self._sweep(turn)
            except Exception:  # the next sweep comes an interval later, as after one that succeeded
                self._next_sweep = now + self.settings.heartbeat_interval
                self._caught("the periodic sweep", now)
        if self._deadlines:
            try:
                self._expire_deadlines(turn)
            except Exception:
                self._caught("the deadlines", now)
        if self._resting:
            try:
                self._wake(turn)
            except Exception:
                self._caught("the resting workers", now)
        for service in [s for s, when in self._throttled.items() if when <= now]:
            del self._throttled[service]
            try:
                self._dispatch(service, turn)
            except Exception:
                self._caught("a dispatch", now)
        if self._paced_due is not None and now >= self._paced_due:
            self._answer_waiting(turn)
        return turn.out

    def set_flow(self, name: str, now: float, **limits: object) -> list[Send]:
        """Set the flow limits of the services named ``name`` to ``limits``, those not given lifted; return what
        to send. ValueError on an unknown or bad limit.

        Args:
            name: the service name.
            now: the time.
            limits: by keyword, the fields of :class:`~generaldomo.sansio.broker.flow.flow.FlowLimits` (``LIMIT_NAMES``;
                their knobs: :data:`generaldomo.sansio.config.knobs.FLOW`), in the forms it and ``mmi.flow`` take:
                ``rate`` (dispatches per second), ``burst``, ``concurrency``, ``bytes_in_flight``, ``adaptive``
                (an ``AdaptiveLimits`` or ``{"min": 1, "max": 64}``), ``tenants`` (tenant name -> a
                ``TenantLimits`` or ``{"weight": 3, "concurrency": 8}``), ``backoff`` (a ``BackoffLimits`` or
                ``{"min": 1, "max": 50}``).

        Example:
            >>> import random
            >>> from generaldomo import BrokerCore
            >>> core = BrokerCore(random=random.Random(1).randbytes)
            >>> core.set_flow("echo", 0.0, rate=5, burst=1, concurrency=10, tenants={"alice": {"weight": 3}})
            []
            >>> core.flow_limits("echo").concurrency, core.flow_limits("echo").tenants["alice"].weight
            (10, 3)
        """
        return self.apply_flow(mmi.FlowChange(name, FlowLimits().merged(limits)), now)

    def apply_flow(self, change: mmi.FlowChange, now: float, where: Connection | None = None) -> list[Send]:
        """Apply new flow limits to the services named ``change.name``, now and when they appear. The entry is
        the operator's (kept while idle) unless ``where`` names the connection of the peer that set it: then it
        is charged to that connection and forgotten once no service of its name has been busy for
        ``service_idle``; an entry of the operator's stays the operator's. The change is reported
        (:meth:`take_changes`). Raises :class:`~generaldomo.errors.OverBudget` when a peer's entry does not
        fit the ledger.

        Args:
            change: the change (as ``mmi.flow`` parses it).
            now: the time.
            where: the connection that asked (its entry counts against it), None: the operator's.
        """
        name = change.name
        charged = self._flow_charges.pop(name, None)
        if charged is not None:
            self.ledger.release(charged[0], Kind.FLOW, charged[1])
            self._flow_idle_since.pop(name, None)
        if change.limits.unset:
            self.flows.pop(name, None)  # back to no limits: nothing to remember
        else:
            if where is not None and (charged is not None or name not in self.flows):
                size = flow_charge(name, change.limits.tenants or ())
                refusal = self.ledger.admit(where, Kind.FLOW, size)
                if refusal is not None:
                    if charged is not None:  # the entry stays as it was, charged as it was
                        self.ledger.charge(charged[0], Kind.FLOW, charged[1])
                        self._flow_charges[name] = charged
                    self.counters[refusal.counter(Kind.FLOW)] += 1
                    raise errors.OverBudget(f"no room for more flow limits: {self._refusal_text(refusal, Kind.FLOW)}")
                self.ledger.charge(where, Kind.FLOW, size)
                self._flow_charges[name] = (where, size)
            self.flows[name] = change.limits
        self._changed.pop(name, None)
        self._changed[name] = change
        turn = _Turn(now)
        for service in [s for s in self.resolver.services() if s.name == change.name]:
            service.apply_flow(change.limits)
            self._throttled.pop(service, None)
            self._dispatch(service, turn)
        return turn.out

    @property
    def changed(self) -> bool:
        """True when flow limits changed since :meth:`take_changes` was last called."""
        return bool(self._changed)

    def take_changes(self) -> list[mmi.FlowChange]:
        """The flow changes since the last call, the latest per service name, in the order they were made (the
        IO layer keeps them, e.g. in the state directory)."""
        changes, self._changed = list(self._changed.values()), {}
        return changes

    def flow_limits(self, name: str) -> FlowLimits:
        """The limits configured for the service name ``name``.

        Args:
            name: the service name.
        """
        return self.flows.get(name, _UNSET)

    def live_flow(self, name: str) -> Flow | None:
        """The flow of the live service called ``name``, if there is one (``mmi.flow`` shows its limits).

        Args:
            name: the service name.
        """
        return next((service.flow for service in self.resolver.services() if service.name == name), None)

    def set_endpoints(self, endpoints: Sequence[tuple[str, str]]) -> None:
        """Tell the core what its links are bound to, as ``(transport, endpoint)``, for the status report.

        Args:
            endpoints: ``(transport, endpoint)`` of each bound endpoint.
        """
        self._endpoints = list(endpoints)

    def count(self, name: str, n: int = 1) -> None:
        """Count ``n`` events the IO layer saw (e.g. ``connections_refused``) in the status report.

        Args:
            name: the counter's name.
            n: how many.
        """
        self.counters[name] += n

    def _caught(self, handling: str, now: float) -> None:
        """Count and log the unexpected error being handled (see :meth:`receive`)."""
        self.counters[INTERNAL_ERRORS] += 1
        self._barrier.caught(handling, now)

    def report(self, now: float, query: StatusQuery = _ALL, page_bytes: int = PAGE_BYTES) -> StatusReport:
        """The status report at ``now``: the broker's totals, and the page of services and workers ``query``
        asks for (see :mod:`generaldomo.sansio.broker.report`). Its cost grows with the page, which is bounded in bytes
        (:data:`~generaldomo.sansio.broker.report.PAGE_BYTES`), and with the number of services and workers only by a
        look at each (no report is built for those left out).

        Args:
            now: the time.
            query: which page of services and workers.
            page_bytes: the page's bytes (by the records' estimates), at most.
        """
        expiry = self.settings.expiry
        services, count, queued, in_flight = self._service_page(query)
        workers = self._worker_page(query)
        broker = BrokerReport(
            instance=self._instance.hex(),
            uptime=round(now - self.started, 3),
            endpoints=[Endpoint(transport=str(t), endpoint=endpoint) for t, endpoint in self._endpoints],
            counters=dict(self.counters),
            queued=queued,
            settings=SettingsReport.of(self.settings, limits.as_settings()),
            queued_bytes=self._held_total,
            kept_answers=len(self._kept),
            kept_bytes=self._kept.bytes,
            kept_evicted=self._kept.evicted,
            ledger=self._ledger_report(),
            service_count=count,
            worker_count=len(self._workers),
            hosts=self._busiest_hosts(),
            internal_errors=self.counters[INTERNAL_ERRORS],
            in_flight=in_flight,
        )
        service_reports, more_services = page(
            services,
            query.limit,
            lambda s: ServiceReport.of(s, self._held.get(s, 0), now, self._tenant_name),
            page_bytes,
        )
        worker_reports, more_workers = page(
            workers,
            query.limit,
            lambda worker: WorkerReport(
                peer=worker.label,
                description=worker.description[:DESCRIPTION_BYTES].decode(errors="replace"),
                service=worker.service.name,
                dialect=worker.dialect.value,
                state=worker.state.value,
                tasks_done=worker.done,
                last_seen=round(max(0.0, now - (worker.expires - expiry)), 3),
                host=worker.host,
                pid=worker.pid,
                description_bytes=len(worker.description),
                serial=worker.serial,
            ),
            page_bytes,
        )
        next_page = NextPage(  # after the last one listed, when there is one more
            services_after=service_reports[-1].name if more_services and query.order == "name" else None,
            workers_after=worker_reports[-1].serial if more_workers else None,
        )
        return StatusReport(broker=broker, services=service_reports, workers=worker_reports, next=next_page)

    def _service_page(self, query: StatusQuery) -> tuple[list[Service], int, int, int]:
        """The services of ``query``'s page and one more if there are more (in its order), the number of
        services, and the tasks queued and in flight in all."""
        count = queued = in_flight = 0
        chosen: list[Service] = []
        name, after = query.service, query.services_after
        for service in self.resolver.services():
            count += 1
            queued += len(service.pending)
            in_flight += service.flow.in_flight
            if (name is None or service.name == name) and (after is None or service.name > after):
                chosen.append(service)
        if query.order == "busy":
            busiest = heapq.nsmallest(query.limit, chosen, key=_busy)
            return busiest, count, queued, in_flight
        return heapq.nsmallest(query.limit + 1, chosen, key=_name), count, queued, in_flight

    def _worker_page(self, query: StatusQuery) -> list[Worker]:
        """The workers of ``query``'s page and one more if there are more, in order of registration."""
        workers: Iterable[Worker] = self._workers.values()
        after, name = query.workers_after, query.service
        if after is not None:
            workers = itertools.dropwhile(lambda worker: worker.serial <= after, workers)
        if name is not None:
            workers = (worker for worker in workers if worker.service.name == name)
        return list(itertools.islice(workers, query.limit + 1))

    def _busiest_hosts(self) -> dict[str, int]:
        """Workers per announced host ("unknown": none announced) for the :data:`MAX_HOSTS` hosts with the most,
        the others summed as "other": a few entries, whatever the workers say."""
        named = self._hosts.most_common(MAX_HOSTS)
        rest = len(self._workers) - sum(n for _, n in named)
        return dict(sorted(named)) | ({"other": rest} if rest else {})

    def _ledger_report(self) -> LedgerReport:
        ledger = self.ledger
        top = [
            ConnectionReport(
                connection=self._connection_label(where),
                bytes=account.bytes,
                holdings={k.value: n for k, n in account.counts.items()},
            )
            for where, account in ledger.top(TOP_CONNECTIONS)
        ]
        held = {kind.value: size for kind, size in ledger.by_kind.items() if size}
        return LedgerReport(held_bytes=ledger.total, by_kind=held, connections=len(ledger), top=top)

    def holdings(self) -> Iterator[tuple[Connection, Kind, int]]:
        """Every holding the core keeps on peers' behalf, as ``(connection, kind, bytes)``, recomputed from its
        state: what its ledger must add up to, less what the IO layer charges (an audit, for the tests)."""
        for task in self._tasks.values():
            yield connection(task.client.link, task.client.address), Kind.TASK, task.charge
        for worker in self._workers.values():
            yield connection(worker.peer.link, worker.peer.address), Kind.WORKER, worker.charge
        for where, charge in self._adopted.values():
            yield where, Kind.SERVICE, charge
        for where, charge in self._flow_charges.values():
            yield where, Kind.FLOW, charge
        for peer in self._heard:
            yield connection(peer.link, peer.address), Kind.CLIENT, OVERHEAD[Kind.CLIENT] + address_bytes(peer.address)
        for where, size in self._kept.holdings():
            yield where, Kind.KEPT, size

    def stop_accepting(self) -> None:
        """From now on answer new requests ``503`` (the broker is stopping); the requests it holds are still served,
        and a retry of one of them still gets its answer."""
        self._stopping = True

    def abandon(self, now: float) -> list[Send]:
        """Answer every request still held, queued or running, ``503`` and forget it: the broker stops for good and
        no other answer will come. Call :meth:`close` next. Returns what to send.

        Args:
            now: the time.
        """
        turn = _Turn(now)
        reason = b"the broker stopped before the request was answered"
        for task in list(self._tasks.values()):
            if task.state is TaskState.CANCELLED:
                self._remove(task, task.state)
                continue
            if task.worker is not None:
                task.worker.task = None
            self.counters["abandoned"] += 1
            self._complete(task, protocol.UNAVAILABLE, [reason], turn, dispatch=False)
        return turn.out

    def close(self) -> list[Send]:
        """Tell every worker the broker is going away; return what to send."""
        out: list[Send] = [_dismiss(w.peer, w.dialect) for w in self._workers.values()]
        self._workers.clear()
        return out

    # ------------------------------------------------------------------------------------------- roles

    def _permits(self, event: Event, message: _Message, credential: Credential) -> bool:
        """True when ``credential`` (the message's) allows ``event``; else refuse it (403 or DISCONNECT), counted
        and logged."""
        needs = NEEDS.get(type(event))
        if needs is None or credential.may(needs):
            return True
        self.counters["forbidden"] += 1
        self._warn(
            "forbidden", message.peer, message.now, "refused a %s from a key without the %s role",
            type(event).__name__, needs, key=credential.key,
        )  # fmt: skip
        if isinstance(event, ClientRequest):
            self._reject(event, message, protocol.FORBIDDEN, f"this key lacks the {needs} role")
        elif isinstance(event, WorkerReady | WorkerReply | WorkerHeartbeat):
            message.out.append(_dismiss(message.peer, event.dialect))
        return False

    # ------------------------------------------------------------------------------------------- clients

    def _on_request(self, event: ClientRequest, message: _Message) -> None:
        self.counters["requests"] += 1
        if event.description.startswith(MMI_PREFIX):
            self._answer_mmi(event, message)
            return
        peer, now, credential = message.peer, message.now, message.credential
        key = None
        owner = credential.key if credential is not None else None
        where = connection(peer.link, peer.address)
        if event.request_id is not None:
            self._refresh(peer, now)
            key = request_key(owner, event.request_id)
            if self._known(message, key, event):
                self._listen(peer, where, now)
                self.counters["retries_absorbed"] += 1
                return
        if self._stopping:
            self._reject(event, message, protocol.UNAVAILABLE, "the broker is stopping")
            return
        service = self._resolve_request(event, message)
        if service is None:
            return
        if key is not None and self._claims and key in self._claims and self._attach(event, message, key, service):
            return
        if event.flags & protocol.FLAG_KNOWN_SERVICE and self._unknown(service, now):
            self.counters["unknown_service"] += 1
            self._reject(event, message, protocol.NOT_FOUND, self._no_such_service(service.name, now))
            return
        size = len(event.description) + sum(map(len, event.body))
        charge = request_charge(size, len(event.body), event.request_id, peer.address)
        refusal = self._adopt(service, where) or self._over_budget(service, where, charge)
        if refusal is None:
            listening = key is None or peer in self._heard
            client = 0 if listening else OVERHEAD[Kind.CLIENT] + address_bytes(peer.address)
            refusal = self._ledger_refusal(where, Kind.TASK, charge + client)
        if refusal is not None:
            self.counters["over_budget"] += 1
            self._reject(event, message, protocol.OVER_BUDGET, refusal)
            return
        deadline = None
        if event.deadline is not None:
            if event.deadline <= 0:
                self.counters["past_deadline"] += 1
                self.counters["expired"] += 1
                self._reject(event, message, protocol.EXPIRED, "the request's deadline had passed when it came")
                return
            deadline = now + event.deadline
        if key is not None:
            self._listen(peer, where, now)
        task_id = self._random(TASK_ID_BYTES)
        if self._tickets is not None and event.request_id is not None:
            digest = request_digest(event.description, event.body)
            task_id = self._tickets.issue(task_id, service.name, owner, event.request_id, digest)
        # the tenant: a key, a name, or else the connection (a forged envelope hop is not a tenant of its own)
        tenant = credential.key if credential is not None else event.tenant or Peer(*where)
        task = Task(
            task_id, peer, event.dialect, key, event.description, event.body, service, now, size,
            charge, deadline=deadline, tenant=tenant, priority=event.priority,
            detached=bool(event.flags & protocol.FLAG_DETACHED),
            fail_unknown=bool(event.flags & protocol.FLAG_KNOWN_SERVICE),
        )  # fmt: skip
        self._tasks[task.id] = task
        if key is not None:
            self._by_request[key] = task
        self.ledger.charge(where, Kind.TASK, charge)
        self._held[service] = self._held.get(service, 0) + charge
        self._held_total += charge
        if deadline is not None:
            self._deadlines.add(deadline, task)
        service.push(task)
        self._dispatch(service, message)

    def _listen(self, peer: Peer, where: Connection, now: float) -> None:
        """Note that the generaldomo client at ``peer`` was heard (its queued tasks live while it is not silent);
        a client the broker did not listen to yet is charged to its connection, and not listened to beyond the
        budgets (its tasks then wait as MDP ones do, without the silence rule)."""
        heard = self._heard
        if peer in heard:
            heard[peer] = now
            heard.move_to_end(peer)
            return
        size = OVERHEAD[Kind.CLIENT] + address_bytes(peer.address)
        if self.ledger.admit(where, Kind.CLIENT, size) is None:
            self.ledger.charge(where, Kind.CLIENT, size)
            heard[peer] = now

    def _unlisten(self, peer: Peer) -> None:
        del self._heard[peer]
        self.ledger.release(
            connection(peer.link, peer.address), Kind.CLIENT, OVERHEAD[Kind.CLIENT] + address_bytes(peer.address)
        )

    def _refresh(self, peer: Peer, now: float) -> None:
        """A generaldomo client the broker listens to was heard again."""
        heard = self._heard
        if peer in heard:
            heard[peer] = now
            heard.move_to_end(peer)

    def _known(self, message: _Message, key: RequestKey, request: ClientRequest | None = None) -> bool:
        """True when the request ``key`` has a kept answer (sent again to the message's sender) or a live task
        (whose answer now goes to the sender, unless its connection has no room for it). Given the ``request`` (not a
        re-ask), a kept answer or a live task counts only if it is for the same description and payload: one for
        another request under the same id (a peer sent the id first) is left to its sender, counted
        (``request_id_conflicts``), and this request is a new task."""
        peer, now = message.peer, message.now
        digest = None if request is None else lambda: request_digest(request.description, request.body)
        kept = self._kept.get(key, now, digest)
        if kept is None and request is not None and self._kept.get(key, now) is not None:
            self.counters["request_id_conflicts"] += 1  # kept for another request: this one is a new task
        if kept is not None:
            size, where = sum(map(len, kept)), connection(peer.link, peer.address)
            if self._over_connection_budget(peer, size):
                self.counters["resends_refused"] += 1  # it asks again later, when its connection has room
            elif not self._pacer.may_go(where, now):
                self.counters["resends_paced"] += 1  # it asks again later, when its connection's work allows
            else:
                self.counters["answers_resent"] += 1
                self._pacer.charge(where, resend_cost(size), now)
                message.out.append(Respond(peer, kept))
            return True
        task = self._by_request.get(key)
        if task is None:
            return False
        if request is not None and (task.description != request.description or task.body != request.body):
            self.counters["request_id_conflicts"] += 1
            del self._by_request[key]  # that task runs on for its sender; its answer is not kept
            task.key = displaced(key)
            return False
        if task.client != peer:
            self._move(task, peer)
        return True

    def _unknown(self, service: Service, now: float) -> bool:
        """True when the broker knows that nobody serves ``service``: no worker now, none within
        ``served_memory``, and the broker has run long enough for the workers of a restart to be back."""
        if service.workers or self._in_grace(now):
            return False
        return not self._served.recent(service.name, now)

    def _in_grace(self, now: float) -> bool:
        """True within ``known_service_grace`` of the start, when no service is known to have no workers."""
        return now - self.started < self.settings.known_service_grace

    def _end_grace(self, turn: _Turn) -> None:
        """Once the grace after start is over, answer ``404`` to the requests that asked to fail fast during it
        and still wait for a service nobody serves, as if they came now (once: one pass over the tasks)."""
        self._graced = True
        now = turn.now
        unknown = [t for t in self._tasks.values() if t.fail_unknown and t.state is TaskState.QUEUED]
        for task in unknown:
            if self._unknown(task.service, now):
                self.counters["unknown_service"] += 1
                reason = self._no_such_service(task.service.name, now)
                self._complete(task, protocol.NOT_FOUND, [reason.encode()], turn)

    def _no_such_service(self, name: str, now: float) -> str:
        """The text of a ``404`` for ``name``: the services that have workers, and the nearest name (among the
        first :data:`~generaldomo.sansio.broker.served.MAX_NAMES` services: a bounded cost per refusal)."""
        services = itertools.islice(self.resolver.services(), MAX_NAMES)
        names = sorted({s.name for s in services if s.workers and s.name != name})
        nearest = self._served.nearest(name, names)
        listed = ", ".join(repr(n) for n in names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
        hint = f"; did you mean {nearest!r}?" if nearest else ""
        memory = self.settings.served_memory
        return (
            f"no worker serves {name!r}, and none has in the last {memory:g} s; services with workers: "
            f"{listed or 'none'}{hint}"
        )

    def _move(self, task: Task, peer: Peer) -> None:
        """Send ``task``'s answer to ``peer`` (its client's new address): its charge moves with it, if it fits."""
        old = connection(task.client.link, task.client.address)
        where = connection(peer.link, peer.address)
        charge = task.charge - address_bytes(task.client.address) + address_bytes(peer.address)
        self.ledger.release(old, Kind.TASK, task.charge)
        if self.ledger.room(where, charge) is not None:
            self.ledger.charge(old, Kind.TASK, task.charge)  # the answer goes where it would have gone
            self.counters["moves_refused"] += 1
            return
        self.ledger.charge(where, Kind.TASK, charge)
        delta = charge - task.charge
        self._held[task.service] += delta
        self._held_total += delta
        task.charge = charge
        task.client = peer

    def _resolve_request(self, event: ClientRequest, message: _Message) -> Service | None:
        """The service for a request, or None after answering the client with an error."""
        try:
            return self.resolver.for_request(event.description)
        except ResolveError as error:
            self._reject(event, message, protocol.BAD_REQUEST, str(error))
        except Exception as error:  # a faulty resolver plug-in must not stop the broker
            log.exception("resolver failed on request description %r", event.description[:64])
            self._reject(event, message, protocol.BAD_REQUEST, f"resolver error: {error!r}")
        return None

    def _over_budget(self, service: Service, where: Connection, size: int) -> str | None:
        """Why a request charged ``size`` bytes for ``service`` from ``where`` would exceed a queue budget, or None
        if it fits: the connection's share of the queue, then the queue's and the service's budgets, by the
        small-request rule (:func:`~generaldomo.sansio.broker.accounts.ledger.exceeds`) as the ledger's total."""
        settings = self.settings
        held = self.ledger.account(where).tasks + size
        limit = settings.connection_queue_bytes
        if limit is not None and held > limit:
            share = settings.connection_queue_share
            return f"connection queue budget exceeded: connection_queue_share={share} of queue_bytes held for it"
        if exceeds(settings.queue_bytes, self._held_total + size, held):
            return f"broker queue budget exceeded: queue_bytes={settings.queue_bytes} bytes of requests held"
        limit = settings.service_queue_bytes
        if exceeds(limit, self._held.get(service, 0) + size, held):
            return f"service queue budget exceeded: service_queue_bytes={limit} bytes held for {service.name!r}"
        return None

    def _ledger_refusal(self, where: Connection, kind: Kind, size: int) -> str | None:
        """Why a new holding of ``kind`` and ``size`` bytes does not fit the ledger (counted), or None if it does."""
        refusal = self.ledger.admit(where, kind, size)
        if refusal is None:
            return None
        self.counters[refusal.counter(kind)] += 1
        return self._refusal_text(refusal, kind)

    def _over_connection_budget(self, peer: Peer, size: int = 0) -> bool:
        """True when ``peer``'s connection holds more than its budget (its unread replies included), or would
        with ``size`` more."""
        return self.ledger.over_budget(connection(peer.link, peer.address), size)

    def _refusal_text(self, refusal: Refusal, kind: Kind) -> str:
        settings = self.settings
        if refusal is Refusal.TOTAL_BYTES:
            return f"broker budget exceeded: held_bytes={settings.held_bytes} bytes held for all peers"
        if refusal is Refusal.CONNECTION_BYTES:
            return f"connection budget exceeded: connection_bytes={settings.connection_bytes} bytes held for it"
        return f"this connection holds {self.ledger.caps[kind]} {kind.value}, the most one connection may"

    def _on_client_heartbeat(self, event: ClientHeartbeat, message: _Message) -> None:
        peer, owner = message.peer, message.owner
        self._refresh(peer, message.now)
        self.counters["reasked"] += len(event.request_ids)
        asked = dict.fromkeys(event.request_ids)  # each once, however often it is named
        unknown = [
            rid for rid in asked if not self._known(message, key := request_key(owner, rid)) and key not in self._claims
        ]
        if self._recovering(message.now):  # workers of the previous instance may still claim them: not "unknown" yet
            unknown = []
        message.out.append(Beat(peer, protocol.gdp_client_heartbeat(self._instance, self._echo(peer, unknown))))

    def _recovering(self, now: float) -> bool:
        """Within the recovery window after a restart (see :meth:`_dispatch`)."""
        return self._hold_until is not None and now < self._hold_until

    def _echo(self, peer: Peer, unknown: list[bytes]) -> list[bytes]:
        """The re-asked ids a HEARTBEAT answer names as unknown: at most :data:`ECHO_BYTES` of them (the client
        asks about the others again), and none while ``peer``'s connection is over its budget."""
        if not unknown:
            return unknown
        if self._over_connection_budget(peer):
            self.counters["echoes_refused"] += len(unknown)
            return []
        echoed: list[bytes] = []
        room = ECHO_BYTES
        for rid in unknown:
            room -= len(rid)
            if room < 0:
                self.counters["echoes_refused"] += len(unknown) - len(echoed)
                break
            echoed.append(rid)
        return echoed

    def _on_cancel(self, event: ClientCancel, message: _Message) -> None:
        self._refresh(message.peer, message.now)
        task = self._by_request.pop(request_key(message.owner, event.request_id), None)
        if task is None:
            return
        self.counters["cancelled"] += 1
        self._withdraw(task, message)

    def _withdraw(self, task: Task, turn: _Turn) -> None:
        """Let ``task`` go, already out of ``_by_request``: off its queue, or its worker's result to be dropped (the
        worker told, if it understands CANCEL)."""
        state = task.state
        task.state = _T_CANCEL[state]
        if task.state is TaskState.DONE:  # it was queued
            task.service.drop(task)
            self._remove(task, state, dequeued=True)
        elif task.worker is not None:
            task.worker.state = _W_CANCEL[task.worker.state]
            self._tell_cancel(task.worker, task, turn)

    def _tell_cancel(self, worker: Worker, task: Task, turn: _Turn) -> None:
        """Tell ``worker`` (if it understands CANCEL) that nobody waits for the result of ``task`` any more."""
        if "cancel" in worker.features:
            turn.out.append(Cancel(worker.peer, protocol.worker_cancel(task.id)))

    def _on_large_request(self, event: ClientRequest, message: _Message) -> None:
        self.counters["too_large"] += 1
        reason = f"message larger than the broker's limit of {self.settings.max_message} bytes"
        self._reject(event, message, protocol.TOO_LARGE, reason)

    def _reject(self, event: ClientRequest, message: _Message, status: bytes, reason: str) -> None:
        """Answer the request ``event`` with the error ``status`` saying ``reason`` (counted, and logged)."""
        self.counters["rejected"] += 1
        peer = message.peer
        level = logging.INFO
        self._warn(f"rejected {status.decode()}", peer, message.now, "rejected a request: %s", reason, level=level)
        frames = protocol.client_reply(
            event.dialect, event.request_id, event.description, status, [reason.encode()], final=True
        )
        if frames is not None:
            message.out.append(Respond(peer, frames))

    def _answer_mmi(self, event: ClientRequest, message: _Message) -> None:
        """Answer a management request now, or, for an expensive one (:data:`~generaldomo.sansio.broker.mmi.PACED`)
        beyond its connection's or the broker's work per second, when its turn comes (a tick), or ``429`` beyond
        the waiting lines (:mod:`generaldomo.sansio.broker.accounts.pacing`)."""
        if event.description in mmi.PACED:
            peer, now = message.peer, message.now
            where = connection(peer.link, peer.address)
            pacer = self._pacer
            if not pacer.may_go(where, now):
                size = len(event.description) + sum(map(len, event.body)) + address_bytes(peer.address)
                later = pacer.wait(where, (peer, event, message.credential), size, now)
                if later is None:
                    self.counters["paced"] += 1
                    self._paced_due = pacer.due(now)
                else:
                    self.counters["paced_refused"] += 1
                    self._slow_down_peer(event, message, later)
                return
        self._answer_mmi_now(event, message)

    def _slow_down_peer(self, event: ClientRequest, message: _Message, later: float) -> None:
        """Answer ``event`` ``429``: its connection's expensive requests wait beyond their line; ``later``: the
        seconds after which one may go."""
        reason = "too many expensive requests waiting: this connection's work per second is spent"
        self.counters["rejected"] += 1
        self._warn("paced 429", message.peer, message.now, "rejected a request: %s", reason, level=logging.INFO)
        body = [reason.encode(), protocol.retry_after_frame(round(later, 3))]
        frames = protocol.client_reply(
            event.dialect, event.request_id, event.description, protocol.OVER_BUDGET, body, final=True
        )
        if frames is not None:
            message.out.append(Respond(message.peer, frames))

    def _answer_mmi_now(self, event: ClientRequest, message: _Message) -> None:
        peer, now, credential = message.peer, message.now, message.credential
        admin = credential is None or credential.may(Role.ADMIN)
        # a change by an authenticated admin is the operator's; one by an unauthenticated peer is that peer's
        where = connection(peer.link, peer.address)
        try:
            answer = mmi.answer(self, event.description, event.body, now, admin)
            owner = where if credential is None else None
            caused = self.apply_flow(answer.change, now, owner) if answer.change is not None else []
        except errors.ManagementError as error:
            if isinstance(error, errors.Forbidden):
                self.counters["forbidden"] += 1
            self._reject(event, message, error.status, str(error))
            return
        if answer.work:
            self._pacer.charge(where, answer.work, now)
        status, body = answer.status, answer.body
        frames = protocol.client_reply(event.dialect, event.request_id, event.description, status, body, True)
        if frames is not None:
            message.out.append(Respond(peer, frames))
        message.out.extend(caused)

    def _answer_waiting(self, turn: _Turn) -> None:
        """Answer the expensive management requests whose turn has come (see :meth:`_answer_mmi`)."""
        now = turn.now
        for _, (peer, event, credential) in self._pacer.ready(now):
            message = _Message()
            message.peer, message.now, message.credential, message.out = peer, now, credential, turn.out
            try:
                self._answer_mmi_now(event, message)
            except Exception:
                self._caught("a management request", now)
        self._paced_due = self._pacer.due(now)

    # ------------------------------------------------------------------------------------------- workers

    def _on_ready(self, event: WorkerReady, message: _Message) -> None:
        known = self._workers.get(message.peer)
        if known is not None:
            log.info("worker %s sent READY again; re-registering it", known.label)
            self._forget(known, message)
            if event.dialect is not Dialect.GDP:  # MDP: a second READY is a protocol error
                message.out.append(_dismiss(message.peer, event.dialect))
                return
        self._register(message, event.dialect, event.description, (event.host, event.pid), event.features)

    def _register(
        self, message: _Message, dialect: Dialect, description: bytes,
        where: tuple[str | None, int | None] = (None, None), features: frozenset[str] = frozenset(),
        *, busy: bool = False,
    ) -> Worker | None:  # fmt: skip
        """Register the worker that sent ``message``, running on ``where`` = (host, pid) as far as it said and
        understanding ``features``, waiting (or ``busy`` with a task of its own, resumed); a worker beyond
        ``max_workers``, or beyond what its connection may hold (one connection may claim many peer addresses
        through envelopes), is told to go. The worker, or None if it was told to go."""
        peer, now = message.peer, message.now
        limit = self.settings.max_workers
        if limit is not None and len(self._workers) >= limit:
            self.counters["workers_refused"] += 1
            # one line per interval for them all: a flood comes from many (claimed) peers
            self._warnings.warn("too many workers", None, lambda: "new workers", now, "refused: %d registered", limit)
            message.out.append(_dismiss(peer, dialect))
            return None
        service = self._resolve_worker(message, dialect, description)
        if service is None:
            return None
        account = connection(peer.link, peer.address)
        host, pid = where
        charge = OVERHEAD[Kind.WORKER] + len(description) + address_bytes(peer.address) + len(host or "")
        refusal = self._ledger_refusal(account, Kind.WORKER, charge)
        if refusal is not None:
            self.counters["workers_refused"] += 1
            self._warn("refused worker", peer, now, "refused a worker: %s", refusal)
            message.out.append(_dismiss(peer, dialect))
            return None
        state = WorkerState.BUSY if busy else WorkerState.WAITING
        worker = Worker(peer, dialect, description, service, now + self.settings.expiry, self._label(peer), state)
        worker.host, worker.pid = host, pid
        worker.features = features
        worker.charge = charge
        self._serial += 1
        worker.serial = self._serial
        worker.beat = now + self.settings.heartbeat_interval
        self.ledger.charge(account, Kind.WORKER, charge)
        self._workers[peer] = worker
        self._hosts[host or "unknown"] += 1
        self._beats.append(worker)
        service.join(worker)
        self._served.seen(service.name, now)
        self.counters["workers_registered"] += 1
        if not busy:
            self._wait(worker, message)
        return worker

    def _resolve_worker(self, message: _Message, dialect: Dialect, description: bytes) -> Service | None:
        """The service for a worker's description, or None after telling the worker to go away."""
        peer, credential = message.peer, message.credential
        if description.startswith(MMI_PREFIX):
            reason = "mmi. services belong to the broker"
        else:
            try:
                service = self.resolver.for_worker(description)
                if credential is None or credential.may_serve(service.name):
                    refusal = self._adopt(service, connection(peer.link, peer.address))
                    if refusal is None:
                        return service
                    reason = refusal
                else:
                    self.counters["forbidden"] += 1
                    reason = f"its key may not serve {service.name!r}"
            except ResolveError as error:
                reason = str(error)
            except Exception as error:  # a faulty resolver plug-in must not stop the broker
                log.exception("resolver failed on service description %r", description[:64])
                reason = repr(error)
        self._warn(
            "refused worker", peer, message.now, "refused worker with description %r: %s", description[:64], reason,
            key=credential.key if credential is not None else description[:64],
        )  # fmt: skip
        self.counters["workers_refused"] += 1
        message.out.append(_dismiss(peer, dialect))
        return None

    def _on_reply(self, event: WorkerReply, message: _Message) -> None:
        self._result(event, message, event.status, event.body)

    def _on_large_reply(self, event: WorkerReply, message: _Message) -> None:
        self.counters["too_large"] += 1
        self._warn("too large", message.peer, message.now, "dropped a result larger than max_message")
        reason = f"message larger than the broker's limit of {self.settings.max_message} bytes"
        if event.final:  # the same task would give the same result again: fail it
            self._result(event, message, protocol.TOO_LARGE, (reason.encode(),))
        elif (worker := self._workers.get(message.peer)) is not None:
            worker.expires = message.now + self.settings.expiry

    def _result(self, event: WorkerReply, message: _Message, status: bytes, body: Sequence[bytes]) -> None:
        """A worker's (partial) result with ``status`` and ``body``: accepted only from the task's holder."""
        peer, now = message.peer, message.now
        worker = self._workers.get(peer)
        task = self._tasks.get(event.task_id)
        if worker is None or task is None or task.worker is not worker:
            resumed = worker is not None and worker.task is None and worker.state is WorkerState.BUSY
            forgotten = worker is None and event.dialect is Dialect.GDP and self._foreign(event.task_id) is not None
            if event.final and (resumed or forgotten):
                self._resumed_result(event, message, status, body, worker)
            else:
                self._refuse_result(event, message, worker, task)
            return
        worker.expires = now + self.settings.expiry
        if not event.final:
            if task.state is TaskState.RUNNING:
                frames = protocol.client_reply(task.dialect, task.request_id, task.description, status, body, False)
                if frames is not None:
                    message.out.append(Forward(task.client, frames))
            return
        worker.task = None
        worker.state = _W_RESULT[worker.state]
        worker.done += 1
        if self._tickets is not None:
            self._taken(worker, event.task_id)
        same = event.description is None or event.description == worker.description
        if task.state is TaskState.CANCELLED:
            self._remove(task, task.state)
        elif status == protocol.OVER_BUDGET and event.dialect is Dialect.GDP:  # "slow down": not a failure
            self._slow_down(task, worker, body, now)
            if not same or worker.rests is not None:
                self._dispatch(task.service, message)
        else:  # when the worker waits again on the same service, _wait below dispatches the place it freed
            self._complete(task, status, body, message, dispatch=not same)
        if not same and event.description is not None:
            self._unregister(worker, now)
            self._register(message, event.dialect, event.description, (worker.host, worker.pid), worker.features)
            return
        if worker.rests is None:
            self._wait(worker, message)

    def _slow_down(self, task: Task, worker: Worker, body: Sequence[bytes], now: float) -> None:
        """``worker`` answered 429: ``task`` goes back to the head of its queue (not a failure, not an attempt),
        the worker rests for the answer's retry_after (bounded both ways:
        :func:`~generaldomo.sansio.broker.flow.backoff.rest`) and its service's dispatch rate adapts, as far as the 429s
        of its workers justify."""
        service = task.service
        task.worker = None
        task.state = _T_REISSUE[task.state]
        task.attempts -= 1
        service.flow.finished(task.size)
        service.stopped(task)
        retry_after = protocol.parse_retry_after(body)
        worker.rests = now + rest(retry_after)
        self._resting.add(worker.rests, worker)
        service.flow.slow_down(now, task.dispatched, retry_after, worker.serial, len(service.workers))
        service.stats.throttled += 1
        self.counters["throttled"] += 1
        service.push(task, front=True)

    def _refuse_result(self, event: WorkerReply, message: _Message, worker: Worker | None, task: Task | None) -> None:
        peer, now = message.peer, message.now
        if worker is not None:
            worker.expires = now + self.settings.expiry
            if event.final and self._tickets is not None:
                self._taken(worker, event.task_id)  # whatever became of it, the worker need not hold it
        if task is None:
            self.counters["duplicates_dropped"] += 1
            if worker is not None:
                worker.service.stats.duplicates_dropped += 1
            self._warn("stale result", peer, now, "dropped a result for a task that is not live", level=logging.INFO)
        else:
            self.counters["results_refused"] += 1
            self._warn("refused result", peer, now, "refused a result from a peer that does not hold the task")
        if worker is None:
            message.out.append(_dismiss(peer, event.dialect))

    def _on_heartbeat(self, event: WorkerHeartbeat, message: _Message) -> None:
        worker = self._workers.get(message.peer)
        if worker is None:
            message.out.append(_dismiss(message.peer, event.dialect))
        else:
            worker.expires = message.now + self.settings.expiry

    def _on_disconnect(self, event: WorkerDisconnect, message: _Message) -> None:
        worker = self._workers.get(message.peer)
        if worker is not None:
            log.info("worker %s disconnected", worker.label)
            self._forget(worker, message)

    def _on_malformed(self, event: Malformed, message: _Message) -> None:
        """Count and log it; answer a generaldomo request 400; drop a registered worker that sent it (its task is
        reissued) and tell it DISCONNECT."""
        peer = message.peer
        self.counters["malformed"] += 1
        self._warn("malformed", peer, message.now, "dropped a malformed message: %s", event.reason)
        if event.request_id is not None:
            frames = protocol.client_reply(
                Dialect.GDP, event.request_id, b"", protocol.BAD_REQUEST, [event.reason.encode()], final=True
            )
            if frames is not None:
                message.out.append(Respond(peer, frames))
        elif event.worker is not None:
            worker = self._workers.get(peer)
            if worker is not None:
                self.counters["workers_malformed"] += 1
                log.info("worker %s sent a malformed message; dropping it", worker.label)
                self._forget(worker, message)
                message.out.append(_dismiss(peer, event.worker))

    # ------------------------------------------------------------------------------------------- hand-over

    def _foreign(self, task_id: bytes) -> Ticket | None:
        """What ``task_id`` says if it is a valid ticket of another instance on this state directory."""
        ticket = None if self._tickets is None else self._tickets.read(task_id)
        return ticket if ticket is not None and ticket.instance != self._instance else None

    def _on_resume(self, event: WorkerResume, message: _Message) -> None:
        peer, now = message.peer, message.now
        known = self._workers.get(peer)
        if known is not None:  # as a second READY: a new registration
            self._forget(known, message)
        where = (event.host, event.pid)
        worker = self._register(message, event.dialect, event.description, where, event.features, busy=True)
        if worker is None:
            return
        self.counters["workers_resumed"] += 1
        message.out.append(Beat(peer, self._worker_heartbeat(worker)))  # at once: the worker knows its RESUME was taken
        ticket = self._foreign(event.task_id)
        if ticket is None or ticket.service != worker.service.name:
            return  # not a task this broker can take over: the worker takes no task until its result comes
        key = request_key(ticket.owner, ticket.request_id)
        live = self._by_request.get(key)
        if live is None:
            worker.claim = Claim(event.task_id, ticket, now)
            self._claims[key] = worker
            worker.service.flow.adopt()
        elif live.state is TaskState.QUEUED and live.service is worker.service and _digest(live) == ticket.digest:
            live.service.drop(live)  # the client's resend came first: the worker's run is that task's
            self._run_at(live, worker, event.task_id, now)
            live.service.flow.adopt(live.size)
            self.counters["tasks_resumed"] += 1

    def _run_at(self, task: Task, worker: Worker, task_id: bytes, since: float) -> None:
        """Make ``task`` run at resumed ``worker`` under the id ``task_id`` (a ticket) since ``since``."""
        del self._tasks[task.id]
        # (last in acceptance order with an earlier time: were it reissued, a queue timeout would see it late)
        task.id, task.enqueued = task_id, min(task.enqueued, since)
        self._tasks[task_id] = task
        task.state = _T_DISPATCH[task.state]
        task.worker, worker.task = worker, task
        task.dispatched = since
        task.attempts += 1
        task.service.started(task, since)

    def _attach(self, event: ClientRequest, message: _Message, key: RequestKey, service: Service) -> bool:
        """A request a resumed worker runs has arrived: it becomes that worker's task (True); False if it is not
        the same request (another description or payload, or another service)."""
        peer, credential = message.peer, message.credential
        worker = self._claims[key]
        claim = worker.claim
        if (
            claim is None
            or service is not worker.service
            or request_digest(event.description, event.body) != (claim.ticket.digest)
        ):
            return False
        del self._claims[key]
        worker.claim = None
        where = connection(peer.link, peer.address)
        self._listen(peer, where, message.now)
        size = len(event.description) + sum(map(len, event.body))
        charge = request_charge(size, len(event.body), event.request_id, peer.address)
        task = Task(
            claim.task_id,
            peer,
            event.dialect,
            key,
            event.description,
            event.body,
            service,
            message.now,
            size,
            charge,
            tenant=credential.key if credential is not None else event.tenant or Peer(*where),
            priority=event.priority,
        )  # fmt: skip (it runs already: no budget refuses it, its bytes are charged like any task's)
        self._tasks[task.id] = task
        self._run_at(task, worker, claim.task_id, claim.since)
        self._by_request[key] = task
        self.ledger.charge(where, Kind.TASK, charge)
        self._held[service] = self._held.get(service, 0) + charge
        self._held_total += charge
        service.flow.finished()  # the claim's place in flight, now the task's, with its bytes
        service.flow.adopt(size)
        self.counters["tasks_resumed"] += 1
        return True

    def _drop_claim(self, worker: Worker) -> None:
        claim, worker.claim = worker.claim, None
        if claim is not None:
            del self._claims[request_key(claim.ticket.owner, claim.ticket.request_id)]
            worker.service.flow.finished()

    def _resumed_result(
        self, event: WorkerReply, message: _Message, status: bytes, body: Sequence[bytes], worker: Worker | None
    ) -> None:
        """The result of a resumed worker's own task, or of a worker this instance does not know (a restart
        forgot it) whose task an earlier instance dispatched: taken over if it can be, and the worker waits."""
        if worker is None:
            description = event.description if event.description is not None else b""
            worker = self._register(message, event.dialect, description, busy=True)
            if worker is None:
                return
        worker.expires = message.now + self.settings.expiry
        ticket = self._foreign(event.task_id)
        if ticket is not None and ticket.service == worker.service.name:
            self._hand_over(ticket, status, body, message)
        else:
            self.counters["duplicates_dropped"] += 1
        self._drop_claim(worker)
        self._taken(worker, event.task_id)
        worker.state = _W_RESULT[worker.state]
        worker.done += 1
        self._wait(worker, message)

    def _hand_over(self, ticket: Ticket, status: bytes, body: Sequence[bytes], message: _Message) -> None:
        """A result of a task an earlier instance dispatched, from the worker that sent ``message``: it answers the
        request if it is live here (whose own run is then let go) and is kept for the client's resend or re-ask
        (charged to that client's connection, else to the worker's); a request with another description or
        payload under the same id is not answered by it."""
        now = message.now
        key = request_key(ticket.owner, ticket.request_id)
        live = self._by_request.get(key)
        if live is not None and _digest(live) != ticket.digest:
            self.counters["handovers_refused"] += 1
            return
        frames = protocol.client_reply(Dialect.GDP, ticket.request_id, b"", status, body, True)
        assert frames is not None  # a final reply always has frames
        self.counters["handed_over"] += 1
        charged = message.peer
        if live is not None:
            message.out.append(Respond(live.client, frames))
            charged = live.client
            del self._by_request[key]
            self._withdraw(live, message)
        elif self._kept.get(key, now) is not None:
            return  # answered already: the first answer stands
        self._kept.keep(key, frames, now, connection(charged.link, charged.address), ticket.digest)

    def _on_handover(self, event: WorkerHandover, message: _Message) -> None:
        worker = self._workers.get(message.peer)
        if worker is None:
            message.out.append(_dismiss(message.peer, event.dialect))
            return
        worker.expires = message.now + self.settings.expiry
        ticket = self._foreign(event.task_id)
        credential = message.credential
        if ticket is not None and (credential is None or credential.may_serve(ticket.service)):
            self._hand_over(ticket, event.status, event.body, message)
        else:
            self.counters["duplicates_dropped"] += 1
        self._taken(worker, event.task_id)

    def _on_large_handover(self, event: WorkerHandover, message: _Message) -> None:
        self.counters["too_large"] += 1
        self._warn("too large", message.peer, message.now, "dropped a handed-over result larger than max_message")
        if (worker := self._workers.get(message.peer)) is not None:
            self._taken(worker, event.task_id)  # nothing more will come of it

    def _worker_heartbeat(self, worker: Worker) -> list[bytes]:
        """A HEARTBEAT for ``worker``: a GDP worker of a hand-over broker learns which results were taken."""
        if self._tickets is None or worker.dialect is not Dialect.GDP:
            return protocol.worker_command(worker.dialect, protocol.HEARTBEAT)
        taken, worker.taken = worker.taken, []
        return protocol.worker_heartbeat(self._instance, taken)

    def _taken(self, worker: Worker, task_id: bytes) -> None:
        """Tell the worker, in its next heartbeat, that the result of ``task_id`` was taken (GDP workers)."""
        if worker.dialect is Dialect.GDP:
            taken = worker.taken
            if len(taken) >= protocol.MAX_TAKEN:
                del taken[0]  # (the worker holds at most as many results: it dropped that one already)
            taken.append(nonce(task_id))

    # ------------------------------------------------------------------------------------------- state changes

    def _adopt(self, service: Service, where: Connection) -> str | None:
        """Charge a service the core sees for the first time to the connection whose message made it, and apply
        the flow limits configured for its name; or say why it does not fit the ledger (counted), and forget it."""
        if service in self._adopted:
            return None
        charge = OVERHEAD[Kind.SERVICE] + len(service.name.encode())
        refusal = self._ledger_refusal(where, Kind.SERVICE, charge)
        if refusal is not None:
            forget = getattr(self.resolver, "forget", None)
            if forget is not None and not service.workers and not service.pending:
                forget(service)  # it was made for this message alone
            return refusal
        self.ledger.charge(where, Kind.SERVICE, charge)
        self._adopted[service] = (where, charge)
        limits = self.flows.get(service.name)
        if limits is not None:
            service.apply_flow(limits)
        return None

    def _wait(self, worker: Worker, turn: _Turn) -> None:
        """Queue a worker that has just become WAITING, and dispatch."""
        worker.service.wait(worker)
        self._dispatch(worker.service, turn)

    def _dispatch(self, service: Service, turn: _Turn) -> None:
        """Send the service's queued tasks to its waiting workers, as far as its flow limits (and its tenants')
        allow, and, after a restart, not before the recovery window ends."""
        if not service.pending:  # (most answers free a worker of a service with nothing queued: no pair to make)
            return
        now = turn.now
        if self._hold_until is not None:
            if self._recovering(now):
                if service.pending and service.waiting:
                    self._throttled[service] = self._hold_until
                return
            self._hold_until = None
        flow = service.flow
        held = service.release_due(now)
        while True:
            if not flow.admits(now):
                if service.pending and service.waiting:
                    when = flow.next_token(now)  # None when the concurrency cap holds it: a completion frees it
                    if when is not None:
                        self._throttled[service] = when
                return
            pair = service.next_pair()
            if pair is None:
                if held is not None and service.waiting:  # tenants held by their rate: back when it allows
                    when = self._throttled.get(service)
                    self._throttled[service] = held if when is None else min(when, held)
                return
            worker, task = pair
            if worker.expires <= now:  # silent too long, and its heartbeat's turn has not come yet
                service.push(task, front=True)
                self._expire(worker, now)
                continue
            deadline = task.deadline
            if deadline is not None and deadline <= now:  # (a tick answers it at its deadline; this one was due)
                service.put_back(worker)
                self.counters["past_deadline"] += 1
                self._complete(task, protocol.EXPIRED, [_PAST_DEADLINE], turn, dequeued=True)
                continue
            if flow.bytes_in_flight is not None and not flow.fits(task.size):
                service.put_back(worker, task)  # the bytes in flight hold it: a completion frees them
                return
            worker.state = _W_DISPATCH[worker.state]
            task.state = _T_DISPATCH[task.state]
            worker.task = task
            task.worker = worker
            task.dispatched = now
            task.attempts += 1
            flow.dispatched(now, task.size)
            service.started(task, now)
            fields = (
                b"" if deadline is None or "fields" not in worker.features else protocol.deadline_field(deadline - now)
            )
            frames = protocol.worker_request(worker.dialect, task.id, task.description, task.body, fields)
            turn.out.append(Dispatch(worker.peer, frames))
            if self._trace:
                log.debug(
                    "dispatched task %s of %r to worker %s (attempt %d, queued %.3f s)",
                    task.id.hex(), service.name, worker.label, task.attempts, now - task.enqueued,
                )  # fmt: skip

    def _complete(
        self, task: Task, status: bytes, body: Sequence[bytes], turn: _Turn, *, dequeued: bool = False,
        dispatch: bool = True,
    ) -> None:  # fmt: skip
        """Answer ``task``'s client, keep the answer and forget the task (``dequeued``: already off its queue); then
        dispatch into the place in flight it freed, unless the caller will (``dispatch=False``)."""
        now = turn.now
        state = task.state
        self._remove(task, state, dequeued=dequeued)
        self.counters["completed"] += 1
        waited = (task.dispatched if task.dispatched is not None else now) - task.enqueued
        served = now - task.dispatched if task.dispatched is not None else 0.0
        stats = task.service.stats
        if status == protocol.UNAVAILABLE:
            stats.failed += 1
            self.counters["failed"] += 1
        elif status == protocol.EXPIRED:
            stats.expired += 1
            self.counters["expired"] += 1
        else:
            stats.record(waited, served, now)
            if state in IN_FLIGHT and task.service.flow.adaptive is not None:
                task.service.flow.answered(now, served)  # a cap that grew is used by the dispatch below
        self._reply(task, status, body, protocol.timing(waited, served), turn)
        if dispatch and state in IN_FLIGHT:
            self._dispatch(task.service, turn)  # a place in flight came free

    def _reply(self, task: Task, status: bytes, body: Sequence[bytes], meta: bytes, turn: _Turn) -> None:
        """Send ``task``'s client its final answer and keep it for the client's re-asks."""
        frames = protocol.client_reply(task.dialect, task.request_id, task.description, status, body, True, meta)
        if frames is not None:
            turn.out.append(Respond(task.client, frames))
            if task.key is not None and not is_displaced(task.key) and self._kept.seconds > 0:
                where = connection(task.client.link, task.client.address)  # kept for this request only:
                self._kept.keep(task.key, frames, turn.now, where, _digest(task))  # another with its id is not it

    def _remove(self, task: Task, state: TaskState, *, dequeued: bool = False) -> None:
        """Forget ``task``, which was in ``state``: off its queue and out of flight, its bytes released."""
        task.state = _T_FINISH[state]
        del self._tasks[task.id]
        if task.deadline is not None:
            self._deadlines.forget()
        if task.key is not None and self._by_request.get(task.key) is task:
            del self._by_request[task.key]
        service = task.service
        if state is TaskState.QUEUED and not dequeued:
            service.drop(task)
        elif state in IN_FLIGHT:
            service.flow.finished(task.size)
            service.stopped(task)
        task.worker = None
        charge = task.charge
        client = task.client
        self.ledger.release(connection(client.link, client.address), Kind.TASK, charge)
        self._held_total -= charge
        held = self._held[service] - charge
        if held:
            self._held[service] = held
        else:
            del self._held[service]

    def _forget(self, worker: Worker, turn: _Turn) -> None:
        """Drop ``worker``; reissue or fail the task it held."""
        self._unregister(worker, turn.now)
        self._release(worker, turn)

    def _unregister(self, worker: Worker, now: float) -> None:
        self._served.seen(worker.service.name, now)
        peer = worker.peer
        del self._workers[peer]
        self._beats.remove(worker)
        host = worker.host or "unknown"
        if self._hosts[host] > 1:
            self._hosts[host] -= 1
        else:
            del self._hosts[host]
        self.ledger.release(connection(peer.link, peer.address), Kind.WORKER, worker.charge)
        if worker.rests is not None:
            worker.rests = None
            self._resting.forget()
        worker.service.leave(worker)
        worker.state = _W_LEAVE[worker.state]

    def _wake(self, turn: _Turn) -> None:
        """Let the workers whose rest (a 429's retry_after) is over wait for tasks again."""
        for worker in self._resting.due(turn.now):
            worker.rests = None
            self._resting.forget()
            self._wait(worker, turn)

    def _expire(self, worker: Worker, now: float) -> None:
        """Unregister ``worker``, silent past its expiry (the caller releases its task)."""
        log.info("worker %s (%r) expired", worker.label, worker.description[:64])
        self.counters["workers_expired"] += 1
        self._unregister(worker, now)

    def _release(self, worker: Worker, turn: _Turn) -> None:
        """Reissue, fail or (if cancelled) drop the task an unregistered ``worker`` held."""
        task, worker.task = worker.task, None
        if task is None:
            self._drop_claim(worker)  # nothing to reissue: the request has not arrived here
            return
        if task.state is TaskState.CANCELLED:
            self._remove(task, task.state)
        elif task.attempts >= self.settings.max_attempts:
            reason = f"task lost with its worker {task.attempts} times; giving up"
            self._complete(task, protocol.UNAVAILABLE, [reason.encode()], turn)
            return
        else:
            task.worker = None
            task.state = _T_REISSUE[task.state]
            task.service.flow.finished(task.size)
            task.service.stopped(task)
            self.counters["reissued"] += 1
            task.service.stats.reissued += 1
            task.service.push(task, front=True)
        self._dispatch(task.service, turn)

    # ------------------------------------------------------------------------------------------- periodic work

    def _heartbeat(self, turn: _Turn) -> None:
        """Heartbeat the workers whose turn has come, at most :data:`BEATS_PER_TICK`, and expire those silent
        past their expiry: each worker's turn comes once per heartbeat interval."""
        now, out = turn.now, turn.out
        beats, interval = self._beats, self.settings.heartbeat_interval
        expired = []
        for _ in range(BEATS_PER_TICK):
            if not beats or beats[0].beat > now:
                break
            worker = beats.popleft()
            if worker.expires <= now:
                expired.append(worker)
                continue
            worker.beat = now + interval
            beats.append(worker)
            out.append(Beat(worker.peer, self._worker_heartbeat(worker)))
        for worker in expired:  # unregister them all first, so no reissued task goes to one of them
            self._expire(worker, now)
        for worker in expired:
            self._release(worker, turn)

    def _sweep(self, turn: _Turn) -> None:
        settings, now = self.settings, turn.now
        if not self._graced and not self._in_grace(now):
            self._end_grace(turn)
        timeout, anonymous = settings.queue_timeout, settings.anonymous_queue_timeout
        if timeout is not None:
            self._expire_queued(now - timeout, turn)
        if anonymous is not None and (timeout is None or anonymous < timeout):
            self._expire_queued(now - anonymous, turn, anonymous=True)
        self._drop_silent_clients(now - settings.client_silence)
        self._kept.expire(now)
        self._forget_idle_services(now)
        self._warnings.flush(now)
        self._barrier.flush(now)
        busy = (
            self._tasks or self._heard or len(self._kept) or self._adopted or self._flow_charges or self._warnings
        )  # fmt: skip
        self._next_sweep = now + settings.heartbeat_interval if busy else None

    def _expire_deadlines(self, turn: _Turn) -> None:
        """Answer 504 to the live tasks whose deadline has passed: a queued one leaves its queue; a running one
        is answered now and its worker told (its result will be dropped, as for a cancel)."""
        now = turn.now
        for task in self._deadlines.due(now):
            if task.state is TaskState.CANCELLED:
                continue  # nobody waits for it already
            self.counters["past_deadline"] += 1
            if task.state is TaskState.QUEUED:
                self._complete(task, protocol.EXPIRED, [_PAST_DEADLINE], turn)
                continue
            worker = task.worker
            task.service.stats.expired += 1
            self.counters["completed"] += 1
            self.counters["expired"] += 1
            served = now - task.dispatched if task.dispatched is not None else 0.0
            waited = now - task.enqueued - served
            self._reply(task, protocol.EXPIRED, [_RAN_PAST_DEADLINE], protocol.timing(waited, served), turn)
            if task.key is not None and self._by_request.get(task.key) is task:
                del self._by_request[task.key]  # a re-ask gets the kept 504
            task.state = _T_CANCEL[task.state]
            if worker is not None:
                worker.state = _W_CANCEL[worker.state]
                self._tell_cancel(worker, task, turn)

    def _expire_queued(self, enqueued_before: float, turn: _Turn, *, anonymous: bool = False) -> None:
        """Answer 504 to queued requests that have waited since before ``enqueued_before`` (``anonymous``: only
        those without a request id)."""
        stale: dict[Service, set[Task]] = {}
        for task in self._tasks.values():  # oldest first
            if task.enqueued >= enqueued_before:
                break
            if task.state is TaskState.QUEUED and not (anonymous and task.key is not None):
                stale.setdefault(task.service, set()).add(task)
        for service, tasks in stale.items():
            service.discard(tasks)
            for task in tasks:
                reason = b"no worker took the request in time"
                self._complete(task, protocol.EXPIRED, [reason], turn, dequeued=True)

    def _drop_silent_clients(self, heard_before: float) -> None:
        """Drop the queued tasks of generaldomo clients last heard before ``heard_before``."""
        silent = set()
        heard = self._heard
        while heard:
            peer, when = next(iter(heard.items()))  # the one heard least recently
            if when >= heard_before:
                break
            silent.add(peer)
            self._unlisten(peer)
        if not silent:
            return
        doomed: dict[Service, set[Task]] = {}
        for task in self._tasks.values():
            if task.state is TaskState.QUEUED and task.key is not None and task.client in silent and not task.detached:
                doomed.setdefault(task.service, set()).add(task)
        for service, tasks in doomed.items():
            service.discard(tasks)
            for task in tasks:
                self._remove(task, task.state, dequeued=True)
            self.counters["client_gone_dropped"] += len(tasks)
            log.info("dropped %d queued requests for %r of clients gone silent", len(tasks), service.name)

    def _forget_idle_services(self, now: float) -> None:
        """Forget services that have had no workers and no tasks for ``service_idle``, and the flow limits peers
        set for names no busy service had as long. A service idle as long that is kept (the operator set flow
        limits for its name, or the resolver forgets nothing) is charged to nobody from then on: it is no longer
        held on the behalf of the peer whose message made it (the next one that uses it is charged for it)."""
        idle_for = self.settings.service_idle
        if idle_for is None:
            return
        forget = getattr(self.resolver, "forget", None)
        flows, charged = self.flows, self._flow_charges
        busy: set[str] = set()
        for service in list(self.resolver.services()) if forget is not None or charged or self._adopted else ():
            name = service.name
            if service.workers or service.pending or service in self._held:
                busy.add(name)
                self._idle_since.pop(service, None)
                continue
            kept = forget is None or (name in flows and name not in charged)
            if kept and service not in self._adopted:
                continue  # kept, and charged to nobody already
            since = self._idle_since.setdefault(service, now)
            if now - since >= idle_for:
                del self._idle_since[service]
                where, charge = self._adopted.pop(service, (None, 0))
                if where is not None:
                    self.ledger.release(where, Kind.SERVICE, charge)
                if forget is not None and not kept:
                    forget(service)
                    self._throttled.pop(service, None)
                    self.counters["services_forgotten"] += 1
        for name in list(charged):
            if name in busy:
                self._flow_idle_since.pop(name, None)
                continue
            since = self._flow_idle_since.setdefault(name, now)
            if now - since >= idle_for:
                where, charge = charged.pop(name)
                self.ledger.release(where, Kind.FLOW, charge)
                del flows[name], self._flow_idle_since[name]
                self._changed.pop(name, None)
                self._changed[name] = mmi.FlowChange(name, _UNSET)  # so that the state directory forgets it too
                self.counters["flows_forgotten"] += 1

    # ------------------------------------------------------------------------------------------- logs

    def _tenant_name(self, tenant: object) -> str:
        """A tenant's name in reports: its key or given name, or its connection's label."""
        return tenant if isinstance(tenant, str) else f"conn/{self._label(tenant)}" if isinstance(tenant, Peer) else "?"

    def _label(self, peer: Peer) -> str:
        """An opaque name for ``peer`` in reports and logs (see :mod:`generaldomo.sansio.labels`)."""
        return self.labels(peer.link, peer.address)

    def _connection_label(self, where: Connection) -> str:
        """An opaque name for a connection: its link and a keyed hash of its first hop (as its peers' labels
        for a direct peer)."""
        return self._label(Peer(*where))

    def _warn(
        self, kind: str, peer: Peer, now: float, message: str, *args: object, level: int = logging.WARNING,
        key: Hashable = None,
    ) -> None:  # fmt: skip
        """Log about ``peer``, rate-limited per kind and connection (the hops of an envelope after the first are
        the peer's to make up), or per ``key`` if given: a refused worker's CURVE key or description, which stay
        the same when it comes back on a new connection."""
        where = connection(peer.link, peer.address)
        window = where if key is None else key
        self._warnings.warn(kind, window, lambda: self._connection_label(where), now, message, *args, level=level)


def _dismiss(peer: Peer, dialect: Dialect) -> Dismiss:
    """A DISCONNECT for the worker at ``peer``, in its ``dialect``."""
    return Dismiss(peer, protocol.worker_command(dialect, protocol.DISCONNECT))


def _digest(task: Task) -> bytes:
    return request_digest(task.description, task.body)


def _name(service: Service) -> str:
    return service.name


def _busy(service: Service) -> tuple[int, str]:
    """Sort key of the busiest services first: most workers, queued tasks and tasks in flight, then by name."""
    return (-(len(service.workers) + len(service.pending) + service.flow.in_flight), service.name)


def _awake(worker: Worker) -> bool:
    return worker.rests is None


def _finished(task: Task) -> bool:
    return task.state is TaskState.DONE


_PAST_DEADLINE = b"the request's deadline passed before a worker took it"
_RAN_PAST_DEADLINE = b"the request's deadline passed while a worker ran it"

"""The broker core: a sans-IO state machine that pairs client requests with workers.

Rules of this file:

- Everything that decides what the broker does lives here and in the parts it owns: the core receives, ticks, accepts,
  dispatches and completes; each part owns its state and is called by the core, and reaches the core only through the
  few operations its module's ``Core`` protocol names; parts call each other's methods, never reach into each other's
  attributes. The parts: :mod:`~generaldomo.sansio.broker.core.requests` (a client's messages, up to acceptance),
  :mod:`~generaldomo.sansio.broker.core.registration` (workers coming and going),
  :mod:`~generaldomo.sansio.broker.core.results` (what workers answer), :mod:`~generaldomo.sansio.broker.core.workers`
  (the table of workers), :mod:`~generaldomo.sansio.broker.core.clients` (clients listened to, resends, paced requests),
  :mod:`~generaldomo.sansio.broker.core.budgets` (queue budgets, services and flow entries charged),
  :mod:`~generaldomo.sansio.broker.core.handover` (tickets, claims, recovery),
  :mod:`~generaldomo.sansio.broker.core.dead` (the tasks that failed for good, their replays),
  :mod:`~generaldomo.sansio.broker.core.expiry` (deadlines and queue timeouts),
  :mod:`~generaldomo.sansio.broker.core.retries` (answers tried again after a backoff, held as delayed tasks),
  :mod:`~generaldomo.sansio.broker.core.delays` (tasks held until their ``not_before``),
  :mod:`~generaldomo.sansio.broker.core.spans` (traced answers, for the IO layer's broker spans) and
  :mod:`~generaldomo.sansio.broker.core.reporting` (the status report and log lines); their counts go to one record
  (:mod:`~generaldomo.sansio.broker.core.counters`).
- Every task is accepted through one path (``_accept``), a resumed worker's claimed one too.
- Things leave by five verbs, one meaning each: a worker *leaves* (out of the tables; ``_leave``), and the task
  it held is *reissued* (back to the front of its queue, failed after ``max_attempts``, or finished if cancelled;
  ``_reissue``); a task is *cancelled* when nobody waits for it (a queued one finishes, a running one's result
  will be dropped; ``_cancel``) and *finished* when it leaves the tables, its bytes released (``_finish``); idle
  services and flow entries are *forgotten* (``Budgets.forget_idle``).
- It reads no socket, no clock and no random source of its own. It is fed ``(peer, frames, now, credential)``
  by :meth:`BrokerCore.receive` and clock ticks by :meth:`BrokerCore.tick`, and returns the messages to send,
  in order, as typed actions (:mod:`generaldomo.sansio.broker.actions`: ``Dispatch``, ``Respond``, ``Forward``,
  ``Beat``, ``Cancel``, ``Dismiss``, each a ``Send(peer, frames)``, which is all the IO layer reads of them);
  task ids come from the ``random`` callable it is given.
- Each kind of event (:mod:`generaldomo.sansio.wire.events`) has one handler, typed for it, in one table keyed by the
  event's class (another for those over ``max_message``). A handler gets the event and the message's turn
  (:class:`~generaldomo.sansio.broker.core.turns.Message`: sender, time, credential, and the actions so far); the
  helpers it calls get that turn, or a tick's (:class:`~generaldomo.sansio.broker.core.turns.Turn`), rather than each
  one by one.
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

import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Final

from generaldomo.sansio.barrier import Barrier
from generaldomo.sansio.broker import mmi
from generaldomo.sansio.broker.access import NEEDS, Credential
from generaldomo.sansio.broker.accounts.dead import DeadLetters
from generaldomo.sansio.broker.accounts.kept import KeptAnswers
from generaldomo.sansio.broker.accounts.ledger import CHARGED, ConnectionId, Holding, Ledger, connection
from generaldomo.sansio.broker.actions import Beat, Cancel, Dispatch, Respond, Send
from generaldomo.sansio.broker.core import budgets, clients, dead, durable, expiry, handover, reporting, workers
from generaldomo.sansio.broker.core.budgets import Budgets
from generaldomo.sansio.broker.core.clients import Clients
from generaldomo.sansio.broker.core.counters import Counters
from generaldomo.sansio.broker.core.dead import Dead
from generaldomo.sansio.broker.core.delays import Delays
from generaldomo.sansio.broker.core.durable import Durable
from generaldomo.sansio.broker.core.expiry import Expiry
from generaldomo.sansio.broker.core.handover import Handover
from generaldomo.sansio.broker.core.management import Management
from generaldomo.sansio.broker.core.registration import Registration
from generaldomo.sansio.broker.core.reporting import Reporting
from generaldomo.sansio.broker.core.requests import MMI_PREFIX, Requests
from generaldomo.sansio.broker.core.results import Results
from generaldomo.sansio.broker.core.retries import Retries
from generaldomo.sansio.broker.core.spans import Spans
from generaldomo.sansio.broker.core.turns import Message, Table, Turn, dismiss, frames_size, log, on
from generaldomo.sansio.broker.core.workers import Workers
from generaldomo.sansio.broker.flow.flow import Flow, FlowLimits
from generaldomo.sansio.broker.journal import JournalRecord, Live
from generaldomo.sansio.broker.records import Claim, Peer, RequestKey, Task, WorkerRecord, is_displaced, peer_at
from generaldomo.sansio.broker.report import PAGE_BYTES, JournalReport, PairReport, StatusQuery, StatusReport
from generaldomo.sansio.broker.served import ServedRecently
from generaldomo.sansio.broker.services.resolver import NameResolver, Resolver
from generaldomo.sansio.broker.services.service import Service
from generaldomo.sansio.broker.states import IN_FLIGHT, TASK, WORKER, Step, TaskState
from generaldomo.sansio.config.settings import Settings
from generaldomo.sansio.labels import PeerLabels
from generaldomo.sansio.wire import protocol
from generaldomo.sansio.wire.events import (
    ClientCancel,
    ClientHeartbeat,
    ClientRequest,
    Event,
    Frame,
    Malformed,
    WorkerDisconnect,
    WorkerHandover,
    WorkerHeartbeat,
    WorkerReady,
    WorkerReply,
    WorkerResume,
)
from generaldomo.sansio.wire.ticket import request_digest

__all__ = ["MMI_PREFIX", "BrokerCore", "Peer", "Send", "Settings", "Task", "WorkerRecord"]

TASK_ID_BYTES: Final = 16
_ALL = StatusQuery()
_UNSET = FlowLimits()
# The rows of the life-cycle tables the core uses, looked up once: a move is one dict lookup, and one the table
# lacks raises IllegalTransition (machine, state, step). (Final: statics of the compiled core, not dictionary lookups.)
_W_DISPATCH: Final = WORKER.row(Step.DISPATCH)
_W_RESULT: Final = WORKER.row(Step.RESULT)
_W_CANCEL: Final = WORKER.row(Step.CANCEL)
_W_LEAVE: Final = WORKER.row(Step.LEAVE)
_T_DISPATCH: Final = TASK.row(Step.DISPATCH)
_T_REISSUE: Final = TASK.row(Step.REISSUE)
_T_CANCEL: Final = TASK.row(Step.CANCEL)
_T_FINISH: Final = TASK.row(Step.FINISH)


# The parts of the core, each owning its state (see the module docstring), by attribute, and what each holds.
PARTS: dict[str, dict[str, str]] = {
    "_budgets": budgets.HOLDINGS, "_clients": clients.HOLDINGS, "_dead": dead.HOLDINGS, "_delays": {},
    "_durable": durable.HOLDINGS,
    "_expiry": expiry.HOLDINGS, "_handover": handover.HOLDINGS, "_management": {}, "_registration": {},
    "_reporting": reporting.HOLDINGS, "_requests": {}, "_results": {}, "_retries": {}, "_workers": workers.HOLDINGS,
}  # fmt: skip
# What may grow on a peer's behalf, and what charges or bounds it: every attribute of the core that is a
# container or one of its parts, of each of its parts (``_part.NAME``, declared in the part's module; what a part
# shares with the core is the core's) and of a service (``service.NAME``).
# tests/sansio/broker/accounts/test_holdings.py enumerates them and fails for one that is not declared (or
# declared and gone): a new structure is threaded through the ledger, or says what else bounds it, when it is added.
HOLDINGS: dict[str, str] = {
    "_barrier": "bounded: a count per kind of error and a rate-limited log",
    "_by_request": CHARGED + "tasks",
    "_changed": "flow entries (charged as flows, or the operator's), until the IO layer takes them",
    "_handlers": "fixed: one per kind of event",
    "spans": "a turn's traced answers while broker spans are on, until the IO layer takes them after the turn",
    "_kept": CHARGED + "kept answers, within keep_bytes",
    "_large": "fixed: one per kind of event",
    "_served": "bounded: served.MAX_NAMES names",
    "_tasks": CHARGED + "tasks",
    "_throttled": CHARGED + "services",
    "counters": "fixed: names the code gives (a refusal's per kind of holding), and the IO layer's",
    "flows": CHARGED + "flows (with their tenants' limits), or the operator's",
    "ledger": "the ledger: an account only while its connection holds something",
    "resolver": CHARGED + "services",
    "settings": "fixed: the operator's",
    "service.delayed": CHARGED + "tasks (stale entries compacted)",
    "service.flow": CHARGED + "services (its limits: flows)",
    "service.pending": CHARGED + "tasks, and fair.KEEP_IDLE idle tenants as services",
    "service.stats": CHARGED + "services",
    "service.waiting": CHARGED + "workers",
    "service.workers": CHARGED + "workers",
    **{part: "a part of the core: what it holds is declared in its module" for part in PARTS},
    **{f"{part}.{name}": what for part, held in PARTS.items() for name, what in held.items()},
}


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
        started: float | None = None,  # (0.0; a float default before `random` trips mypyc's signature)
        *,
        random: Callable[[int], bytes],
        handover_key: bytes | None = None,
        recovering: bool = False,
        journal: float | None = None,
    ) -> None:
        """``handover_key`` (the state directory's) turns hand-over on: tasks of generaldomo clients get tickets
        for ids, and results of tasks earlier instances dispatched are taken over; ``recovering`` (a broker
        started again on a state directory) holds dispatch back for the first ``recovery_window`` seconds;
        ``journal`` (the wall clock minus ``now``'s clock) turns the journal on (:meth:`take_journal`)."""
        self.resolver: Resolver = resolver if resolver is not None else NameResolver()
        self.settings = settings or Settings()
        self.counters = Counters()
        self.started = 0.0 if started is None else started
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
                Holding.TASK: settings.connection_requests,
                Holding.WORKER: settings.connection_workers,
                Holding.SERVICE: settings.connection_services,
                Holding.FLOW: settings.connection_services,
            },
        )
        self._tasks: dict[bytes, Task] = {}  # in order of acceptance
        self._by_request: dict[RequestKey, Task] = {}
        self._kept = KeptAnswers(settings.keep_answers, settings.keep_bytes, self.ledger)
        self._durable = Durable(journal, self._kept, self.counters)
        self._journal = journal is not None
        self._served = ServedRecently(settings.served_memory)
        self._throttled: dict[Service, float] = {}  # services held back by their rate limit -> when to retry
        # the parts (each owns its state; see the module docstring)
        self._workers = Workers(self.ledger)
        self._expiry = Expiry(self, self.counters)
        self._delays = Delays(self, self.counters)
        self._retries = Retries(self, self.counters, self._delays, random)
        self._clients = Clients(self.ledger, self.counters)
        self._budgets = Budgets(settings, self.ledger, self.counters)
        self._dead = Dead(self, settings, self.counters, self.ledger, random)
        self.spans = Spans()  # traced answers for the IO layer's broker spans, once it turns them on
        hold_until = self.started + settings.recovery_window if recovering else None
        self._handover = Handover(handover_key, instance, hold_until)
        self._reporting = Reporting(
            log, self.labels, settings, self.counters, self.ledger, self._kept, self._workers, self._budgets,
            lambda: self.resolver.services(), self._dead.letters,
        )  # fmt: skip
        self._management = Management(self, self.counters, self._clients, self._reporting)
        self._requests = Requests(
            self, settings, self.counters, self._kept, self._served, self._clients, self._budgets, self._handover,
            self._reporting, self._management,
        )  # fmt: skip
        self._registration = Registration(
            self, settings, self.counters, self._served, self._workers, self._budgets, self._handover,
            self._reporting,
        )  # fmt: skip
        self._results = Results(
            self, settings, self.counters, self._kept, self._workers, self._registration, self._handover,
            self._reporting, self._retries, self._dead,
        )  # fmt: skip
        self._barrier = Barrier(log, "the broker core")
        self._trace = log.isEnabledFor(logging.DEBUG)  # a line per dispatch (-vv), decided once: free when off
        self._next_sweep: float | None = None
        self._stopping = False  # new requests are answered 503 (see stop_accepting)
        self._handlers, self._large = _tables(self._requests, self._registration, self._results)

    # ------------------------------------------------------------------------------------------- public

    @property
    def workers(self) -> dict[Peer, WorkerRecord]:
        """Registered workers by peer (read only)."""
        return self._workers.by_peer

    @property
    def tasks(self) -> dict[bytes, Task]:
        """Live tasks (queued, running or cancelled while running) by task id (read only)."""
        return self._tasks

    @property
    def dead_letters(self) -> DeadLetters:
        """The services' dead letters (read only; ``mmi.dead`` replays and drops them)."""
        return self._dead.letters

    @property
    def instance(self) -> bytes:
        """The id of this broker instance, told to clients so they notice a restart."""
        return self._instance

    def receive(
        self, peer: Peer, frames: Sequence[Frame], now: float, credential: Credential | None = None
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
        message = Message(peer, now, credential)
        out = message.out
        try:
            event = protocol.parse(frames)
            kind = type(event)
            if credential is None or self._permits(event, message, credential):
                limit = self.settings.max_message
                if limit is not None and kind in self._large and frames_size(frames) > limit:
                    self._large[kind](event, message)
                else:
                    self._handlers[kind](event, message)
        except Exception:
            self._caught("a message", now)
        if self._next_sweep is None:
            self._next_sweep = now + self.settings.heartbeat_interval
        return out

    def deadline(self) -> float | None:
        """The time at which :meth:`tick` next has work to do, or None if it has none."""
        soonest = self._next_sweep
        throttled = min(self._throttled.values()) if self._throttled else None
        for due in (self._workers.next_due(), self._expiry.soonest(), throttled, self._clients.due()):
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
        turn = Turn(now)
        if self._workers.beat_due(now):
            self._heartbeat(turn)
        if self._next_sweep is not None and now >= self._next_sweep:
            try:
                self._sweep(turn)
            except Exception:  # the next sweep comes an interval later, as after one that succeeded
                self._next_sweep = now + self.settings.heartbeat_interval
                self._caught("the periodic sweep", now)
        if len(self._expiry):
            try:
                self._expiry.expire_deadlines(turn)
            except Exception:
                self._caught("the deadlines", now)
        if self._workers.resting():
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
        paced = self._clients.due()
        if paced is not None and now >= paced:
            self._management.answer_waiting(turn)
        return turn.out

    def set_flow(self, name: str, now: float, **limits: object) -> list[Send]:
        """Set the flow limits of the services named ``name`` to ``limits``, those not given lifted; return what
        to send. ValueError on an unknown or bad limit.

        Args:
            name: the service name.
            now: the time.
            limits: by keyword, the fields of :class:`~generaldomo.sansio.broker.flow.flow.FlowLimits` (the
                limits declared in :data:`generaldomo.sansio.broker.flow.flow.LIMITS`), in the forms it and
                ``mmi.flow`` take: numbers, ranges as ``{"min": 1, "max": 64}`` (or an ``AdaptiveLimits``, a
                ``BackoffLimits``), ``tenants`` as tenant name -> a ``TenantLimits`` or ``{"weight": 3,
                "concurrency": 8}``.

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

    def apply_flow(self, change: mmi.FlowChange, now: float, where: ConnectionId | None = None) -> list[Send]:
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
        self._budgets.charge_flow(name, change.limits, where, name in self.flows)
        if change.limits.unset:
            self.flows.pop(name, None)  # back to no limits: nothing to remember
        else:
            self.flows[name] = change.limits
        self._changed.pop(name, None)
        self._changed[name] = change
        self._durable.flowed(change)
        turn = Turn(now)
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

    def take_journal(self) -> list[JournalRecord]:
        """The journal's records made since the last call (:mod:`generaldomo.sansio.broker.core.durable`; none
        when the journal is off): the IO layer writes them before it sends what the same turns returned."""
        return self._durable.take() if len(self._durable) else []

    def restore(self, live: Live, now: float) -> list[Send]:
        """Apply again the flow limits, keep again the answers and queue again the requests a journal left standing
        (``live``), before the first message; return what to send.

        Args:
            live: what the journal's records leave standing (:class:`~generaldomo.sansio.broker.journal.Live`).
            now: the time, on the clock the core is fed.
        """
        return self._durable.restore(live, now, self._requests.on_request, self.apply_flow)

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
        self._reporting.set_endpoints(endpoints)

    def recover(self, now: float) -> None:
        """Begin a recovery window at ``now``, as after a restart (hand-over on): a broker of a pair taking over."""
        self._handover.hold(now + self.settings.recovery_window)

    def set_pair(self, report: Callable[[float], PairReport]) -> None:
        """Report this broker's place in a broker pair (``report(now)``) in the status report."""
        self._reporting.pair = report

    def set_journal(self, report: Callable[[], JournalReport]) -> None:
        """Report the state directory's write-ahead log (``report()``) in the status report."""
        self._reporting.journal = report

    def count(self, name: str, n: int = 1) -> None:
        """Count ``n`` events the IO layer saw (e.g. ``connections_refused``) in the status report.

        Args:
            name: the counter's name.
            n: how many.
        """
        self.counters.add(name, n)

    def _take_dead(self, change: mmi.DeadChange, event: ClientRequest, message: Message) -> tuple[bytes, list[bytes]]:
        """Replay or drop a dead letter as ``mmi.dead`` asks (see :mod:`~generaldomo.sansio.broker.core.dead`)."""
        return self._dead.take(change, event, message, self._requests.on_request)

    def _caught(self, handling: str, now: float) -> None:
        """Count and log the unexpected error being handled (see :meth:`receive`)."""
        self.counters.internal_errors += 1
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
        return self._reporting.report(now, query, page_bytes, instance=self._instance, started=self.started)

    def holdings(self) -> Iterator[tuple[ConnectionId, Holding, int]]:
        """Every holding the core keeps on peers' behalf, as ``(connection, kind, bytes)``, recomputed from its
        state: what its ledger must add up to, less what the IO layer charges (an audit, for the tests)."""
        for task in self._tasks.values():
            yield connection(task.client.link, task.client.address), Holding.TASK, task.charge
        for worker in self._workers.by_peer.values():
            yield connection(worker.peer.link, worker.peer.address), Holding.WORKER, worker.charge
        yield from self._budgets.holdings()
        yield from self._clients.holdings()
        for where, size in self._kept.holdings():
            yield where, Holding.KEPT, size
        for where, size in self._dead.letters.holdings():
            yield where, Holding.DEAD, size

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
        turn = Turn(now)
        reason = b"the broker stopped before the request was answered"
        for task in list(self._tasks.values()):
            if task.state is TaskState.CANCELLED:
                self._finish(task, task.state)
                continue
            if task.worker is not None:
                task.worker.task = None
            self.counters.abandoned += 1
            self._complete(task, protocol.UNAVAILABLE, [reason], turn, dispatch=False)
        return turn.out

    def close(self) -> list[Send]:
        """Tell every worker the broker is going away; return what to send."""
        return [dismiss(w.peer, w.dialect) for w in self._workers.clear()]

    # ------------------------------------------------------------------------------------------- roles

    def _permits(self, event: Event, message: Message, credential: Credential) -> bool:
        """True when ``credential`` (the message's) allows ``event``; else refuse it (403 or DISCONNECT), counted
        and logged."""
        needs = NEEDS.get(type(event))
        if needs is None or credential.may(needs):
            return True
        self.counters.forbidden += 1
        self._reporting.warn(
            "forbidden", message.peer, message.now, "refused a %s from a key without the %s role",
            type(event).__name__, needs, key=credential.key,
        )  # fmt: skip
        if isinstance(event, ClientRequest):
            self._requests.reject(event, message, protocol.FORBIDDEN, f"this key lacks the {needs} role")
        elif isinstance(event, WorkerReady | WorkerReply | WorkerHeartbeat):
            message.out.append(dismiss(message.peer, event.dialect))
        return False

    # ------------------------------------------------------------------------------------------- tasks

    def _accept(
        self, event: ClientRequest, message: Message, service: Service, key: RequestKey | None,
        cost: tuple[int, int], resumed: tuple[WorkerRecord, Claim] | None,
    ) -> None:  # fmt: skip
        """Make ``event`` a task of ``service`` (the one path of every request accepted), its ``cost`` = (size,
        charge) in bytes: queued and dispatched, or, ``resumed``, running at the resumed worker that claimed it
        (it runs already: no budget refuses it, no deadline applies; its bytes are charged like any task's)."""
        peer, now, credential = message.peer, message.now, message.credential
        where = connection(peer.link, peer.address)
        if key is not None:
            self._clients.listen(peer, where, now)
        deadline = None if event.deadline is None or resumed is not None else now + event.deadline
        if resumed is not None:
            task_id = resumed[1].task_id
        else:
            task_id = self._random(TASK_ID_BYTES)
            if self._handover.on and event.request_id is not None:
                digest = request_digest(event.description, event.body)
                task_id = self._handover.ticket(task_id, service.name, message.owner, event.request_id, digest)
        # the tenant: a key, a name, or else the connection (a forged envelope hop is not a tenant of its own)
        # (the sender itself when its address is its connection's: no new Peer per request)
        tenant = (
            credential.key
            if credential is not None
            else event.tenant or (peer if type(peer) is Peer and type(peer.address) is not tuple else peer_at(where))
        )
        size, charge = cost
        task = Task(
            task_id, peer, event.dialect, key, event.description, event.body, service, now, size,
            charge, deadline=deadline, tenant=tenant, priority=event.priority,
            detached=bool(event.flags & protocol.FLAG_DETACHED),
            fail_unknown=bool(event.flags & protocol.FLAG_KNOWN_SERVICE), trace=event.trace,
        )  # fmt: skip
        self._tasks[task.id] = task
        if key is not None:
            self._by_request[key] = task
        self._budgets.charge(task)
        if self._journal:
            self._durable.accepted(task, now + event.not_before if event.not_before else None)
        if resumed is not None:
            worker, claim = resumed
            self._run_at(task, worker, claim.task_id, claim.since)
            service.flow.finished()  # the claim's place in flight, now the task's, with its bytes
            service.flow.adopt(size)
            self.counters.tasks_resumed += 1
            return
        if deadline is not None:
            self._expiry.add(deadline, task)
        if event.not_before:
            self._delays.hold(task, now + event.not_before)
            return
        service.push(task)
        self._dispatch(service, message)

    def _cancel(self, task: Task, turn: Turn) -> None:
        """Let ``task`` go, already out of ``_by_request``: off its queue, or its worker's result to be dropped (the
        worker told, if it understands CANCEL)."""
        if self._journal:
            self._durable.finished(task)  # (not queued again after a restart: nobody waits for it)
        state = task.state
        task.state = _T_CANCEL[state]
        if task.state is TaskState.DONE:  # it was queued
            task.service.drop(task)
            self._finish(task, state, dequeued=True)
        elif task.worker is not None:
            task.worker.state = _W_CANCEL[task.worker.state]
            self._tell_cancel(task.worker, task, turn)

    def _tell_cancel(self, worker: WorkerRecord, task: Task, turn: Turn) -> None:
        """Tell ``worker`` (if it understands CANCEL) that nobody waits for the result of ``task`` any more."""
        if "cancel" in worker.features:
            turn.out.append(Cancel(worker.peer, protocol.worker_cancel(task.id)))

    def _run_at(self, task: Task, worker: WorkerRecord, task_id: bytes, since: float) -> None:
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

    # ------------------------------------------------------------------------------------------- services and workers

    def _adopt(self, service: Service, where: ConnectionId) -> str | None:
        """Charge a service the core sees for the first time to the connection whose message made it, and apply
        the flow limits configured for its name; or say why it does not fit the ledger (counted), and forget it."""
        return self._budgets.adopt(service, where, self.flows, getattr(self.resolver, "forget", None))

    def _again(self, service: Service, when: float) -> None:
        """Dispatch ``service`` again at ``when`` at the latest (a held task's time)."""
        again = self._throttled.get(service)
        self._throttled[service] = when if again is None else min(again, when)

    def _wait(self, worker: WorkerRecord, turn: Turn) -> None:
        """Queue a worker that has just become WAITING, and dispatch."""
        worker.service.wait(worker)
        self._dispatch(worker.service, turn)

    def _dispatch(self, service: Service, turn: Turn) -> None:
        """Send the service's queued tasks to its waiting workers, as far as its flow limits (and its tenants')
        allow, and, after a restart, not before the recovery window ends; held tasks whose time came join first."""
        if service.delayed:
            self._delays.release(service, turn.now)
        if not service.pending:  # (most answers free a worker of a service with nothing queued: no pair to make)
            return
        now = turn.now
        hold = self._handover.held_until(now)
        if hold is not None:  # the recovery window after a restart
            if service.waiting:
                self._throttled[service] = hold
            return
        flow = service.flow
        held = service.release_due(now)
        ahead = service.stats.ahead(self.settings.deadline_estimate_after)  # the time a task needs left
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
            worker: WorkerRecord
            task: Task
            worker, task = pair  # (typed: the compiled core reads and sets their fields natively, not by name)
            if worker.expires <= now:  # silent too long, and its heartbeat's turn has not come yet
                service.push(task, front=True)
                self._silent(worker, now)
                continue
            deadline = task.deadline
            if deadline is not None and deadline - now <= ahead:  # past it (due at a tick), or too close for it
                service.put_back(worker)
                self._expiry.too_late(task, deadline - now, turn)
                continue
            if not flow.fits(task.size):
                service.put_back(worker, task)  # its own limits (bytes in flight) hold it: a completion frees them
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
                b"" if (deadline is None and task.trace is None) or "fields" not in worker.features
                else protocol.request_fields(None if deadline is None else deadline - now, trace=task.trace)
            )  # fmt: skip
            frames = protocol.worker_request(worker.dialect, task.id, task.description, task.body, fields)
            turn.send(Dispatch, worker.peer, frames)
            if self._trace:
                log.debug(
                    "dispatched task %s of %r to worker %s (attempt %d, queued %.3f s)",
                    task.id.hex(), service.name, worker.label, task.attempts, now - task.enqueued,
                )  # fmt: skip

    def _complete(
        self, task: Task, status: bytes, body: Sequence[Frame], turn: Turn, *, dequeued: bool = False,
        dispatch: bool = True,
    ) -> None:  # fmt: skip
        """Answer ``task``'s client, keep the answer and forget the task (``dequeued``: already off its queue); then
        dispatch into the place in flight it freed, unless the caller will (``dispatch=False``)."""
        now = turn.now
        state = task.state
        self._finish(task, state, dequeued=dequeued)
        self.counters.completed += 1
        if task.trace is not None and self.spans.on:
            self.spans.answered(task, task.trace, status, now)
        waited = (task.dispatched if task.dispatched is not None else now) - task.enqueued
        served = now - task.dispatched if task.dispatched is not None else 0.0
        stats = task.service.stats
        if status == protocol.UNAVAILABLE:
            stats.failed += 1
            self.counters.failed += 1
        elif status == protocol.EXPIRED:
            stats.expired += 1
            self.counters.expired += 1
        else:
            stats.record(waited, served, now)
            if state in IN_FLIGHT and task.service.flow.adaptive is not None:
                task.service.flow.answered(now, served)  # a cap that grew is used by the dispatch below
        self._reply(task, status, body, protocol.timing(waited, served), turn)
        if dispatch and state in IN_FLIGHT:
            self._dispatch(task.service, turn)  # a place in flight came free

    def _reply(self, task: Task, status: bytes, body: Sequence[Frame], meta: bytes, turn: Turn) -> None:
        """Send ``task``'s client its final answer and keep it for the client's re-asks."""
        frames = protocol.client_reply(task.dialect, task.request_id, task.description, status, body, True, meta)
        if frames is not None:
            turn.send(Respond, task.client, frames)
            if task.key is not None and not is_displaced(task.key) and self._kept.seconds > 0:
                where = connection(task.client.link, task.client.address)  # kept for this request only:
                digest = _digest(task)
                self._kept.keep(task.key, frames, turn.now, where, digest)  # another with its id is not it
                if self._journal:
                    self._durable.kept(task.key, frames, turn.now, task.client, digest)

    def _finish(self, task: Task, state: TaskState, *, dequeued: bool = False) -> None:
        """Finish ``task``, which was in ``state``: out of the tables, off its queue and out of flight, its bytes
        released."""
        task.state = _T_FINISH[state]
        del self._tasks[task.id]
        if task.deadline is not None:
            self._expiry.forget()
        if task.key is not None and self._by_request.get(task.key) is task:
            del self._by_request[task.key]
        service = task.service
        if state is TaskState.QUEUED and not dequeued:
            service.drop(task)
        elif state in IN_FLIGHT:
            service.flow.finished(task.size)
            service.stopped(task)
        task.worker = None
        self._budgets.release(task)
        if self._journal:
            self._durable.finished(task)

    def _leave(self, worker: WorkerRecord, now: float) -> None:
        """``worker`` leaves: out of the tables and its service (the caller reissues the task it held)."""
        self._served.seen(worker.service.name, now)
        self._workers.remove(worker)
        worker.service.leave(worker)
        worker.state = _W_LEAVE[worker.state]

    def _wake(self, turn: Turn) -> None:
        """Let the workers whose rest (a 429's retry_after) is over wait for tasks again."""
        for worker in self._workers.woken(turn.now):
            self._wait(worker, turn)

    def _silent(self, worker: WorkerRecord, now: float) -> None:
        """``worker``, silent past its expiry, leaves (the caller reissues the task it held)."""
        log.info("worker %s (%r) expired", worker.label, worker.description[:64])
        self.counters.workers_expired += 1
        self._leave(worker, now)

    def _reissue(self, worker: WorkerRecord, turn: Turn) -> None:
        """Reissue the task a ``worker`` that left held: back to the front of its queue, failed after
        ``max_attempts``, or finished if it was cancelled."""
        task, worker.task = worker.task, None
        if task is None:
            self._handover.drop_claim(worker)  # nothing to reissue: the request has not arrived here
            return
        if task.state is TaskState.CANCELLED:
            self._finish(task, task.state)
        elif task.attempts >= self.settings.max_attempts:
            reason = f"task lost with its worker {task.attempts} times; giving up"
            self._dead.bury(task, protocol.UNAVAILABLE, reason, turn.now)
            self._complete(task, protocol.UNAVAILABLE, [reason.encode()], turn)
            return
        else:
            task.worker = None
            task.state = _T_REISSUE[task.state]
            task.service.flow.finished(task.size)
            task.service.stopped(task)
            self.counters.reissued += 1
            task.service.stats.reissued += 1
            task.service.push(task, front=True)
        self._dispatch(task.service, turn)

    # ------------------------------------------------------------------------------------------- periodic work

    def _heartbeat(self, turn: Turn) -> None:
        """Heartbeat the workers whose turn has come (see ``Workers.beats``), and let those silent past their
        expiry leave: each worker's turn comes once per heartbeat interval."""
        now = turn.now
        beaten, expired = self._workers.beats(now, self.settings.heartbeat_interval)
        turn.out.extend(Beat(worker.peer, self._handover.heartbeat(worker)) for worker in beaten)
        for worker in expired:  # they all leave first, so that no reissued task goes to one of them
            self._silent(worker, now)
        for worker in expired:
            self._reissue(worker, turn)

    def _sweep(self, turn: Turn) -> None:
        settings, now = self.settings, turn.now
        self._requests.end_grace(turn)
        timeout, anonymous = settings.queue_timeout, settings.anonymous_queue_timeout
        if timeout is not None:
            self._expiry.expire_queued(now - timeout, turn)
        if anonymous is not None and (timeout is None or anonymous < timeout):
            self._expiry.expire_queued(now - anonymous, turn, anonymous=True)
        self._requests.drop_silent_clients(now - settings.client_silence)
        self._kept.expire(now)
        self._dead.letters.expire(now - settings.dead_seconds)
        self._forget_idle_services(now)
        logging_held = self._reporting.flush(now)
        self._barrier.flush(now)
        held = len(self._kept) or len(self._dead.letters) or self._budgets.holds()
        busy = self._tasks or len(self._clients) or held or logging_held
        self._next_sweep = now + settings.heartbeat_interval if busy else None

    def _forget_idle_services(self, now: float) -> None:
        """Forget the services and the flow entries of peers idle for ``service_idle`` (see
        ``Budgets.forget_idle``); a flow entry forgotten is reported as lifted, so that the state directory
        forgets it too."""
        forget = getattr(self.resolver, "forget", None)
        services, names = self._budgets.forget_idle(now, self.resolver.services(), forget, self.flows)
        for service in services:
            self._throttled.pop(service, None)
        for name in names:
            del self.flows[name]
            self._changed.pop(name, None)
            self._changed[name] = mmi.FlowChange(name, _UNSET)
            self._durable.flowed(self._changed[name])


def _digest(task: Task) -> bytes:
    return request_digest(task.description, task.body)


def _tables(requests: Requests, registration: Registration, results: Results) -> tuple[Table, Table]:
    """The handler of each kind of event, and of each kind of those over ``max_message``, in the parts that
    handle them: one entry per kind, typed for it (:func:`~generaldomo.sansio.broker.core.turns.on`)."""
    handlers = (
        on(ClientRequest, requests.on_request),
        on(ClientHeartbeat, requests.on_heartbeat),
        on(ClientCancel, requests.on_cancel),
        on(WorkerReady, registration.on_ready),
        on(WorkerReply, results.on_reply),
        on(WorkerHeartbeat, registration.on_heartbeat),
        on(WorkerDisconnect, registration.on_disconnect),
        on(Malformed, registration.on_malformed),
        on(WorkerResume, registration.on_resume),
        on(WorkerHandover, results.on_handover),
    )
    large = (
        on(ClientRequest, requests.on_large_request),
        on(WorkerReply, results.on_large_reply),
        on(WorkerHandover, results.on_large_handover),
    )
    return dict(handlers), dict(large)

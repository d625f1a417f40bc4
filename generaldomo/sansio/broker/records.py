"""The broker core's records: where a message came from, a registered worker, a live task.

This module owns the shape of the state :mod:`generaldomo.sansio.broker.core` keeps per peer and per request; the
core alone changes these records (services and resolvers read a worker's or task's ``description`` and a
worker's ``task``). It knows nothing of sockets, clocks or frames.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable
from typing import Final, NamedTuple

from generaldomo.sansio.broker.services.service import Service
from generaldomo.sansio.broker.states import IN_FLIGHT, TaskState, WorkerState
from generaldomo.sansio.wire.events import Dialect, Frame
from generaldomo.sansio.wire.ticket import Ticket
from generaldomo.sansio.wire.tracecontext import TraceContext

__all__ = [
    "Claim",
    "Identity",
    "Peer",
    "RequestKey",
    "Task",
    "WorkerRecord",
    "displaced",
    "is_displaced",
    "request_key",
]

# A request's identity: its id, scoped to the credential key when there is one. Without a credential it is the
# bare id (bytes never equal a tuple), so that an unauthenticated queued request holds no tuple of its own.
RequestKey = bytes | tuple[str, bytes]
# A worker's identity across its reconnects: the name its peer info gives, scoped to its CURVE key (None without
# CURVE), so that only a peer holding the same key can speak for that worker.
Identity = tuple[str | None, str]


def request_key(owner: str | None, request_id: bytes) -> RequestKey:
    """The key of request ``request_id`` of a client authenticated as ``owner`` (None: not authenticated)."""
    return request_id if owner is None else (owner, request_id)


_DISPLACED = ""  # the owner of a displaced task's key: no credential has an empty key


def displaced(key: RequestKey) -> RequestKey:
    """The key of a task whose request id another request (with another content) took over: it still carries
    the request id, for its answer, but no request, re-ask or cancel finds it and its answer is not kept."""
    return (_DISPLACED, key if isinstance(key, bytes) else key[1])


def is_displaced(key: RequestKey) -> bool:
    return not isinstance(key, bytes) and key[0] == _DISPLACED


class Peer(NamedTuple):
    """Where a message came from: the index of the link and the peer's address on it.

    The address is opaque to the core: a ROUTER identity (``bytes``), a SERVER routing id (``int``), or the
    identities of every hop of a ROUTER envelope (a tuple, outermost first).

    Args:
        link: the index of the broker's link it came over.
        address: its address on that link (see above).

    Example:
        >>> from generaldomo import Peer
        >>> Peer(0, b"w1")
        Peer(link=0, address=b'w1')
    """

    link: int
    address: bytes | int | tuple[bytes, ...]


_TUPLE: Final = tuple.__new__


def peer_at(where: tuple[int, bytes | int]) -> Peer:
    """The :class:`Peer` of a connection ``(link, address)``, made as the tuple it is (its ``NamedTuple``'s own
    ``__new__`` is a Python function: a call into the interpreter under the compiled core)."""
    peer: Peer = _TUPLE(Peer, where)
    return peer


@dataclasses.dataclass(frozen=True, slots=True)
class Claim:
    """A resumed worker runs the task ``task_id`` (a ticket of an earlier instance, saying ``ticket``) since
    ``since``; its request has not arrived here yet."""

    task_id: bytes
    ticket: Ticket
    since: float


@dataclasses.dataclass(eq=False, slots=True)
class WorkerRecord:
    """The core's record of one registered worker; ``label`` names it in reports and logs, ``host`` and
        ``pid`` are what the worker said of itself in its READY (None: it did not say); ``charge`` is what it costs
        its connection in the ledger, ``beat`` when its next heartbeat is due and ``serial`` its place in the order
        of registration (for the pages of the status report). A worker that registered with RESUME is BUSY without
        a ``task`` until it sends its result; ``claim`` is the ticket of the request it runs for an earlier
        instance, until that request arrives (then it holds the task) or its result does. ``taken``: the nonces of
        its results taken since the last heartbeat told it so (hand-over brokers). ``identity``: who it is across its
    reconnects, its CURVE key (None without CURVE) and the name its peer info gave (None: it gave none)."""

    peer: Peer
    dialect: Dialect
    description: bytes
    service: Service
    expires: float
    label: str
    state: WorkerState = WorkerState.WAITING
    task: Task | None = None
    done: int = 0
    host: str | None = None
    pid: int | None = None
    features: frozenset[str] = frozenset()  # the GDP additions it said it understands (protocol.FEATURES)
    charge: int = 0
    beat: float = 0.0
    serial: int = 0
    claim: Claim | None = None
    taken: list[bytes] = dataclasses.field(default_factory=list)
    rests: float | None = None  # WAITING but held back until then by its own 429's retry_after (None: not)
    identity: Identity | None = None


@dataclasses.dataclass(eq=False, slots=True, init=False)
class Task:
    """One client request, from acceptance until its single answer; ``key`` is None for MDP requests, which
    carry no request id, ``size`` is the bytes of its description and body (what flow control counts in
    flight) and ``charge`` what it costs the budgets and its client's connection in the ledger (ids, envelope
    and overhead too). Every queued request holds one, so it has no weak-reference slot and no ``request_id``
    field (it is the key's); ``size`` is kept, as the hot path reads it four times per request (a property would
    cost about 0.8 µs per request for 8 bytes). ``deadline`` is the broker time after which nobody waits for the
    answer (None: the client set none); ``tenant`` whose share of the service it takes (a CURVE key, a name the
    client gave, or the client's connection) and ``priority`` its order within the tenant's; ``order`` belongs
    to the service's queue (:mod:`generaldomo.sansio.broker.flow.fair`); a ``detached`` task stays queued while its
    client is silent. Its ``__init__`` is written out (the fields, in order, with their defaults) so that the
    compiled core builds it natively (see :mod:`generaldomo.sansio.wire.events`)."""

    id: bytes
    client: Peer
    dialect: Dialect
    key: RequestKey | None
    description: bytes
    body: tuple[Frame, ...]
    service: Service
    enqueued: float
    size: int
    charge: int
    state: TaskState
    worker: WorkerRecord | None
    dispatched: float | None
    attempts: int
    retries: int  # times its service's retry policy retried it
    deadline: float | None
    tenant: Hashable
    priority: int
    order: int
    detached: bool  # kept queued while its client is silent (its answer is fetched later)
    fail_unknown: bool  # answered 404 while its service has no worker and had none recently
    not_before: float | None  # QUEUED but held off its queue until then (None: in its queue, or running)
    trace: TraceContext | None  # the request's W3C trace context, passed on to its worker

    def __init__(
        self,
        id: bytes,
        client: Peer,
        dialect: Dialect,
        key: RequestKey | None,
        description: bytes,
        body: tuple[Frame, ...],
        service: Service,
        enqueued: float,
        size: int,
        charge: int,
        state: TaskState = TaskState.QUEUED,
        worker: WorkerRecord | None = None,
        dispatched: float | None = None,
        attempts: int = 0,
        retries: int = 0,
        deadline: float | None = None,
        tenant: Hashable = None,
        priority: int = 0,
        order: int = 0,
        detached: bool = False,
        fail_unknown: bool = False,
        not_before: float | None = None,
        trace: TraceContext | None = None,
    ) -> None:
        self.id = id
        self.client = client
        self.dialect = dialect
        self.key = key
        self.description = description
        self.body = body
        self.service = service
        self.enqueued = enqueued
        self.size = size
        self.charge = charge
        self.state = state
        self.worker = worker
        self.dispatched = dispatched
        self.attempts = attempts
        self.retries = retries
        self.deadline = deadline
        self.tenant = tenant
        self.priority = priority
        self.order = order
        self.detached = detached
        self.fail_unknown = fail_unknown
        self.not_before = not_before
        self.trace = trace

    @property
    def request_id(self) -> bytes | None:
        """The client's id for the request (None for MDP dialects)."""
        key = self.key
        return key if key is None or isinstance(key, bytes) else key[1]

    @property
    def in_flight(self) -> bool:
        """True while a worker holds the task (it counts against its service's concurrency)."""
        return self.state in IN_FLIGHT

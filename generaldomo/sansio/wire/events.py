"""What the broker core hears: one small immutable class per kind of inbound message.

This module owns the vocabulary shared by :mod:`generaldomo.sansio.wire.protocol` (which makes events out of frames) and
:mod:`generaldomo.sansio.broker.core` (which acts on them). It knows nothing of byte layouts, sockets or clocks.

The two events of every request and reply (:class:`ClientRequest`, :class:`WorkerReply`) write their own
``__init__`` (``init=False``; its parameters are the fields, in order, with their defaults: tests/package/
test_records.py checks it) and mark their fields ``Final``: the compiled core builds them natively, where the
``__init__`` that ``dataclasses`` generates (a frozen one above all) runs in the interpreter, a third of the
compiled core's instructions. ``mypy --strict`` keeps them immutable; so does the compiled core at run time.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Final

from generaldomo.sansio.wire.tracecontext import TraceContext

__all__ = [
    "ClientCancel",
    "ClientHeartbeat",
    "ClientRequest",
    "Dialect",
    "Event",
    "Frame",
    "Malformed",
    "WorkerDisconnect",
    "WorkerHandover",
    "WorkerHeartbeat",
    "WorkerReady",
    "WorkerReply",
    "WorkerResume",
]


# A frame as it travels: bytes, or a read-only memoryview of the message received (the links hand over a large
# frame uncopied; see generaldomo.io.hub.links). Bodies are passed on as they come; every other field is bytes.
Frame = bytes | memoryview


class Dialect(enum.Enum):
    """The wire protocol a peer speaks; replies to a peer use the dialect it spoke."""

    GDP = "generaldomo/1"
    MDP01 = "MDP/0.1"
    MDP02 = "MDP/0.2"
    MAJORTOMO = "majortomo"

    # members are singletons: the C identity hash serves, not Enum's own (it hashes the name in Python at every dict
    # or set lookup); without it, the core costs 3,600 instructions more per request and reply, 1.9 %
    # (``python -m bench.peer_instructions --role core``, 2026-12-07)
    __hash__ = object.__hash__

    @property
    def streams(self) -> bool:
        """True when the dialect carries PARTIAL replies to clients."""
        return self is not Dialect.MDP01


@dataclasses.dataclass(slots=True, init=False, unsafe_hash=True)
class ClientRequest:
    """A client asks for a task. MDP dialects carry no request id, and no fields: a GDP client may say by when
    it needs the answer (``deadline``: seconds from now), which ``tenant`` it asks for, the request's
    ``priority`` (higher first, within its tenant), ``flags`` (whether it is detached from its client, and
    whether to fail at once for a service nobody serves), ``not_before`` (seconds from now before which it
    is not dispatched) and its W3C ``trace`` context (``trace_dropped``: why the one it sent was dropped,
    malformed)."""

    dialect: Final[Dialect]
    request_id: Final[bytes | None]
    description: Final[bytes]
    body: Final[tuple[Frame, ...]]
    deadline: Final[float | None]
    tenant: Final[str | None]
    priority: Final[int]
    flags: Final[int]  # protocol.FLAG_* bits: detached, fail fast for a service nobody serves
    not_before: Final[float | None]  # seconds from now before which it is not dispatched (None: at once)
    trace: Final[TraceContext | None]
    trace_dropped: Final[str | None]

    def __init__(
        self,
        dialect: Dialect,
        request_id: bytes | None,
        description: bytes,
        body: tuple[Frame, ...],
        deadline: float | None = None,
        tenant: str | None = None,
        priority: int = 0,
        flags: int = 0,
        not_before: float | None = None,
        trace: TraceContext | None = None,
        trace_dropped: str | None = None,
    ) -> None:
        self.dialect = dialect
        self.request_id = request_id
        self.description = description
        self.body = body
        self.deadline = deadline
        self.tenant = tenant
        self.priority = priority
        self.flags = flags
        self.not_before = not_before
        self.trace = trace
        self.trace_dropped = trace_dropped


@dataclasses.dataclass(frozen=True, slots=True)
class ClientHeartbeat:
    """A generaldomo client asks whether the broker is alive and which instance it is, and re-asks about the
    ``request_ids`` it has waited on for unusually long."""

    dialect: Dialect
    request_ids: tuple[bytes, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class ClientCancel:
    """A generaldomo client withdraws its request ``request_id``."""

    dialect: Dialect
    request_id: bytes


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerReady:
    """A worker offers to serve requests that its service description matches; generaldomo workers may say
    which ``host`` and process id (``pid``) they run as (None: not said), which ``features`` of the
    protocol they understand and the ``name`` they keep across their reconnects (their peer info's id)."""

    dialect: Dialect
    description: bytes
    host: str | None = None
    pid: int | None = None
    features: frozenset[str] = frozenset()  # the GDP additions it understands (see protocol.FEATURES)
    name: str | None = None


@dataclasses.dataclass(slots=True, init=False, unsafe_hash=True)
class WorkerReply:
    """A worker's result (``final``) or partial result for a task.

    A final reply also means the worker is ready again. generaldomo workers send their result inside READY, so
    they also restate their ``description``; MDP workers leave it ``None``.
    """

    dialect: Final[Dialect]
    task_id: Final[bytes]
    status: Final[bytes]
    body: Final[tuple[Frame, ...]]
    final: Final[bool]
    description: Final[bytes | None]

    def __init__(
        self,
        dialect: Dialect,
        task_id: bytes,
        status: bytes,
        body: tuple[Frame, ...],
        final: bool,
        description: bytes | None = None,
    ) -> None:
        self.dialect = dialect
        self.task_id = task_id
        self.status = status
        self.body = body
        self.final = final
        self.description = description


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerResume:
    """A generaldomo worker registers while it runs the task ``task_id`` that an earlier broker instance (or
    this one, before its connection broke) gave it: it takes no task until it sends that task's result."""

    dialect: Dialect
    description: bytes
    task_id: bytes
    host: str | None = None
    pid: int | None = None
    features: frozenset[str] = frozenset()  # as in READY
    name: str | None = None  # as in READY


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerHandover:
    """A registered generaldomo worker hands over the result of a task of an earlier registration (no broker
    took it, as far as the worker knows); it says nothing of the worker's readiness."""

    dialect: Dialect
    task_id: bytes
    status: bytes
    body: tuple[Frame, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerHeartbeat:
    """A worker says it is alive."""

    dialect: Dialect


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerDisconnect:
    """A worker says it is leaving."""

    dialect: Dialect


@dataclasses.dataclass(frozen=True, slots=True)
class Malformed:
    """Frames that match no known message; ``reason`` says why, for one log line. ``request_id``: the message
    was a generaldomo request with this (valid) id, which may be answered with an error; ``worker``: the message
    was a worker's, in this dialect."""

    reason: str
    request_id: bytes | None = None
    worker: Dialect | None = None


Event = (
    ClientRequest
    | ClientHeartbeat
    | ClientCancel
    | WorkerReady
    | WorkerReply
    | WorkerResume
    | WorkerHandover
    | WorkerHeartbeat
    | WorkerDisconnect
    | Malformed
)

"""What a generaldomo peer hears from its broker: one small immutable class per kind of message.

This module owns the peer side's vocabulary, as :mod:`generaldomo.sansio.wire.events` owns the broker's:
:mod:`generaldomo.sansio.wire.protocol` makes these out of frames (``read_client_message``, ``read_worker_message``)
and :mod:`generaldomo.sansio.peer.session` acts on them. It knows nothing of byte layouts, sockets or clocks.

The messages of every request (:class:`FinalReply` to a client, :class:`TaskRequest` to a worker) write their own
``__init__`` and mark their fields ``Final``, as the broker's events of every request do (see
generaldomo.sansio.wire.events): the compiled core builds them natively.
"""

from __future__ import annotations

import dataclasses
from typing import Final

from generaldomo.sansio.wire.events import Malformed
from generaldomo.sansio.wire.tracecontext import TraceContext

__all__ = [
    "BrokerDisconnect",
    "BrokerHeartbeat",
    "FinalReply",
    "HeartbeatAnswer",
    "PartialReply",
    "TaskCancel",
    "TaskRequest",
    "ToClient",
    "ToWorker",
]


@dataclasses.dataclass(slots=True, init=False, unsafe_hash=True)
class FinalReply:
    """The answer to a client's request: a status (``b"200"`` on success), a timing frame, the body."""

    request_id: Final[bytes]
    status: Final[bytes]
    timing: Final[bytes]
    body: Final[tuple[bytes, ...]]

    def __init__(self, request_id: bytes, status: bytes, timing: bytes, body: tuple[bytes, ...]) -> None:
        self.request_id = request_id
        self.status = status
        self.timing = timing
        self.body = body


@dataclasses.dataclass(frozen=True, slots=True)
class PartialReply:
    """A partial result a streaming worker sent before the final one."""

    request_id: bytes
    body: tuple[bytes, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class HeartbeatAnswer:
    """The broker answers a client's HEARTBEAT: its instance, and which of the asked ids it does not know."""

    instance: bytes
    unknown: tuple[bytes, ...] = ()


@dataclasses.dataclass(slots=True, init=False, unsafe_hash=True)
class TaskRequest:
    """The broker hands a worker a task; ``deadline``: seconds the client still waits, if it said; ``trace``: the
    request's W3C trace context, if it carries one."""

    task_id: Final[bytes]
    description: Final[bytes]
    body: Final[tuple[bytes, ...]]
    deadline: Final[float | None]
    trace: Final[TraceContext | None]

    def __init__(
        self,
        task_id: bytes,
        description: bytes,
        body: tuple[bytes, ...],
        deadline: float | None = None,
        trace: TraceContext | None = None,
    ) -> None:
        self.task_id = task_id
        self.description = description
        self.body = body
        self.deadline = deadline
        self.trace = trace


@dataclasses.dataclass(frozen=True, slots=True)
class TaskCancel:
    """The broker tells a worker that nobody waits for the result of its task any more (cancelled or past
    its deadline): a cooperative handler may stop."""

    task_id: bytes


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerHeartbeat:
    """The broker tells a worker it is alive; a broker that takes hand-overs names its ``instance`` and the
    tasks whose results it has taken from this worker since its last heartbeat (``taken``: their nonces)."""

    instance: bytes | None = None
    taken: tuple[bytes, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerDisconnect:
    """The broker tells a worker to go away (it does not know it); the worker registers again."""


ToClient = FinalReply | PartialReply | HeartbeatAnswer | Malformed
ToWorker = TaskRequest | TaskCancel | BrokerHeartbeat | BrokerDisconnect | Malformed

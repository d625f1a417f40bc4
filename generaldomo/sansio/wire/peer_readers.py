"""What the generaldomo peers read: the broker's messages to a client and to a worker, and an MDP/0.1 broker's
reply to the bridge.

This module owns the reading of every message :mod:`generaldomo.sansio.peer` receives (see
``docs/protocol.rst``), in the generaldomo dialect, each turned into a :mod:`generaldomo.sansio.wire.peer_events`
message with every field within its bounds in :mod:`generaldomo.sansio.wire.limits` (else Malformed); readers
never raise. It knows nothing of sockets, of clocks, or of what a peer does with a message; what the peers write
is :mod:`generaldomo.sansio.wire.peer_writers`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from generaldomo.sansio.wire.dialects import (
    CANCEL,
    DISCONNECT,
    FIELDS_REQUEST,
    FINAL,
    GDP_CLIENT,
    GDP_WORKER,
    HEARTBEAT,
    MAX_REASKED,
    MAX_TAKEN,
    PARTIAL,
    PREFIX,
    REQUEST,
    WORKER_NAMES,
    command_byte,
)
from generaldomo.sansio.wire.events import Dialect, Malformed
from generaldomo.sansio.wire.fields import parse_fields
from generaldomo.sansio.wire.limits import DESCRIPTION, INSTANCE, REQUEST_ID, STATUS, TASK_ID, Field
from generaldomo.sansio.wire.peer_events import (
    BrokerDisconnect,
    BrokerHeartbeat,
    FinalReply,
    HeartbeatAnswer,
    PartialReply,
    TaskCancel,
    TaskRequest,
    ToClient,
    ToWorker,
)
from generaldomo.sansio.wire.statuses import is_status

__all__ = [
    "parse_broker_instance",
    "parse_client_reply",
    "parse_mdp_client_reply",
    "read_client_message",
    "read_worker_message",
]

_GDP_FINAL = command_byte(Dialect.GDP, FINAL, worker=False)
_GDP_PARTIAL = command_byte(Dialect.GDP, PARTIAL, worker=False)
_GDP_HEARTBEAT = command_byte(Dialect.GDP, HEARTBEAT, worker=False)
_GDP_WORKER_NAMES = WORKER_NAMES[Dialect.GDP]


def _outside(field: Field, frame: bytes) -> str | None:
    """Why ``frame`` breaks ``field``'s bounds, or None when it is within them."""
    return None if field.fits(frame) else field.refusal(len(frame))


def read_client_message(frames: Sequence[bytes]) -> ToClient:
    """What a broker message to a generaldomo client says, each field within its bounds in
    :mod:`generaldomo.sansio.wire.limits` (else Malformed); never raises."""
    if len(frames) < 3 or frames[0] != GDP_CLIENT:
        return Malformed("not a generaldomo client message")
    command = frames[1]
    if command == _GDP_FINAL and len(frames) >= 5:
        if (wrong := _outside(REQUEST_ID, frames[2])) is not None:
            return Malformed(wrong)
        if not is_status(frames[3]):
            return Malformed(f"a reply's status must be {STATUS.bounds}, not {len(frames[3])} bytes")
        return FinalReply(frames[2], frames[3], frames[4], tuple(frames[5:]))
    if command == _GDP_PARTIAL:
        if (wrong := _outside(REQUEST_ID, frames[2])) is not None:
            return Malformed(wrong)
        return PartialReply(frames[2], tuple(frames[3:]))
    if command == _GDP_HEARTBEAT:
        if (wrong := _outside(INSTANCE, frames[2])) is not None:
            return Malformed(wrong)
        return HeartbeatAnswer(frames[2], tuple(frames[3 : 3 + MAX_REASKED]))
    return Malformed(f"unknown generaldomo client command {bytes(command[:4])!r}")


_WORKER_READS: Final[dict[str, ToWorker]] = {HEARTBEAT: BrokerHeartbeat(), DISCONNECT: BrokerDisconnect()}


def read_worker_message(frames: Sequence[bytes]) -> ToWorker:
    """What a broker message to a generaldomo worker says, each field within its bounds in
    :mod:`generaldomo.sansio.wire.limits` (else Malformed); never raises."""
    if len(frames) < 2 or frames[0] != GDP_WORKER:
        return Malformed("not a generaldomo worker message")
    command = _GDP_WORKER_NAMES.get(frames[1])
    if command in (REQUEST, FIELDS_REQUEST):
        if len(frames) < (4 if command == REQUEST else 5):
            return Malformed(f"generaldomo {command} without a task id, a description (and fields)")
        wrong = _outside(TASK_ID, frames[2]) or _outside(DESCRIPTION, frames[3])
        if wrong is not None:
            return Malformed(wrong)
        if command == REQUEST:
            return TaskRequest(frames[2], frames[3], tuple(frames[4:]))
        fields = parse_fields(frames[4])
        if isinstance(fields, str):
            return Malformed(fields)
        return TaskRequest(frames[2], frames[3], tuple(frames[5:]), fields[0], fields[5])
    if command == HEARTBEAT and len(frames) > 2:
        if (wrong := _outside(INSTANCE, frames[2])) is not None:
            return Malformed(wrong)
        return BrokerHeartbeat(frames[2], tuple(frames[3 : 3 + MAX_TAKEN]))
    if command == CANCEL:
        if len(frames) != 3 or (wrong := _outside(TASK_ID, frames[2])) is not None:
            return Malformed("generaldomo CANCEL without a task id within its bounds")
        return TaskCancel(frames[2])
    known = _WORKER_READS.get(command or "")
    return known if known is not None else Malformed(f"unexpected generaldomo worker command {command}")


def parse_client_reply(
    frames: Sequence[bytes],
) -> tuple[bytes, bytes | None, bytes, tuple[bytes, ...]] | None:
    """``(request_id, status, timing, body)`` of a reply to a generaldomo client (status None: partial), or None
    if the frames are not one: the tuple form a one-shot client (``generaldomo probe``) reads."""
    message = read_client_message(frames)
    if isinstance(message, FinalReply):
        return message.request_id, message.status, message.timing, message.body
    if isinstance(message, PartialReply):
        return message.request_id, None, b"", message.body
    return None


def parse_broker_instance(frames: Sequence[bytes]) -> bytes | None:
    """The broker instance named by its answer to a client HEARTBEAT, or None if the frames are not one."""
    message = read_client_message(frames)
    return message.instance if isinstance(message, HeartbeatAnswer) else None


def parse_mdp_client_reply(frames: Sequence[bytes]) -> tuple[bytes, tuple[bytes, ...]] | None:
    """``(service, body)`` of an MDP/0.1 broker's reply as a DEALER receives it, or None if it is not one."""
    prefix = PREFIX[Dialect.MDP01, False]
    if len(frames) <= len(prefix) or tuple(frames[: len(prefix)]) != prefix:
        return None
    return frames[len(prefix)], tuple(frames[len(prefix) + 1 :])

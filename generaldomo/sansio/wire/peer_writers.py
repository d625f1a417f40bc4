"""What the generaldomo peers write: the frames of a client's and a worker's messages to the broker.

This module owns the layouts of the messages :mod:`generaldomo.sansio.peer` sends, in the generaldomo dialect
(see ``docs/protocol.rst``), and of the MDP/0.1 client's request the bridge sends upstream. It knows nothing of
sockets, of clocks, or of when a peer sends what; what the peers read is
:mod:`generaldomo.sansio.wire.peer_readers`.
"""

from __future__ import annotations

from collections.abc import Sequence

from generaldomo.sansio.wire.dialects import (
    CANCEL_BYTE,
    FIELDS_REQUEST,
    GDP_CLIENT,
    GDP_WORKER,
    HANDOVER,
    HEARTBEAT,
    PARTIAL,
    PREFIX,
    READY,
    REQUEST,
    RESUME,
    command_byte,
)
from generaldomo.sansio.wire.events import Dialect, Frame

__all__ = [
    "gdp_cancel",
    "gdp_client_heartbeat",
    "gdp_handover",
    "gdp_partial",
    "gdp_ready",
    "gdp_request",
    "gdp_resume",
    "gdp_worker_command",
    "mdp_client_request",
]

_GDP_REQUEST = command_byte(Dialect.GDP, REQUEST, worker=False)
_GDP_FIELDS_REQUEST = command_byte(Dialect.GDP, FIELDS_REQUEST, worker=False)
_GDP_HEARTBEAT = command_byte(Dialect.GDP, HEARTBEAT, worker=False)


def gdp_request(request_id: bytes, description: bytes, body: Sequence[bytes], fields: bytes = b"") -> list[bytes]:
    """Frames a generaldomo client sends to ask for a task: a REQUEST, or with ``fields`` (see
    :func:`~generaldomo.sansio.wire.fields.request_fields`) a REQUEST+FIELDS."""
    if fields:
        return [GDP_CLIENT, _GDP_FIELDS_REQUEST, request_id, description, fields, *body]
    return [GDP_CLIENT, _GDP_REQUEST, request_id, description, *body]


def gdp_client_heartbeat(instance: bytes | None = None, ids: Sequence[bytes] = ()) -> list[bytes]:
    """A HEARTBEAT: a client's (no instance), asking about ``ids``; or the broker's answer naming its instance
    and, in ``ids``, the asked request ids it does not know."""
    frames = [GDP_CLIENT, _GDP_HEARTBEAT]
    return [*frames, *ids] if instance is None else [*frames, instance, *ids]


def gdp_cancel(request_id: bytes) -> list[bytes]:
    """Frames of a generaldomo client's CANCEL: it no longer wants the answer to ``request_id``."""
    return [GDP_CLIENT, CANCEL_BYTE, request_id]


def gdp_ready(
    description: bytes, result: tuple[bytes, bytes, Sequence[bytes]] | None = None, info: bytes | None = None
) -> list[bytes]:
    """Frames of a generaldomo worker's READY, carrying ``(task_id, status, body)`` of its last task if any, or
    else the peer-info frame ``info`` (see :func:`~generaldomo.sansio.wire.inner_frames.worker_info`) if given."""
    frames = [GDP_WORKER, command_byte(Dialect.GDP, READY, True), description]
    if result is not None:
        task_id, status, body = result
        frames += [task_id, status, *body]
    elif info is not None:
        frames.append(info)
    return frames


def gdp_resume(description: bytes, task_id: bytes, info: bytes | None = None) -> list[bytes]:
    """Frames of a generaldomo worker's RESUME: it registers for ``description`` while it runs ``task_id``."""
    frames = [GDP_WORKER, command_byte(Dialect.GDP, RESUME, True), description, task_id]
    return frames if info is None else [*frames, info]


def gdp_handover(task_id: bytes, status: bytes, body: Sequence[bytes]) -> list[bytes]:
    """Frames of a generaldomo worker's HANDOVER: the result of a task of an earlier registration."""
    return [GDP_WORKER, command_byte(Dialect.GDP, HANDOVER, True), task_id, status, *body]


def gdp_partial(task_id: bytes, body: Sequence[bytes]) -> list[bytes]:
    """Frames of a generaldomo worker's partial result."""
    return [GDP_WORKER, command_byte(Dialect.GDP, PARTIAL, True), task_id, *body]


def gdp_worker_command(command: str) -> list[bytes]:
    """Frames of a generaldomo worker's HEARTBEAT or DISCONNECT."""
    return [GDP_WORKER, command_byte(Dialect.GDP, command, True)]


def mdp_client_request(service: bytes, body: Sequence[Frame]) -> list[Frame]:
    """Frames an MDP/0.1 client sends from a DEALER socket (the empty frame stands in for REQ's delimiter)."""
    return [*PREFIX[Dialect.MDP01, False], service, *body]

"""What the broker writes: the frames of its replies to clients and of its commands to workers, per dialect.

This module owns the layouts of every message the broker sends (see ``docs/protocol.rst``), each built from the
tables of :mod:`generaldomo.sansio.wire.dialects`. It knows nothing of sockets (the links add the ROUTER
identity frame, or pack the frames into one SERVER message), of clocks, or of why the broker sends a message;
what the broker reads is :mod:`generaldomo.sansio.wire.readers`. Its answer to a client's HEARTBEAT has
the client's layout (:func:`generaldomo.sansio.wire.peer_writers.gdp_client_heartbeat`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from generaldomo.sansio.wire.dialects import (
    CANCEL,
    FIELDS_REQUEST,
    FINAL,
    GDP_WORKER,
    HEARTBEAT,
    PARTIAL,
    PREFIX,
    REQUEST,
    command_byte,
)
from generaldomo.sansio.wire.events import Dialect, Frame
from generaldomo.sansio.wire.statuses import OK

__all__ = ["client_reply", "worker_cancel", "worker_command", "worker_heartbeat", "worker_request"]

_GDP_FINAL: Final = command_byte(Dialect.GDP, FINAL, worker=False)
_GDP_PARTIAL: Final = command_byte(Dialect.GDP, PARTIAL, worker=False)
_GDP_WORKER_REQUEST: Final = command_byte(Dialect.GDP, REQUEST, worker=True)
_GDP_WORKER_FIELDS: Final = command_byte(Dialect.GDP, FIELDS_REQUEST, worker=True)
_GDP_WORKER_CANCEL: Final = command_byte(Dialect.GDP, CANCEL, worker=True)
_GDP_WORKER_HEARTBEAT: Final = command_byte(Dialect.GDP, HEARTBEAT, worker=True)
_MDP_WORKER_REQUEST: Final = {  # each MDP dialect's frames of a REQUEST to a worker up to the task id, made once
    dialect: (*PREFIX[dialect, True], command_byte(dialect, REQUEST, True))
    for dialect in Dialect
    if dialect is not Dialect.GDP
}


def client_reply(
    dialect: Dialect,
    request_id: bytes | None,
    description: bytes,
    status: bytes,
    body: Sequence[Frame],
    final: bool,
    meta: bytes = b"",
) -> list[Frame] | None:
    """Frames of a reply to a client, or ``None`` when its dialect cannot carry a partial reply.

    MDP dialects have no status frame: a reply whose status is not 200 carries the status as its first body
    frame, as MMI replies do.
    """
    if not final and not dialect.streams:
        return None
    prefix = PREFIX[dialect, False]
    if dialect is Dialect.GDP:
        if final:
            return [*prefix, _GDP_FINAL, request_id or b"", status, meta, *body]
        return [*prefix, _GDP_PARTIAL, request_id or b"", *body]
    if status != OK:
        body = [status, *body]
    if dialect is Dialect.MDP01:
        return [*prefix, description, *body]
    command = command_byte(dialect, FINAL if final else PARTIAL, False)
    if dialect is Dialect.MAJORTOMO:
        return [*prefix, command, *body]
    return [*prefix, command, description, *body]


def worker_request(
    dialect: Dialect, task_id: bytes, description: bytes, body: Sequence[Frame], fields: bytes = b""
) -> list[Frame]:
    """Frames that hand a task to a worker; GDP ``fields`` (see
    :func:`~generaldomo.sansio.wire.fields.request_fields`) make it a REQUEST+FIELDS, for workers that understand
    one. MDP workers see the task id as the client address."""
    if dialect is Dialect.GDP:
        if fields:
            return [GDP_WORKER, _GDP_WORKER_FIELDS, task_id, description, fields, *body]
        return [GDP_WORKER, _GDP_WORKER_REQUEST, task_id, description, *body]
    return [*_MDP_WORKER_REQUEST[dialect], task_id, b"", *body]


def worker_cancel(task_id: bytes) -> list[Frame]:
    """The broker's CANCEL to a GDP worker that understands one: nobody waits for ``task_id``'s result."""
    return [GDP_WORKER, _GDP_WORKER_CANCEL, task_id]


def worker_command(dialect: Dialect, command: str) -> list[Frame]:
    """Frames of an argument-less worker command (HEARTBEAT, DISCONNECT)."""
    return [*PREFIX[dialect, True], command_byte(dialect, command, True)]


def worker_heartbeat(instance: bytes, taken: Sequence[bytes]) -> list[Frame]:
    """A hand-over broker's HEARTBEAT to a generaldomo worker: its instance, then the nonces of the results it
    took from the worker since its last heartbeat (at most :data:`~generaldomo.sansio.wire.dialects.MAX_TAKEN`)."""
    return [GDP_WORKER, _GDP_WORKER_HEARTBEAT, instance, *taken]

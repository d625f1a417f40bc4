"""What the broker reads: a peer's frames turned into an event, by one reader per dialect and role.

This module owns the reading of every message a peer sends the broker (see ``docs/protocol.rst``): :func:`parse`
finds the dialect and role by the header frame (:data:`~generaldomo.sansio.wire.dialects.HEADERS`) and hands
the rest to that pair's reader in :data:`READERS`. Every field is checked against its bounds in
:mod:`generaldomo.sansio.wire.limits` as it is read: beyond them the message is Malformed. A GDP request whose
id is within bounds carries it in the Malformed event (so the broker can answer 400), and a worker's message
says it is one (so the broker can drop that worker). Frames arrive without the ROUTER identity frame, or
already unpacked from a SERVER message. It knows nothing of sockets, of clocks, or of what the broker decides
to do with an event; what the broker writes is :mod:`generaldomo.sansio.wire.writers`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from generaldomo.sansio.wire.dialects import (
    CANCEL_BYTE,
    DISCONNECT,
    FIELDS_REQUEST,
    FINAL,
    HANDOVER,
    HEADERS,
    HEARTBEAT,
    PARTIAL,
    READY,
    REQUEST,
    RESUME,
    WORKER_NAMES,
    command_byte,
)
from generaldomo.sansio.wire.events import (
    ClientCancel,
    ClientHeartbeat,
    ClientRequest,
    Dialect,
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
from generaldomo.sansio.wire.fields import Fields, parse_fields
from generaldomo.sansio.wire.inner_frames import read_worker_info
from generaldomo.sansio.wire.limits import DESCRIPTION, REASKED, REQUEST_ID, STATUS, TASK_ID, Field
from generaldomo.sansio.wire.statuses import OK, is_status

__all__ = ["READERS", "Reader", "parse"]

Reader = Callable[[Sequence[Frame]], Event]  # the frames after the header -> the event they are

# the hot path compares lengths inline (each name Final: a static of the compiled core, not a dictionary lookup)
_ID_LOW: Final = REQUEST_ID.low
_ID_HIGH: Final = REQUEST_ID.high
_DESCRIPTION_LOW: Final = DESCRIPTION.low
_DESCRIPTION_HIGH: Final = DESCRIPTION.high
_TASK_LOW: Final = TASK_ID.low
_TASK_HIGH: Final = TASK_ID.high
_GDP_REQUEST: Final = command_byte(Dialect.GDP, REQUEST, worker=False)
_GDP_FIELDS_REQUEST: Final = command_byte(Dialect.GDP, FIELDS_REQUEST, worker=False)
_GDP_HEARTBEAT: Final = command_byte(Dialect.GDP, HEARTBEAT, worker=False)
_GDP_CLIENT_CONTROL: Final = (_GDP_HEARTBEAT, CANCEL_BYTE)


def parse(frames: Sequence[Frame]) -> Event:
    """Turn the frames a peer sent to the broker into an event; never raises. Body frames are passed on as they
    are (bytes-like); every other field is bytes."""
    if not frames:
        return Malformed("empty message")
    empty = frames[0] == b""
    start = 1 if empty else 0
    if len(frames) <= start:
        return Malformed("no protocol header")
    header = frames[start]
    reader = _BY_HEADER.get((empty, header))
    if reader is None:
        return Malformed(f"unknown protocol header {bytes(header[:16])!r}")
    return reader(frames[start + 1 :])


def _outside(field: Field, frame: Frame) -> str | None:
    """Why ``frame`` breaks ``field``'s bounds, or None when it is within them."""
    return None if field.fits(frame) else field.refusal(len(frame))


def _field(frame: Frame) -> bytes:
    """A frame the broker reads (an id, a description, a status) as bytes: the links may hand over a large frame
    as a read-only memoryview of the message received (payloads pass on uncopied); such a field is copied."""
    return frame if type(frame) is bytes else bytes(frame)


# ---------------------------------------------------------------------------------------------------- clients


def _gdp_client(rest: Sequence[Frame]) -> Event:
    """A generaldomo client's REQUEST, REQUEST+FIELDS, HEARTBEAT or CANCEL."""
    if rest and rest[0] in _GDP_CLIENT_CONTROL:
        return _gdp_control(rest[0], rest[1:])
    if rest and rest[0] == _GDP_FIELDS_REQUEST:
        if len(rest) < 4:
            return Malformed("generaldomo request with fields needs a request id, a description and fields")
        fields = parse_fields(_field(rest[3]))
        if isinstance(fields, str):
            return Malformed(fields, request_id=_field(rest[1]) if _ID_LOW <= len(rest[1]) <= _ID_HIGH else None)
        return _client_request(Dialect.GDP, rest[1], rest[2], rest[4:], fields)
    if not rest or rest[0] != _GDP_REQUEST:
        return Malformed(f"{Dialect.GDP.value} client sent an unknown command")
    if len(rest) < 3:
        return Malformed("generaldomo request needs a request id and a description")
    return _client_request(Dialect.GDP, rest[1], rest[2], rest[3:])


def _gdp_control(command: Frame, args: Sequence[Frame]) -> Event:
    """A generaldomo client's HEARTBEAT (with the ids it re-asks about) or CANCEL."""
    if command == _GDP_HEARTBEAT:
        if len(args) > REASKED.high:
            return Malformed(REASKED.refusal(len(args)))
        for request_id in args:
            if (wrong := _outside(REQUEST_ID, request_id)) is not None:
                return Malformed(wrong)
        return ClientHeartbeat(Dialect.GDP, tuple(map(_field, args)))
    if len(args) != 1:
        return Malformed(f"generaldomo CANCEL with {len(args)} argument frames")
    if (wrong := _outside(REQUEST_ID, args[0])) is not None:
        return Malformed(wrong)
    return ClientCancel(Dialect.GDP, _field(args[0]))


def _mdp01_client(rest: Sequence[Frame]) -> Event:
    """An MDP/0.1 client's request: a service frame and the body, no command byte."""
    if not rest:
        return Malformed("MDP/0.1 request without a service frame")
    return _client_request(Dialect.MDP01, None, rest[0], rest[1:])


def _mdp02_client(dialect: Dialect) -> Reader:
    """The reader of an MDP/0.2 (or majortomo) client's REQUEST: a command byte, a service frame, the body."""
    request = command_byte(dialect, REQUEST, worker=False)

    def read(rest: Sequence[Frame]) -> Event:
        if not rest or rest[0] != request:
            return Malformed(f"{dialect.value} client sent an unknown command")
        if len(rest) < 2:
            return Malformed(f"{dialect.value} request without a service frame")
        return _client_request(dialect, None, rest[1], rest[2:])

    return read


def _client_request(
    dialect: Dialect, request_id: Frame | None, description: Frame, body: Sequence[Frame], fields: Fields | None = None
) -> Event:
    if request_id is not None:
        if not _ID_LOW <= len(request_id) <= _ID_HIGH:
            return Malformed(REQUEST_ID.refusal(len(request_id)))
        if type(request_id) is not bytes:  # (_field, inline: the hot path)
            request_id = bytes(request_id)
    if not _DESCRIPTION_LOW <= len(description) <= _DESCRIPTION_HIGH:
        return Malformed(DESCRIPTION.refusal(len(description)), request_id=request_id)
    if type(description) is not bytes:
        description = bytes(description)
    if fields is None:
        return ClientRequest(dialect, request_id, description, tuple(body))
    return ClientRequest(dialect, request_id, description, tuple(body), *fields)


# ---------------------------------------------------------------------------------------------------- workers

_GDP_WORKER_NAMES: Final = WORKER_NAMES[Dialect.GDP]


def _gdp_worker(rest: Sequence[Frame]) -> Event:
    """A generaldomo worker's READY (plain, with peer info, or with a result), HEARTBEAT, PARTIAL, RESUME,
    HANDOVER or DISCONNECT."""
    dialect = Dialect.GDP
    command = _GDP_WORKER_NAMES.get(rest[0]) if rest else None
    args = rest[1:]
    if command == READY:
        return _gdp_ready(args)
    if command == HEARTBEAT:
        return WorkerHeartbeat(dialect)
    if command == RESUME:
        if args and not _DESCRIPTION_LOW <= len(args[0]) <= _DESCRIPTION_HIGH:
            return Malformed(DESCRIPTION.refusal(len(args[0])), worker=dialect)
        if len(args) >= 2 and not _TASK_LOW <= len(args[1]) <= _TASK_HIGH:
            return Malformed(TASK_ID.refusal(len(args[1])), worker=dialect)
        if len(args) == 2:
            return WorkerResume(dialect, _field(args[0]), _field(args[1]))
        if len(args) == 3 and (info := read_worker_info(_field(args[2]))) is not None:
            return WorkerResume(dialect, _field(args[0]), _field(args[1]), *info)
        return Malformed(f"generaldomo RESUME with {len(args)} argument frames (or bad peer info)")
    if command == HANDOVER:
        if len(args) < 2:
            return Malformed("generaldomo HANDOVER without a task id and a status")
        status = _field(args[1])
        if not _TASK_LOW <= len(args[0]) <= _TASK_HIGH or not is_status(status):
            return Malformed("generaldomo HANDOVER with a task id or a status out of bounds", worker=dialect)
        return WorkerHandover(dialect, _field(args[0]), status, tuple(args[2:]))
    if command == DISCONNECT:
        return WorkerDisconnect(dialect)
    if command == PARTIAL:
        if not args:
            return Malformed("generaldomo PARTIAL without a task id", worker=dialect)
        return _worker_reply(dialect, args[0], OK, args[1:], False)
    return _unknown_worker_command(dialect, rest)


def _gdp_ready(args: Sequence[Frame]) -> Event:
    """A generaldomo READY: plain, with peer info, or carrying a result."""
    dialect = Dialect.GDP
    if args and not _DESCRIPTION_LOW <= len(args[0]) <= _DESCRIPTION_HIGH:
        return Malformed(DESCRIPTION.refusal(len(args[0])), worker=dialect)
    if len(args) >= 3:
        status = _field(args[2])
        if not is_status(status):
            return Malformed(f"a worker's status must be {STATUS.bounds}, not {len(status)} bytes", worker=dialect)
        return _worker_reply(dialect, args[1], status, args[3:], True, _field(args[0]))
    if len(args) == 2 and (info := read_worker_info(_field(args[1]))) is not None:
        return WorkerReady(dialect, _field(args[0]), *info)
    return _plain_ready(dialect, args)


def _mdp_worker(dialect: Dialect) -> Reader:
    """The reader of an MDP worker's READY, HEARTBEAT, DISCONNECT, PARTIAL or FINAL (each of the MDP dialects:
    the same layouts, their own bytes)."""
    names = WORKER_NAMES[dialect]

    def read(rest: Sequence[Frame]) -> Event:
        command = names.get(rest[0]) if rest else None
        args = rest[1:]
        if command == READY:
            if args and not _DESCRIPTION_LOW <= len(args[0]) <= _DESCRIPTION_HIGH:
                return Malformed(DESCRIPTION.refusal(len(args[0])), worker=dialect)
            return _plain_ready(dialect, args)
        if command == HEARTBEAT:
            return WorkerHeartbeat(dialect)
        if command == DISCONNECT:
            return WorkerDisconnect(dialect)
        if command == PARTIAL or command == FINAL:
            if len(args) < 2 or args[1] != b"":
                return Malformed(f"{dialect.value} {command} without an address and an empty frame", worker=dialect)
            return _worker_reply(dialect, args[0], OK, args[2:], command == FINAL)
        return _unknown_worker_command(dialect, rest)

    return read


def _plain_ready(dialect: Dialect, args: Sequence[Frame]) -> Event:
    if len(args) != 1:
        return Malformed(f"{dialect.value} READY with {len(args)} argument frames", worker=dialect)
    return WorkerReady(dialect, _field(args[0]))


def _worker_reply(
    dialect: Dialect,
    task_id: Frame,
    status: bytes,
    body: Sequence[Frame],
    final: bool,
    description: bytes | None = None,
) -> Event:
    if not _TASK_LOW <= len(task_id) <= _TASK_HIGH:
        return Malformed(TASK_ID.refusal(len(task_id)), worker=dialect)
    task_id = task_id if type(task_id) is bytes else bytes(task_id)  # (_field, inline: the hot path)
    return WorkerReply(dialect, task_id, status, tuple(body), final, description)


def _unknown_worker_command(dialect: Dialect, rest: Sequence[Frame]) -> Malformed:
    return Malformed(
        f"{dialect.value} worker sent an unknown or unexpected command {bytes(rest[0][:4]) if rest else b''!r}",
        worker=dialect,
    )


# One reader per dialect and role (is the sender a worker?); every pair HEADERS knows has one.
READERS: Final[dict[tuple[Dialect, bool], Reader]] = {
    (Dialect.GDP, False): _gdp_client,
    (Dialect.GDP, True): _gdp_worker,
    (Dialect.MDP01, False): _mdp01_client,
    **{(dialect, False): _mdp02_client(dialect) for dialect in (Dialect.MDP02, Dialect.MAJORTOMO)},
    **{(dialect, True): _mdp_worker(dialect) for dialect in (Dialect.MDP01, Dialect.MDP02, Dialect.MAJORTOMO)},
}
# one lookup per message, by the frames themselves
_BY_HEADER: Final[dict[tuple[bool, Frame], Reader]] = {key: READERS[known] for key, known in HEADERS.items()}

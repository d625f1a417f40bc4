"""Byte layouts of every message, in every dialect the broker speaks.

This module owns the frame layouts (see ``docs/protocol.rst``): it turns frames into :mod:`generaldomo.sansio.events`
and builds the frames the broker and the generaldomo peers send. The tables below are the protocol; functions
only read them. It knows nothing of sockets (frames arrive without the ROUTER identity frame, or already
unpacked from a SERVER message), of clocks, or of what the broker decides to do with an event.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from typing import Any, Final

from generaldomo.sansio.events import (
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
from generaldomo.sansio.peer_events import (
    BrokerDisconnect,
    BrokerHeartbeat,
    FinalReply,
    HeartbeatAnswer,
    PartialReply,
    TaskRequest,
    ToClient,
    ToWorker,
)

_TIMING = struct.Struct(">dd")
GDP_CLIENT: Final = b"GDPC01"
GDP_WORKER: Final = b"GDPW01"

# Status codes carried by generaldomo FINAL replies (and by MMI replies in every dialect).
OK: Final = b"200"
BAD_REQUEST: Final = b"400"
NOT_FOUND: Final = b"404"
FORBIDDEN: Final = b"403"
TOO_LARGE: Final = b"413"
OVER_BUDGET: Final = b"429"
WORKER_ERROR: Final = b"500"
NOT_IMPLEMENTED: Final = b"501"
BAD_GATEWAY: Final = b"502"  # the bridge: the upstream broker's reply was malformed
UNAVAILABLE: Final = b"503"
EXPIRED: Final = b"504"

# Command names, shared by all dialects; each dialect gives them its own byte.
READY, REQUEST, PARTIAL, FINAL, HEARTBEAT, DISCONNECT = "READY REQUEST PARTIAL FINAL HEARTBEAT DISCONNECT".split()
CANCEL: Final = "CANCEL"
RESUME: Final = "RESUME"  # a GDP worker registers while it runs a task (hand-over)
HANDOVER: Final = "HANDOVER"  # a GDP worker hands over the result of a task of an earlier registration
MAX_REASKED: Final = 64  # request ids one client HEARTBEAT may ask about
MAX_TAKEN: Final = 1024  # results one broker HEARTBEAT to a worker acknowledges

# (leading empty frame?, header) -> (dialect, is the sender a worker?)
HEADERS: Final[dict[tuple[bool, bytes], tuple[Dialect, bool]]] = {
    (False, GDP_CLIENT): (Dialect.GDP, False),
    (False, GDP_WORKER): (Dialect.GDP, True),
    (True, b"MDPC01"): (Dialect.MDP01, False),
    (True, b"MDPW01"): (Dialect.MDP01, True),
    (False, b"MDPC02"): (Dialect.MDP02, False),
    (False, b"MDPW02"): (Dialect.MDP02, True),
    (True, b"MDPC02"): (Dialect.MAJORTOMO, False),
    (True, b"MDPW02"): (Dialect.MAJORTOMO, True),
}
# The frames every message of a dialect starts with, per role (client, worker).
PREFIX: Final[dict[tuple[Dialect, bool], tuple[bytes, ...]]] = {
    (dialect, worker): (b"", header) if empty else (header,) for (empty, header), (dialect, worker) in HEADERS.items()
}

_MDP02_WORKER = {READY: 1, REQUEST: 2, PARTIAL: 3, FINAL: 4, HEARTBEAT: 5, DISCONNECT: 6}
# Worker command bytes. generaldomo workers return results inside READY, so they have no FINAL.
WORKER_COMMANDS: Final[dict[Dialect, dict[str, int]]] = {
    Dialect.GDP: {READY: 1, REQUEST: 2, PARTIAL: 3, HEARTBEAT: 5, DISCONNECT: 6, RESUME: 7, HANDOVER: 8},
    Dialect.MDP01: {READY: 1, REQUEST: 2, FINAL: 3, HEARTBEAT: 4, DISCONNECT: 5},
    Dialect.MDP02: _MDP02_WORKER,
    Dialect.MAJORTOMO: _MDP02_WORKER,
}
# Client command bytes. MDP/0.1 has no client command byte at all.
CLIENT_COMMANDS: Final[dict[Dialect, dict[str, int]]] = {
    Dialect.GDP: {REQUEST: 1, PARTIAL: 2, FINAL: 3, HEARTBEAT: 4, CANCEL: 5},
    Dialect.MDP02: {REQUEST: 1, PARTIAL: 2, FINAL: 3},
    Dialect.MAJORTOMO: {REQUEST: 2, PARTIAL: 3, FINAL: 4},
}
_WORKER_NAMES = {d: {code.to_bytes(1, "big"): name for name, code in t.items()} for d, t in WORKER_COMMANDS.items()}


_BYTES: Final[dict[tuple[Dialect, str, bool], bytes]] = {
    (dialect, name, worker): code.to_bytes(1, "big")
    for worker, tables in ((True, WORKER_COMMANDS), (False, CLIENT_COMMANDS))
    for dialect, table in tables.items()
    for name, code in table.items()
}  # every command's byte, made once: the hot path looks them up


def _byte(dialect: Dialect, command: str, worker: bool) -> bytes:
    return _BYTES[dialect, command, worker]


# ---------------------------------------------------------------------------------------------------- parsing


def parse(frames: Sequence[bytes]) -> Event:
    """Turn the frames a peer sent to the broker into an event; never raises."""
    if not frames:
        return Malformed("empty message")
    empty = frames[0] == b""
    start = 1 if empty else 0
    if len(frames) <= start:
        return Malformed("no protocol header")
    header = frames[start]
    known = HEADERS.get((empty, header))
    if known is None:
        return Malformed(f"unknown protocol header {bytes(header[:16])!r}")
    dialect, worker = known
    rest = frames[start + 1 :]
    if worker:
        return _parse_worker(dialect, rest)
    return _parse_client(dialect, rest)


def _parse_client(dialect: Dialect, rest: Sequence[bytes]) -> Event:
    if dialect is Dialect.MDP01:
        if not rest:
            return Malformed("MDP/0.1 request without a service frame")
        return ClientRequest(dialect, None, rest[0], tuple(rest[1:]))
    if dialect is Dialect.GDP and rest and rest[0] in _GDP_CLIENT_CONTROL:
        return _parse_gdp_control(rest[0], rest[1:])
    if not rest or rest[0] != _byte(dialect, REQUEST, worker=False):
        return Malformed(f"{dialect.value} client sent an unknown command")
    if dialect is Dialect.GDP:
        if len(rest) < 3:
            return Malformed("generaldomo request needs a request id and a description")
        return ClientRequest(dialect, rest[1], rest[2], tuple(rest[3:]))
    if len(rest) < 2:
        return Malformed(f"{dialect.value} request without a service frame")
    return ClientRequest(dialect, None, rest[1], tuple(rest[2:]))


_GDP_HEARTBEAT = _byte(Dialect.GDP, HEARTBEAT, worker=False)
_GDP_CANCEL = _byte(Dialect.GDP, CANCEL, worker=False)
_GDP_CLIENT_CONTROL = (_GDP_HEARTBEAT, _GDP_CANCEL)


def _parse_gdp_control(command: bytes, args: Sequence[bytes]) -> Event:
    """A generaldomo client's HEARTBEAT (with the ids it re-asks about) or CANCEL."""
    if command == _GDP_HEARTBEAT:
        if len(args) > MAX_REASKED:
            return Malformed(f"generaldomo HEARTBEAT asks about {len(args)} ids (at most {MAX_REASKED})")
        return ClientHeartbeat(Dialect.GDP, tuple(args))
    if len(args) != 1:
        return Malformed(f"generaldomo CANCEL with {len(args)} argument frames")
    return ClientCancel(Dialect.GDP, args[0])


def _parse_worker(dialect: Dialect, rest: Sequence[bytes]) -> Event:
    command = _WORKER_NAMES[dialect].get(rest[0]) if rest else None
    args = rest[1:]
    if command == READY:
        if dialect is Dialect.GDP and len(args) >= 3:
            return WorkerReply(dialect, args[1], args[2], tuple(args[3:]), True, args[0])
        if dialect is Dialect.GDP and len(args) == 2 and (info := parse_worker_info(args[1])) is not None:
            return WorkerReady(dialect, args[0], *info)
        if len(args) != 1:
            return Malformed(f"{dialect.value} READY with {len(args)} argument frames")
        return WorkerReady(dialect, args[0])
    if command == HEARTBEAT:
        return WorkerHeartbeat(dialect)
    if command == RESUME:  # (GDP only: the other dialects have no such command byte)
        if len(args) == 2:
            return WorkerResume(dialect, args[0], args[1])
        if len(args) == 3 and (info := parse_worker_info(args[2])) is not None:
            return WorkerResume(dialect, args[0], args[1], *info)
        return Malformed(f"generaldomo RESUME with {len(args)} argument frames (or bad peer info)")
    if command == HANDOVER:
        if len(args) < 2:
            return Malformed("generaldomo HANDOVER without a task id and a status")
        return WorkerHandover(dialect, args[0], args[1], tuple(args[2:]))
    if command == DISCONNECT:
        return WorkerDisconnect(dialect)
    if command in (PARTIAL, FINAL):
        final = command == FINAL
        if dialect is Dialect.GDP:
            if not args:
                return Malformed("generaldomo PARTIAL without a task id")
            return WorkerReply(dialect, args[0], OK, tuple(args[1:]), final)
        if len(args) < 2 or args[1] != b"":
            return Malformed(f"{dialect.value} {command} without an address and an empty frame")
        return WorkerReply(dialect, args[0], OK, tuple(args[2:]), final)
    return Malformed(
        f"{dialect.value} worker sent an unknown or unexpected command {bytes(rest[0][:4]) if rest else b''!r}"
    )


# A plain generaldomo READY may end with one peer-info frame: a JSON object of at most this many bytes, whose
# keys "host" (printable text, at most MAX_HOST characters) and "pid" (a whole number) say where the worker runs.
MAX_INFO: Final = 1024
MAX_HOST: Final = 255
_MAX_PID = 2**32


def parse_worker_info(frame: bytes) -> tuple[str | None, int | None] | None:
    """``(host, pid)`` of a peer-info frame (None for a value that is absent or not valid), or None if the
    frame is not a JSON object of at most :data:`MAX_INFO` bytes; never raises."""
    if len(frame) > MAX_INFO or not frame.startswith(b"{"):
        return None
    try:
        info: Any = json.loads(frame)
    except (ValueError, RecursionError):  # not JSON (or not UTF-8), or nested too deep
        return None
    if not isinstance(info, dict):
        return None
    host, pid = info.get("host"), info.get("pid")
    valid_host = isinstance(host, str) and 0 < len(host) <= MAX_HOST and host.isprintable()
    valid_pid = isinstance(pid, int) and not isinstance(pid, bool) and 0 < pid < _MAX_PID
    return (host if valid_host else None), (pid if valid_pid else None)


def worker_info(host: str | None, pid: int | None) -> bytes:
    """The peer-info frame of a plain READY: the worker's host name and process id (absent ones left out). A host
    the broker would not take (not printable, longer than :data:`MAX_HOST`, or so long once escaped that the frame
    would exceed :data:`MAX_INFO`) is left out too, so that the frame never makes the READY malformed."""
    if host is not None and not (0 < len(host) <= MAX_HOST and host.isprintable()):
        host = None
    frame = _info_frame(host, pid)
    return frame if len(frame) <= MAX_INFO else _info_frame(None, pid)


def _info_frame(host: str | None, pid: int | None) -> bytes:
    info = {key: value for key, value in (("host", host), ("pid", pid)) if value is not None}
    return json.dumps(info, separators=(",", ":")).encode()


# ---------------------------------------------------------------------------------------------------- building


def timing(queued: float, served: float) -> bytes:
    """The timing frame of a generaldomo FINAL: seconds queued and seconds with the worker, as two doubles."""
    return _TIMING.pack(queued, served)


def parse_timing(frame: bytes) -> tuple[float, float] | None:
    """``(queued, served)`` seconds from a timing frame, or None if it carries none."""
    return _TIMING.unpack(frame) if len(frame) == _TIMING.size else None


def client_reply(
    dialect: Dialect,
    request_id: bytes | None,
    description: bytes,
    status: bytes,
    body: Sequence[bytes],
    final: bool,
    meta: bytes = b"",
) -> list[bytes] | None:
    """Frames of a reply to a client, or ``None`` when its dialect cannot carry a partial reply.

    MDP dialects have no status frame: a reply whose status is not 200 carries the status as its first body
    frame, as MMI replies do.
    """
    if not final and not dialect.streams:
        return None
    prefix = PREFIX[dialect, False]
    if dialect is Dialect.GDP:
        if final:
            return [*prefix, _byte(dialect, FINAL, False), request_id or b"", status, meta, *body]
        return [*prefix, _byte(dialect, PARTIAL, False), request_id or b"", *body]
    if status != OK:
        body = [status, *body]
    if dialect is Dialect.MDP01:
        return [*prefix, description, *body]
    command = _byte(dialect, FINAL if final else PARTIAL, False)
    if dialect is Dialect.MAJORTOMO:
        return [*prefix, command, *body]
    return [*prefix, command, description, *body]


def worker_request(dialect: Dialect, task_id: bytes, description: bytes, body: Sequence[bytes]) -> list[bytes]:
    """Frames that hand a task to a worker. MDP workers see the task id as the client address."""
    command = _byte(dialect, REQUEST, True)
    if dialect is Dialect.GDP:
        return [GDP_WORKER, command, task_id, description, *body]
    return [*PREFIX[dialect, True], command, task_id, b"", *body]


def worker_command(dialect: Dialect, command: str) -> list[bytes]:
    """Frames of an argument-less worker command (HEARTBEAT, DISCONNECT)."""
    return [*PREFIX[dialect, True], _byte(dialect, command, True)]


def worker_heartbeat(instance: bytes, taken: Sequence[bytes]) -> list[bytes]:
    """A hand-over broker's HEARTBEAT to a generaldomo worker: its instance, then the nonces of the results it
    took from the worker since its last heartbeat (at most :data:`MAX_TAKEN`)."""
    return [GDP_WORKER, _GDP_WORKER_HEARTBEAT, instance, *taken]


def broker_heartbeat(instance: bytes, unknown: Sequence[bytes] = ()) -> list[bytes]:
    """The broker's answer to a client HEARTBEAT: its instance, then the asked ids it knows nothing of."""
    return [GDP_CLIENT, _GDP_HEARTBEAT, instance, *unknown]


# ------------------------------------------------------------------------------ the generaldomo peers' side

MAX_ASKED: Final = 64  # request ids one client HEARTBEAT may ask about
CANCEL_BYTE: Final = b"\x05"  # a GDP client's CANCEL (no other dialect has one)
_FINAL_BYTE = _byte(Dialect.GDP, FINAL, False)
_GDP_WORKER_HEARTBEAT = _byte(Dialect.GDP, HEARTBEAT, True)
_PARTIAL_BYTE = _byte(Dialect.GDP, PARTIAL, False)
_HEARTBEAT_BYTE = _byte(Dialect.GDP, HEARTBEAT, False)


def gdp_request(request_id: bytes, description: bytes, body: Sequence[bytes]) -> list[bytes]:
    """Frames a generaldomo client sends to ask for a task."""
    return [GDP_CLIENT, _byte(Dialect.GDP, REQUEST, False), request_id, description, *body]


def gdp_client_heartbeat(instance: bytes | None = None, ids: Sequence[bytes] = ()) -> list[bytes]:
    """A HEARTBEAT: a client's (no instance), asking about ``ids``; or the broker's answer naming its instance
    and, in ``ids``, the asked request ids it does not know."""
    frames = [GDP_CLIENT, _byte(Dialect.GDP, HEARTBEAT, False)]
    return [*frames, *ids] if instance is None else [*frames, instance, *ids]


def gdp_cancel(request_id: bytes) -> list[bytes]:
    """Frames of a generaldomo client's CANCEL: it no longer wants the answer to ``request_id``."""
    return [GDP_CLIENT, CANCEL_BYTE, request_id]


def gdp_ready(
    description: bytes, result: tuple[bytes, bytes, Sequence[bytes]] | None = None, info: bytes | None = None
) -> list[bytes]:
    """Frames of a generaldomo worker's READY, carrying ``(task_id, status, body)`` of its last task if any, or
    else the peer-info frame ``info`` (see :func:`worker_info`) if given."""
    frames = [GDP_WORKER, _byte(Dialect.GDP, READY, True), description]
    if result is not None:
        task_id, status, body = result
        frames += [task_id, status, *body]
    elif info is not None:
        frames.append(info)
    return frames


def gdp_resume(description: bytes, task_id: bytes, info: bytes | None = None) -> list[bytes]:
    """Frames of a generaldomo worker's RESUME: it registers for ``description`` while it runs ``task_id``."""
    frames = [GDP_WORKER, _byte(Dialect.GDP, RESUME, True), description, task_id]
    return frames if info is None else [*frames, info]


def gdp_handover(task_id: bytes, status: bytes, body: Sequence[bytes]) -> list[bytes]:
    """Frames of a generaldomo worker's HANDOVER: the result of a task of an earlier registration."""
    return [GDP_WORKER, _byte(Dialect.GDP, HANDOVER, True), task_id, status, *body]


def gdp_partial(task_id: bytes, body: Sequence[bytes]) -> list[bytes]:
    """Frames of a generaldomo worker's partial result."""
    return [GDP_WORKER, _byte(Dialect.GDP, PARTIAL, True), task_id, *body]


def gdp_worker_command(command: str) -> list[bytes]:
    """Frames of a generaldomo worker's HEARTBEAT or DISCONNECT."""
    return worker_command(Dialect.GDP, command)


def read_client_message(frames: Sequence[bytes]) -> ToClient:
    """What a broker message to a generaldomo client says; never raises."""
    if len(frames) < 3 or frames[0] != GDP_CLIENT:
        return Malformed("not a generaldomo client message")
    command = frames[1]
    if command == _FINAL_BYTE and len(frames) >= 5:
        return FinalReply(frames[2], frames[3], frames[4], tuple(frames[5:]))
    if command == _PARTIAL_BYTE:
        return PartialReply(frames[2], tuple(frames[3:]))
    if command == _HEARTBEAT_BYTE:
        return HeartbeatAnswer(frames[2], tuple(frames[3 : 3 + MAX_ASKED]))
    return Malformed(f"unknown generaldomo client command {bytes(command[:4])!r}")


_WORKER_READS: Final[dict[str, ToWorker]] = {HEARTBEAT: BrokerHeartbeat(), DISCONNECT: BrokerDisconnect()}


def read_worker_message(frames: Sequence[bytes]) -> ToWorker:
    """What a broker message to a generaldomo worker says; never raises."""
    if len(frames) < 2 or frames[0] != GDP_WORKER:
        return Malformed("not a generaldomo worker message")
    command = _WORKER_NAMES[Dialect.GDP].get(frames[1])
    if command == REQUEST:
        if len(frames) < 4:
            return Malformed("generaldomo REQUEST without a task id and a description")
        return TaskRequest(frames[2], frames[3], tuple(frames[4:]))
    if command == HEARTBEAT and len(frames) > 2:
        return BrokerHeartbeat(frames[2], tuple(frames[3 : 3 + MAX_TAKEN]))
    known = _WORKER_READS.get(command or "")
    return known if known is not None else Malformed(f"unexpected generaldomo worker command {command}")


# The tuple forms the broker's tests and benchmarks read (peers use the two readers above).


def parse_client_reply(
    frames: Sequence[bytes],
) -> tuple[bytes, bytes | None, bytes, tuple[bytes, ...]] | None:
    """``(request_id, status, timing, body)`` of a reply to a generaldomo client (status None: partial)."""
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


def parse_worker_command(frames: Sequence[bytes]) -> tuple[str, tuple[bytes, ...]] | None:
    """``(command, arguments)`` of a broker message to a generaldomo worker, or None if it is not one."""
    message = read_worker_message(frames)
    if isinstance(message, TaskRequest):
        return REQUEST, (message.task_id, message.description, *message.body)
    if isinstance(message, Malformed):
        return None
    return (HEARTBEAT if isinstance(message, BrokerHeartbeat) else DISCONNECT), ()


# --------------------------------------------------------------------- MDP/0.1 client side (used by the bridge)


def mdp_client_request(service: bytes, body: Sequence[bytes]) -> list[bytes]:
    """Frames an MDP/0.1 client sends from a DEALER socket (the empty frame stands in for REQ's delimiter)."""
    return [*PREFIX[Dialect.MDP01, False], service, *body]


def parse_mdp_client_reply(frames: Sequence[bytes]) -> tuple[bytes, tuple[bytes, ...]] | None:
    """``(service, body)`` of an MDP/0.1 broker's reply as a DEALER receives it, or None if it is not one."""
    prefix = PREFIX[Dialect.MDP01, False]
    if len(frames) <= len(prefix) or tuple(frames[: len(prefix)]) != prefix:
        return None
    return frames[len(prefix)], tuple(frames[len(prefix) + 1 :])

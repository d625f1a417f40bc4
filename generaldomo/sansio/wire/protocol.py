"""Byte layouts of every message, in every dialect the broker speaks.

This module owns the frame layouts (see ``docs/protocol.rst``): it turns frames into
:mod:`generaldomo.sansio.wire.events` and builds the frames the broker and the generaldomo peers send. The tables below
are the protocol; functions only read them. It knows nothing of sockets (frames arrive without the ROUTER identity
frame, or already unpacked from a SERVER message), of clocks, or of what the broker decides to do with an event.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Sequence
from typing import Any, Final

from generaldomo.errors import WireJSONError
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
from generaldomo.sansio.wire.limits import (
    DEADLINE_MS,
    DESCRIPTION,
    FIELDS_FRAME,
    HOST,
    INSTANCE,
    PEER_INFO,
    PID,
    PRIORITY,
    REASKED,
    REQUEST_ID,
    STATUS,
    TAKEN,
    TASK_ID,
    TENANT,
    Field,
)
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
from generaldomo.sansio.wire.wirejson import loads as json_loads

__all__ = [
    "BAD_GATEWAY",
    "BAD_REQUEST",
    "CANCEL",
    "CANCEL_BYTE",
    "CLIENT_COMMANDS",
    "EXPIRED",
    "FEATURES",
    "FIELDS_REQUEST",
    "FIELD_DEADLINE",
    "FIELD_FLAGS",
    "FIELD_PRIORITY",
    "FIELD_TENANT",
    "FLAGS",
    "FLAG_DETACHED",
    "FLAG_KNOWN_SERVICE",
    "FORBIDDEN",
    "GDP_CLIENT",
    "GDP_WORKER",
    "HANDOVER",
    "HEADERS",
    "MAX_DEADLINE_MS",
    "MAX_FIELDS",
    "MAX_HOST",
    "MAX_INFO",
    "MAX_PRIORITY",
    "MAX_REASKED",
    "MAX_RETRY_AFTER_FRAME",
    "MAX_TAKEN",
    "MAX_TENANT",
    "MIN_PRIORITY",
    "NOT_FOUND",
    "NOT_IMPLEMENTED",
    "OK",
    "OVER_BUDGET",
    "PREFIX",
    "RESUME",
    "TOO_LARGE",
    "UNAVAILABLE",
    "WORKER_COMMANDS",
    "WORKER_ERROR",
    "Fields",
    "client_reply",
    "deadline_field",
    "gdp_cancel",
    "gdp_client_heartbeat",
    "gdp_handover",
    "gdp_partial",
    "gdp_ready",
    "gdp_request",
    "gdp_resume",
    "gdp_worker_command",
    "is_status",
    "mdp_client_request",
    "parse",
    "parse_broker_instance",
    "parse_client_reply",
    "parse_fields",
    "parse_mdp_client_reply",
    "parse_retry_after",
    "parse_timing",
    "parse_worker_command",
    "parse_worker_info",
    "read_client_message",
    "read_worker_info",
    "read_worker_message",
    "request_fields",
    "retry_after_frame",
    "timing",
    "worker_cancel",
    "worker_command",
    "worker_heartbeat",
    "worker_info",
    "worker_request",
]

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
FIELDS_REQUEST: Final = "REQUEST+FIELDS"  # a GDP REQUEST with a fields frame after the description
MAX_REASKED: Final = REASKED.high  # request ids one client HEARTBEAT may ask about
MAX_TAKEN: Final = TAKEN.high  # results one broker HEARTBEAT to a worker acknowledges

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
    Dialect.GDP: {
        READY: 1,
        REQUEST: 2,
        PARTIAL: 3,
        HEARTBEAT: 5,
        DISCONNECT: 6,
        FIELDS_REQUEST: 7,
        CANCEL: 8,
        RESUME: 9,
        HANDOVER: 10,
    },
    Dialect.MDP01: {READY: 1, REQUEST: 2, FINAL: 3, HEARTBEAT: 4, DISCONNECT: 5},
    Dialect.MDP02: _MDP02_WORKER,
    Dialect.MAJORTOMO: _MDP02_WORKER,
}
# Client command bytes. MDP/0.1 has no client command byte at all.
CLIENT_COMMANDS: Final[dict[Dialect, dict[str, int]]] = {
    Dialect.GDP: {REQUEST: 1, PARTIAL: 2, FINAL: 3, HEARTBEAT: 4, CANCEL: 5, FIELDS_REQUEST: 6},
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


# The GDP commands' bytes that the parsers and builders below compare or send, each named once.
_GDP_REQUEST = _byte(Dialect.GDP, REQUEST, worker=False)
_GDP_FIELDS_REQUEST = _byte(Dialect.GDP, FIELDS_REQUEST, worker=False)
_GDP_PARTIAL = _byte(Dialect.GDP, PARTIAL, worker=False)
_GDP_FINAL = _byte(Dialect.GDP, FINAL, worker=False)
_GDP_HEARTBEAT = _byte(Dialect.GDP, HEARTBEAT, worker=False)
CANCEL_BYTE: Final = _byte(Dialect.GDP, CANCEL, worker=False)  # a GDP client's CANCEL (no other dialect has one)
_GDP_CLIENT_CONTROL = (_GDP_HEARTBEAT, CANCEL_BYTE)
_GDP_WORKER_REQUEST = _byte(Dialect.GDP, REQUEST, worker=True)
_GDP_WORKER_FIELDS = _byte(Dialect.GDP, FIELDS_REQUEST, worker=True)
_GDP_WORKER_CANCEL = _byte(Dialect.GDP, CANCEL, worker=True)
_GDP_WORKER_HEARTBEAT = _byte(Dialect.GDP, HEARTBEAT, worker=True)


# ---------------------------------------------------------------------------------------------------- parsing
# Every field is checked against its bounds in generaldomo.sansio.wire.limits as it is read: beyond them the message
# is Malformed. A GDP request whose id is within bounds carries it in the Malformed event (so the broker can
# answer 400), and a worker's message says it is one (so the broker can drop that worker).


def _outside(field: Field, frame: bytes) -> str | None:
    """Why ``frame`` breaks ``field``'s bounds, or None when it is within them."""
    return None if field.fits(frame) else field.refusal(len(frame))


def is_status(frame: bytes) -> bool:
    """True when ``frame`` is a status: exactly 3 ASCII digits."""
    return len(frame) == STATUS.high and frame.isdigit() and frame.isascii()


def _field(frame: bytes) -> bytes:
    """A frame the broker reads (an id, a description, a status) as bytes: the links may hand over a large frame
    as a read-only memoryview of the message received (payloads pass on uncopied); such a field is copied."""
    return frame if type(frame) is bytes else bytes(frame)


def parse(frames: Sequence[bytes]) -> Event:
    """Turn the frames a peer sent to the broker into an event; never raises. Body frames are passed on as they
    are (bytes-like); every other field is bytes."""
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
        return _client_request(dialect, None, rest[0], rest[1:])
    if dialect is Dialect.GDP and rest and rest[0] in _GDP_CLIENT_CONTROL:
        return _parse_gdp_control(rest[0], rest[1:])
    if dialect is Dialect.GDP and rest and rest[0] == _GDP_FIELDS_REQUEST:
        if len(rest) < 4:
            return Malformed("generaldomo request with fields needs a request id, a description and fields")
        fields = parse_fields(_field(rest[3]))
        if isinstance(fields, str):
            return Malformed(fields, request_id=_field(rest[1]) if _ID_LOW <= len(rest[1]) <= _ID_HIGH else None)
        return _client_request(dialect, rest[1], rest[2], rest[4:], fields)
    if not rest or rest[0] != _byte(dialect, REQUEST, worker=False):
        return Malformed(f"{dialect.value} client sent an unknown command")
    if dialect is Dialect.GDP:
        if len(rest) < 3:
            return Malformed("generaldomo request needs a request id and a description")
        return _client_request(dialect, rest[1], rest[2], rest[3:])
    if len(rest) < 2:
        return Malformed(f"{dialect.value} request without a service frame")
    return _client_request(dialect, None, rest[1], rest[2:])


_ID_LOW, _ID_HIGH = REQUEST_ID.low, REQUEST_ID.high  # the hot path compares lengths inline
_DESCRIPTION_LOW, _DESCRIPTION_HIGH = DESCRIPTION.low, DESCRIPTION.high
_TASK_LOW, _TASK_HIGH = TASK_ID.low, TASK_ID.high


def _client_request(
    dialect: Dialect, request_id: bytes | None, description: bytes, body: Sequence[bytes], fields: Fields | None = None
) -> Event:
    if request_id is not None:
        if not _ID_LOW <= len(request_id) <= _ID_HIGH:
            return Malformed(REQUEST_ID.refusal(len(request_id)))
        request_id = _field(request_id)
    if not _DESCRIPTION_LOW <= len(description) <= _DESCRIPTION_HIGH:
        return Malformed(DESCRIPTION.refusal(len(description)), request_id=request_id)
    description = _field(description)
    if fields is None:
        return ClientRequest(dialect, request_id, description, tuple(body))
    return ClientRequest(dialect, request_id, description, tuple(body), *fields)


# ---------------------------------------------------------------------------------------------------- fields

# A request's fields (a GDP REQUEST+FIELDS, and the broker's REQUEST+FIELDS to a worker): entries of one tag
# byte, one length byte and that many value bytes, each tag at most once; unknown tags are skipped, so that
# fields can be added without a new layout.
FIELD_DEADLINE: Final = 0x01  # 4 bytes, unsigned big-endian: milliseconds the sender still waits for the answer
FIELD_PRIORITY: Final = 0x02  # 1 byte, signed: MIN_PRIORITY..MAX_PRIORITY, higher first (absent: 0)
FIELD_TENANT: Final = 0x03  # 1..MAX_TENANT bytes of printable UTF-8: who the request is for
FIELD_FLAGS: Final = 0x04  # 1 byte of FLAG_* bits; bits not listed are ignored (absent: 0)
FLAG_DETACHED: Final = 0x01  # kept queued while its client is silent: the answer is fetched later (by its id)
FLAG_KNOWN_SERVICE: Final = 0x02  # 404 at once for a service with no worker now and none recently
FLAGS: Final = FLAG_DETACHED | FLAG_KNOWN_SERVICE  # the bits this version knows
MAX_FIELDS: Final = FIELDS_FRAME.high  # bytes of a fields frame (these bounds: generaldomo.sansio.wire.limits)
MIN_PRIORITY: Final = PRIORITY.low
MAX_PRIORITY: Final = PRIORITY.high
MAX_TENANT: Final = TENANT.high
MAX_DEADLINE_MS: Final = DEADLINE_MS.high
_DEADLINE = struct.Struct(">I")
Fields = tuple[float | None, str | None, int, int]  # (deadline in seconds, tenant, priority, flags)


def request_fields(
    deadline: float | None = None, tenant: str | None = None, priority: int = 0, flags: int = 0
) -> bytes:
    """The fields frame of a request: ``deadline`` seconds from now (rounded up to a millisecond, clamped at
    :data:`MAX_DEADLINE_MS`; 0 or less: already past), ``tenant``, ``priority`` and ``flags`` (``FLAG_*``
    bits); ValueError on a tenant, priority or flag the broker would refuse. Empty when nothing is set (a plain
    REQUEST then does)."""
    frame = b"" if deadline is None else deadline_field(deadline)
    if flags:
        if flags & ~FLAGS:
            raise ValueError(f"unknown request flags {flags & ~FLAGS:#x}")
        frame += bytes((FIELD_FLAGS, 1, flags))
    if priority:
        if isinstance(priority, bool) or not isinstance(priority, int) or not MIN_PRIORITY <= priority <= MAX_PRIORITY:
            raise ValueError(f"a priority is a whole number from {MIN_PRIORITY} to {MAX_PRIORITY}, not {priority!r}")
        frame += bytes((FIELD_PRIORITY, 1)) + priority.to_bytes(1, "big", signed=True)
    if tenant is not None:
        encoded = tenant.encode()
        if not _good_tenant(tenant, encoded):
            raise ValueError(f"a tenant is 1 to {MAX_TENANT} bytes of printable text, not {tenant!r}")
        frame += bytes((FIELD_TENANT, len(encoded))) + encoded
    return frame


def deadline_field(seconds: float) -> bytes:
    """The fields frame that carries a deadline alone: ``seconds`` from now (see :func:`request_fields`)."""
    if seconds != seconds:
        raise ValueError("a deadline is a number of seconds, not NaN")
    ms = 0 if seconds <= 0 else MAX_DEADLINE_MS if seconds * 1000 >= MAX_DEADLINE_MS else math.ceil(seconds * 1000)
    return _DEADLINE_TAG + _DEADLINE.pack(ms)


_DEADLINE_TAG = bytes((FIELD_DEADLINE, 4))


def _good_tenant(tenant: str, encoded: bytes) -> bool:
    return 0 < len(encoded) <= MAX_TENANT and tenant.isprintable()


def parse_fields(frame: bytes) -> Fields | str:
    """``(deadline seconds, tenant, priority, flags)`` of a fields frame, or the reason it is malformed; never
    raises. Flag bits this version does not know are dropped (a newer client's, ignored)."""
    if len(frame) == 6 and frame[:2] == _DEADLINE_TAG:  # the deadline alone: what clients send by default
        return _DEADLINE.unpack_from(frame, 2)[0] / 1000.0, None, 0, 0
    if len(frame) > MAX_FIELDS:
        return f"request fields of {len(frame)} bytes (at most {MAX_FIELDS})"
    deadline: float | None = None
    tenant: str | None = None
    priority = flags = 0
    seen: set[int] = set()
    at, end = 0, len(frame)
    while at < end:
        if end - at < 2 or end - at - 2 < frame[at + 1]:
            return "truncated request field"
        tag, size = frame[at], frame[at + 1]
        value = frame[at + 2 : at + 2 + size]
        at += 2 + size
        if tag in seen:
            return f"request field {tag} given twice"
        seen.add(tag)
        if tag == FIELD_DEADLINE:
            if size != 4:
                return "a deadline field has 4 bytes"
            deadline = _DEADLINE.unpack(value)[0] / 1000.0
        elif tag == FIELD_PRIORITY:
            if size != 1:
                return "a priority field has 1 byte"
            priority = int.from_bytes(value, "big", signed=True)
            if not MIN_PRIORITY <= priority <= MAX_PRIORITY:
                return f"priority {priority} outside {MIN_PRIORITY}..{MAX_PRIORITY}"
        elif tag == FIELD_TENANT:
            try:
                tenant = bytes(value).decode()
            except UnicodeDecodeError:
                return "a tenant field is not UTF-8"
            if not _good_tenant(tenant, value):
                return "a tenant field is not 1 to 64 bytes of printable text"
        elif tag == FIELD_FLAGS:
            if size != 1:
                return "a flags field has 1 byte"
            flags = value[0] & FLAGS
    return deadline, tenant, priority, flags


def _parse_gdp_control(command: bytes, args: Sequence[bytes]) -> Event:
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


def _parse_worker(dialect: Dialect, rest: Sequence[bytes]) -> Event:
    command = _WORKER_NAMES[dialect].get(rest[0]) if rest else None
    args = rest[1:]
    if command == READY:
        return _parse_ready(dialect, args)
    if command == HEARTBEAT:
        return WorkerHeartbeat(dialect)
    if command == RESUME:  # (GDP only: the other dialects have no such command byte)
        if args and not _DESCRIPTION_LOW <= len(args[0]) <= _DESCRIPTION_HIGH:
            return Malformed(DESCRIPTION.refusal(len(args[0])), worker=dialect)
        if len(args) >= 2 and not _TASK_LOW <= len(args[1]) <= _TASK_HIGH:
            return Malformed(TASK_ID.refusal(len(args[1])), worker=dialect)
        if len(args) == 2:
            return WorkerResume(dialect, _field(args[0]), _field(args[1]))
        if len(args) == 3 and (info := read_worker_info(args[2])) is not None:
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
    if command in (PARTIAL, FINAL):
        final = command == FINAL
        if dialect is Dialect.GDP:
            if not args:
                return Malformed("generaldomo PARTIAL without a task id", worker=dialect)
            return _worker_reply(dialect, args[0], OK, args[1:], final)
        if len(args) < 2 or args[1] != b"":
            return Malformed(f"{dialect.value} {command} without an address and an empty frame", worker=dialect)
        return _worker_reply(dialect, args[0], OK, args[2:], final)
    return Malformed(
        f"{dialect.value} worker sent an unknown or unexpected command {bytes(rest[0][:4]) if rest else b''!r}",
        worker=dialect,
    )


def _parse_ready(dialect: Dialect, args: Sequence[bytes]) -> Event:
    """A READY: plain, with peer info (GDP), or carrying a result (GDP)."""
    if args and not _DESCRIPTION_LOW <= len(args[0]) <= _DESCRIPTION_HIGH:
        return Malformed(DESCRIPTION.refusal(len(args[0])), worker=dialect)
    if dialect is Dialect.GDP and len(args) >= 3:
        status = _field(args[2])
        if not is_status(status):
            return Malformed(f"a worker's status must be {STATUS.bounds}, not {len(status)} bytes", worker=dialect)
        return _worker_reply(dialect, args[1], status, args[3:], True, _field(args[0]))
    if dialect is Dialect.GDP and len(args) == 2 and (info := read_worker_info(_field(args[1]))) is not None:
        return WorkerReady(dialect, _field(args[0]), *info)
    if len(args) != 1:
        return Malformed(f"{dialect.value} READY with {len(args)} argument frames", worker=dialect)
    return WorkerReady(dialect, _field(args[0]))


def _worker_reply(
    dialect: Dialect,
    task_id: bytes,
    status: bytes,
    body: Sequence[bytes],
    final: bool,
    description: bytes | None = None,
) -> Event:
    if not _TASK_LOW <= len(task_id) <= _TASK_HIGH:
        return Malformed(TASK_ID.refusal(len(task_id)), worker=dialect)
    return WorkerReply(dialect, _field(task_id), status, tuple(body), final, description)


# A plain generaldomo READY may end with one peer-info frame: a JSON object (limits.PEER_INFO), whose keys "host"
# (printable text, limits.HOST) and "pid" (a whole number, limits.PID) say where the worker runs.
MAX_INFO: Final = PEER_INFO.high
MAX_HOST: Final = HOST.high
# The key "features" lists the GDP additions the worker understands (other names are ignored). "fields": the
# broker may hand it a task as REQUEST+FIELDS (with the client's deadline); "cancel": it may send CANCEL.
FEATURES: Final = frozenset({"fields", "cancel"})


def parse_worker_info(frame: bytes) -> tuple[str | None, int | None] | None:
    """``(host, pid)`` of a peer-info frame (None for a value that is absent or not valid), or None if the
    frame is not a JSON object within :data:`~generaldomo.sansio.wire.limits.PEER_INFO`; never raises."""
    info = read_worker_info(frame)
    return None if info is None else info[:2]


def read_worker_info(frame: bytes) -> tuple[str | None, int | None, frozenset[str]] | None:
    """``(host, pid, features)`` of a peer-info frame (see :func:`parse_worker_info`; features: the known names
    among those listed); never raises."""
    if not PEER_INFO.fits(frame) or not frame.startswith(b"{"):
        return None
    try:
        info: Any = json_loads(frame, PEER_INFO.high)
    except WireJSONError:
        return None
    if not isinstance(info, dict):
        return None
    host, pid, listed = info.get("host"), info.get("pid"), info.get("features")
    valid_host = isinstance(host, str) and HOST.admits(len(host)) and host.isprintable()
    valid_pid = isinstance(pid, int) and not isinstance(pid, bool) and PID.admits(pid)
    features = FEATURES.intersection(f for f in listed if isinstance(f, str)) if isinstance(listed, list) else ()
    return (host if valid_host else None), (pid if valid_pid else None), frozenset(features)


def worker_info(host: str | None, pid: int | None, features: frozenset[str] = FEATURES) -> bytes:
    """The peer-info frame of a plain READY: the worker's host name and process id (absent ones left out). A host
    the broker would not take (not printable, longer than :data:`MAX_HOST`, or so long once escaped that the frame
    would exceed :data:`MAX_INFO`) is left out too, so that the frame never makes the READY malformed."""
    if host is not None and not (HOST.admits(len(host)) and host.isprintable()):
        host = None
    frame = _info_frame(host, pid, features)
    return frame if len(frame) <= MAX_INFO else _info_frame(None, pid, features)


def _info_frame(host: str | None, pid: int | None, features: frozenset[str]) -> bytes:
    info: dict[str, object] = {key: value for key, value in (("host", host), ("pid", pid)) if value is not None}
    if features:
        info["features"] = sorted(features)
    return json.dumps(info, separators=(",", ":")).encode()


# ---------------------------------------------------------------------------------------------------- building


MAX_RETRY_AFTER_FRAME: Final = 16  # bytes of a 429's retry-after frame


def parse_retry_after(body: Sequence[bytes]) -> float | None:
    """The seconds a worker's 429 asks the broker to wait (its second frame: decimal ASCII, at most
    :data:`MAX_RETRY_AFTER_FRAME` bytes, finite, not negative), or None if it gives none that is valid."""
    if len(body) < 2 or not 0 < len(body[1]) <= MAX_RETRY_AFTER_FRAME:
        return None
    text = bytes(body[1])
    if not all(c in b"0123456789." for c in text):
        return None
    try:
        seconds = float(text)
    except ValueError:
        return None
    return seconds if 0 <= seconds < float("inf") else None


def retry_after_frame(seconds: float) -> bytes:
    """The retry-after frame of a 429 result: ``seconds`` as decimal ASCII (milliseconds kept)."""
    if not 0 <= seconds < float("inf"):
        raise ValueError(f"retry_after is a number of seconds of at least 0, not {seconds!r}")
    return b"%.3f" % seconds


def timing(queued: float, served: float) -> bytes:
    """The timing frame of a generaldomo FINAL: seconds queued and seconds with the worker, as two doubles."""
    return _TIMING.pack(queued, served)


def parse_timing(frame: bytes) -> tuple[float, float] | None:
    """``(queued, served)`` seconds from a timing frame, or None if it carries none (empty, not 16 bytes, or
    values that are not finite and not negative: :data:`~generaldomo.sansio.wire.limits.TIMING`)."""
    if len(frame) != _TIMING.size:
        return None
    queued, served = _TIMING.unpack(frame)
    return (queued, served) if _duration(queued) and _duration(served) else None


def _duration(seconds: float) -> bool:
    return math.isfinite(seconds) and seconds >= 0.0


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


def worker_request(
    dialect: Dialect, task_id: bytes, description: bytes, body: Sequence[bytes], fields: bytes = b""
) -> list[bytes]:
    """Frames that hand a task to a worker; GDP ``fields`` (see :func:`request_fields`) make it a REQUEST+FIELDS,
    for workers that understand one. MDP workers see the task id as the client address."""
    if dialect is Dialect.GDP:
        if fields:
            return [GDP_WORKER, _GDP_WORKER_FIELDS, task_id, description, fields, *body]
        return [GDP_WORKER, _GDP_WORKER_REQUEST, task_id, description, *body]
    return [*PREFIX[dialect, True], _byte(dialect, REQUEST, True), task_id, b"", *body]


def worker_cancel(task_id: bytes) -> list[bytes]:
    """The broker's CANCEL to a GDP worker that understands one: nobody waits for ``task_id``'s result."""
    return [GDP_WORKER, _GDP_WORKER_CANCEL, task_id]


def worker_command(dialect: Dialect, command: str) -> list[bytes]:
    """Frames of an argument-less worker command (HEARTBEAT, DISCONNECT)."""
    return [*PREFIX[dialect, True], _byte(dialect, command, True)]


def worker_heartbeat(instance: bytes, taken: Sequence[bytes]) -> list[bytes]:
    """A hand-over broker's HEARTBEAT to a generaldomo worker: its instance, then the nonces of the results it
    took from the worker since its last heartbeat (at most :data:`MAX_TAKEN`)."""
    return [GDP_WORKER, _GDP_WORKER_HEARTBEAT, instance, *taken]


# ------------------------------------------------------------------------------ the generaldomo peers' side


def gdp_request(request_id: bytes, description: bytes, body: Sequence[bytes], fields: bytes = b"") -> list[bytes]:
    """Frames a generaldomo client sends to ask for a task: a REQUEST, or with ``fields`` (see
    :func:`request_fields`) a REQUEST+FIELDS."""
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
    command = _WORKER_NAMES[Dialect.GDP].get(frames[1])
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
        return TaskRequest(frames[2], frames[3], tuple(frames[5:]), fields[0])
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
    if isinstance(message, TaskCancel):
        return CANCEL, (message.task_id,)
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

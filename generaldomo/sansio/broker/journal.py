"""The broker's journal: what a broker with a state directory must not lose, as records, and their bytes.

This module owns the journal's records and their one encoding, shared by every reader and writer of it (the
write-ahead log of the state directory, :mod:`generaldomo.io.hub.wal`, and whatever ships the same bytes to another
broker): a request accepted (:class:`Accepted`: everything needed to queue it again), a task finished
(:class:`Finished`: answered, cancelled, expired or dropped, by the serial its acceptance got), an answer kept for
re-asks (:class:`Kept`) and flow limits set at run time (:class:`Limited`). :class:`Live` folds records into what
still holds: the requests accepted and not finished, the kept answers, the latest per request, and the flow
limits, the latest per service name; replaying a log is folding it, and so is compacting one
(the live records, encoded again, are the compacted log).

Times in records are on the wall clock (seconds since the epoch): the core's clock is the broker process's own, so
the core part that makes records (:mod:`generaldomo.sansio.broker.core.durable`) adds the offset its IO layer gives
it, and subtracts a new offset when it restores them.

An entry on disk is ``MAGIC (2 bytes) | length (u32) | crc32 (u32) | kind (1 byte) | body (length bytes)``, little
endian; the crc covers the kind and the body; a body is a sequence of fields, each ``u32 length | bytes``. Reading
(:func:`decode`) never raises on content: an entry that is cut short (a write a kill -9 interrupted) ends the
log; one whose crc or body is wrong is skipped, and reading resumes at the next entry that checks (at most
:data:`MAX_RESYNC` tries per log), and both are counted in :class:`Decoded`. It knows nothing of files, sockets,
clocks, or of the core beyond the fields it copies.
"""

from __future__ import annotations

import dataclasses
import json
import struct
import zlib
from collections.abc import Iterable, Iterator

from generaldomo.sansio.broker.flow.flow import FlowLimits, limits_json
from generaldomo.sansio.wire.events import Frame

__all__ = [
    "HEADER",
    "MAGIC",
    "MAX_ENTRY",
    "MAX_RESYNC",
    "Accepted",
    "Decoded",
    "Finished",
    "JournalRecord",
    "Kept",
    "Limited",
    "Live",
    "RecordAddress",
    "decode",
    "encode",
    "encode_all",
]

MAGIC = b"\xd0\x6d"
HEADER = struct.Struct("<2sIIB")  # magic, body length, crc32 of kind and body, kind
MAX_ENTRY = 256 * 1024 * 1024  # bytes of one entry's body at most: a longer length is not one this code wrote
MAX_RESYNC = 4096  # candidate entries tried after a damaged one, per log: a hostile file costs bounded work
_FIELD = struct.Struct("<I")
_FLOAT = struct.Struct("<d")

RecordAddress = bytes | int | tuple[bytes, ...]  # a peer's address on its link (records.Peer's)


@dataclasses.dataclass(frozen=True, slots=True)
class Accepted:
    """A request the broker accepted: ``serial`` names it in the journal; the rest is what queues it again (its
    client's link and address, its dialect's name, its owner's key and request id, its description and payload,
    when it came and by when it must be answered (wall clock, None: no deadline), its tenant's name, priority,
    whether it is detached and fails fast for a service nobody serves, and when it may be dispatched (wall clock,
    None: at once))."""

    serial: int
    link: int
    address: RecordAddress
    dialect: str
    owner: str | None
    request_id: bytes | None
    description: bytes
    body: tuple[Frame, ...]
    enqueued: float
    deadline: float | None = None
    tenant: str | None = None
    priority: int = 0
    detached: bool = False
    fail_unknown: bool = False
    not_before: float | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Finished:
    """The request accepted under ``serial`` left the broker's tables (answered, cancelled, expired, dropped)."""

    serial: int


@dataclasses.dataclass(frozen=True, slots=True)
class Kept:
    """The answer ``frames`` to request ``request_id`` of ``owner``, kept since ``at`` (wall clock) for re-asks of
    a request of ``digest``, charged to the client at ``link``, ``address``."""

    owner: str | None
    request_id: bytes
    frames: tuple[Frame, ...]
    at: float
    link: int
    address: RecordAddress
    digest: bytes | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Limited:
    """The flow limits of the services called ``name`` were set at run time to ``limits`` (unset: lifted)."""

    name: str
    limits: FlowLimits


JournalRecord = Accepted | Finished | Kept | Limited
_ACCEPTED, _FINISHED, _KEPT, _LIMITED = 1, 2, 3, 4
_NO_LIMITS = FlowLimits()


# --------------------------------------------------------------------------------------------------- encoding


def _optional(value: bytes | None) -> list[bytes]:
    return [b""] if value is None else [b"\x01", value]


def _address(address: RecordAddress) -> list[bytes]:
    if isinstance(address, bytes):
        return [b"b", address]
    if isinstance(address, int):
        return [b"i", str(address).encode()]
    return [b"t", str(len(address)).encode(), *address]


def _number(value: float | None) -> bytes:
    return b"" if value is None else _FLOAT.pack(value)


def _fields(record: JournalRecord) -> tuple[int, list[Frame]]:
    if isinstance(record, Accepted):
        flags = (1 if record.detached else 0) | (2 if record.fail_unknown else 0)
        return _ACCEPTED, [
            str(record.serial).encode(), str(record.link).encode(), *_address(record.address),
            record.dialect.encode(), *_optional(None if record.owner is None else record.owner.encode()),
            *_optional(record.request_id), record.description, _number(record.enqueued), _number(record.deadline),
            *_optional(None if record.tenant is None else record.tenant.encode()), str(record.priority).encode(),
            str(flags).encode(), _number(record.not_before), str(len(record.body)).encode(), *record.body,
        ]  # fmt: skip
    if isinstance(record, Finished):
        return _FINISHED, [str(record.serial).encode()]
    if isinstance(record, Limited):
        return _LIMITED, [record.name.encode(), json.dumps(limits_json(record.limits)).encode()]
    return _KEPT, [
        *_optional(None if record.owner is None else record.owner.encode()), record.request_id,
        _number(record.at), str(record.link).encode(), *_address(record.address), *_optional(record.digest),
        str(len(record.frames)).encode(), *record.frames,
    ]  # fmt: skip


def encode(record: JournalRecord) -> bytes:
    """The bytes of one journal entry holding ``record`` (the module docstring gives the layout)."""
    kind, fields = _fields(record)
    body = b"".join(_FIELD.pack(len(field)) + field for field in fields)
    crc = zlib.crc32(body, zlib.crc32(bytes((kind,))))
    return HEADER.pack(MAGIC, len(body), crc, kind) + body


def encode_all(records: Iterable[JournalRecord]) -> bytes:
    """The entries of ``records``, in order."""
    return b"".join(map(encode, records))


# --------------------------------------------------------------------------------------------------- decoding


@dataclasses.dataclass(slots=True)
class Decoded:
    """What :func:`decode` read: the ``records``, how many entries were damaged and skipped, whether the log
    ended with an entry cut short (``truncated``) and the bytes read up to the end of the last good entry."""

    records: list[JournalRecord] = dataclasses.field(default_factory=list)
    damaged: int = 0
    truncated: bool = False
    end: int = 0


class _Fields:
    def __init__(self, body: memoryview) -> None:
        self._body, self._at = body, 0

    def take(self) -> bytes:
        start = self._at + _FIELD.size
        if start > len(self._body):
            raise ValueError("a field cut short")
        (length,) = _FIELD.unpack_from(self._body, self._at)
        if start + length > len(self._body):
            raise ValueError("a field longer than its entry")
        self._at = start + length
        return bytes(self._body[start : self._at])

    def number(self) -> int:
        return int(self.take())

    def count(self) -> int:
        value = self.number()
        if not 0 <= value <= len(self._body):
            raise ValueError("a count larger than its entry")
        return value

    def optional(self) -> bytes | None:
        return self.take() if self.take() else None

    def text(self) -> str | None:
        value = self.optional()
        return None if value is None else value.decode()

    def real(self) -> float | None:
        value = self.take()
        if not value:
            return None
        (number,) = _FLOAT.unpack(value)
        if number != number or number in (float("inf"), float("-inf")):
            raise ValueError("a time that is not finite")
        return float(number)

    def address(self) -> RecordAddress:
        kind = self.take()
        if kind == b"b":
            return self.take()
        if kind == b"i":
            return self.number()
        if kind == b"t":
            return tuple(self.take() for _ in range(self.count()))
        raise ValueError("an address of no known kind")

    def end(self) -> None:
        if self._at != len(self._body):
            raise ValueError("bytes after the last field")


def _record(kind: int, body: memoryview) -> JournalRecord:
    fields = _Fields(body)
    record: JournalRecord
    if kind == _ACCEPTED:
        serial, link, address = fields.number(), fields.number(), fields.address()
        dialect, owner = fields.take().decode(), fields.text()
        request_id, description = fields.optional(), fields.take()
        enqueued, deadline, tenant = fields.real(), fields.real(), fields.text()
        priority, flags, not_before = fields.number(), fields.number(), fields.real()
        body_frames = tuple(fields.take() for _ in range(fields.count()))
        record = Accepted(
            serial, link, address, dialect, owner, request_id, description, body_frames, enqueued or 0.0, deadline,
            tenant, priority, bool(flags & 1), bool(flags & 2), not_before,
        )  # fmt: skip
    elif kind == _FINISHED:
        record = Finished(fields.number())
    elif kind == _KEPT:
        owner, request_id, at = fields.text(), fields.take(), fields.real()
        link, address, digest = fields.number(), fields.address(), fields.optional()
        frames = tuple(fields.take() for _ in range(fields.count()))
        record = Kept(owner, request_id, frames, at or 0.0, link, address, digest)
    elif kind == _LIMITED:
        name, limits = fields.take().decode(), json.loads(fields.take())
        if not isinstance(limits, dict):
            raise ValueError("flow limits that are not an object")
        record = Limited(name, _NO_LIMITS.merged(limits))
    else:
        raise ValueError(f"an entry of unknown kind {kind}")
    fields.end()
    return record


def _entry(view: memoryview, at: int) -> tuple[JournalRecord | None, int]:
    """The record of the entry at ``at`` and where the next begins; (None, -1) when it is cut short, (None, 0) when
    it is damaged."""
    if at + HEADER.size > len(view):
        return None, -1
    magic, length, crc, kind = HEADER.unpack_from(view, at)
    if magic != MAGIC or length > MAX_ENTRY:
        return None, 0
    end = at + HEADER.size + length
    if end > len(view):
        return None, -1
    body = view[at + HEADER.size : end]
    if zlib.crc32(body, zlib.crc32(bytes((kind,)))) != crc:
        return None, 0
    try:
        return _record(kind, body), end
    except (ValueError, TypeError, UnicodeDecodeError, struct.error, OverflowError, RecursionError):
        return None, 0


def decode(data: bytes | memoryview) -> Decoded:
    """The records of the log ``data``, damaged entries skipped and counted (the module docstring); never raises."""
    raw = bytes(data) if isinstance(data, memoryview) else data
    view = memoryview(raw)
    out = Decoded()
    at, tries = 0, 0
    while at < len(view):
        record, after = _entry(view, at)
        if record is not None:
            out.records.append(record)
            at = out.end = after
            continue
        following, tried = _resync(raw, view, at + 1, MAX_RESYNC - tries)
        tries += tried
        if following < 0:
            out.truncated = after < 0  # a write cut short ends the log; bytes that never were an entry, damage
            out.damaged += 0 if out.truncated else 1
            break
        out.damaged += 1  # an entry further on checks: this one was damaged, not the log's end
        at = following
    return out


def _resync(raw: bytes, view: memoryview, start: int, tries: int) -> tuple[int, int]:
    """Where the next entry that checks begins at or after ``start`` (-1: none within ``tries`` candidates), and
    how many candidates were tried."""
    at = start
    for tried in range(1, max(0, tries) + 1):
        at = raw.find(MAGIC, at)
        if at < 0:
            return -1, tried
        record, _after = _entry(view, at)
        if record is not None:
            return at, tried
        at += 1
    return -1, max(0, tries)


# --------------------------------------------------------------------------------------------------- folding


class Live:
    """What a journal's records leave standing: the requests accepted and not finished, by serial, in order, the
    kept answers by ``(owner, request_id)``, the latest each, in the order kept, and the flow limits set at run
    time by service name, the latest each (lifted ones too: they lift a configured limit); ``bytes`` is an
    estimate of their encoded size (what a compacted log takes)."""

    __slots__ = ("bytes", "flows", "kept", "tasks")

    def __init__(self) -> None:
        self.tasks: dict[int, Accepted] = {}
        self.kept: dict[tuple[str | None, bytes], Kept] = {}
        self.flows: dict[str, Limited] = {}
        self.bytes = 0

    def apply(self, record: JournalRecord) -> None:
        """Fold ``record`` in."""
        if isinstance(record, Accepted):
            old = self.tasks.pop(record.serial, None)
            self.bytes += _size(record) - (0 if old is None else _size(old))
            self.tasks[record.serial] = record
        elif isinstance(record, Finished):
            gone = self.tasks.pop(record.serial, None)
            if gone is not None:
                self.bytes -= _size(gone)
        elif isinstance(record, Limited):
            if self.flows.pop(record.name, None) is None:
                self.bytes += _FLOW_SIZE
            self.flows[record.name] = record
        else:
            key = (record.owner, record.request_id)
            replaced = self.kept.pop(key, None)
            self.bytes += _size(record) - (0 if replaced is None else _size(replaced))
            self.kept[key] = record

    def apply_all(self, records: Iterable[JournalRecord]) -> Live:
        """Fold ``records`` in, in order; return self."""
        for record in records:
            self.apply(record)
        return self

    def expire(self, before: float) -> None:
        """Forget the kept answers kept before ``before`` (wall clock)."""
        for key in [key for key, kept in self.kept.items() if kept.at < before]:
            self.bytes -= _size(self.kept.pop(key))

    def records(self) -> Iterator[JournalRecord]:
        """The records that make this state: every flow limit, every live request, then every kept answer (a
        compacted log)."""
        yield from self.flows.values()
        yield from self.tasks.values()
        yield from self.kept.values()


_FLOW_SIZE = 512  # bytes of a flow limits record, about


def _size(record: Accepted | Kept) -> int:
    frames = record.body if isinstance(record, Accepted) else record.frames
    return 96 + sum(map(len, frames)) + (len(record.description) if isinstance(record, Accepted) else 0)

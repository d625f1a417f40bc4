"""The broker pair's replication: the active broker streams its journal to the passive, which folds it.

This module owns the replication link's messages and both ends' state, after the ZeroMQ Guide's Clone pattern
(chapter 5): the active (:class:`Shipper`) gives every journal record (:mod:`generaldomo.sansio.broker.journal`: a
request accepted, a task finished, an answer kept; its bytes are the write-ahead log's, the one encoder) the next
number of its *sequence* and ships the records of each turn as they are made; the passive (:class:`Replica`) folds
them, in sequence, into a :class:`~generaldomo.sansio.broker.journal.Live`, the same fold a restart replays its log
into, and on takeover the broker restores from it exactly as a restart restores from its log.

The active never waits for the passive: what it ships is queued a bounded number of messages deep by the IO layer
and dropped beyond. The passive finds a drop as a *gap* (a record whose number is not the next one) and asks for
a *snapshot*: the active's live records, encoded, between a begin and an end carrying the sequence they hold up
to, made and queued in one turn (the link keeps the order of messages, so the records shipped after it follow its
end). The active sends a snapshot at most
once per ``pace`` seconds (it costs the encoding of every live record). A sequence belongs to one active's run
(its ``origin``, eight random bytes): records of another origin are a gap too.

The passive tells the active, once per pair heartbeat, the number it applied (:data:`ACK`) or that it needs a
snapshot (:data:`RESYNC`); the difference is the *replication lag* (:meth:`Shipper.lag`: records, and seconds since
the oldest record not yet applied was shipped). What the passive holds stays within its own budget (its ledger's
``held_bytes`` plus ``keep_bytes``): a request beyond it is not held, and counted.

Messages (frames; numbers are u64 little endian): ``HEADER | R | origin | first | entries`` (records numbered from
``first``; no entries: the active's beat, once per pair heartbeat, so that a passive finds a gap at the end too),
``HEADER | B | origin | sequence`` (a snapshot begins), ``HEADER | P | origin | sequence | entries`` (a part of
it), ``HEADER | E | origin | sequence | count`` (it ends, ``count`` records in all), and from the passive
``HEADER | A | origin | applied`` and ``HEADER | S | origin | applied``. A message that is none of these, or whose
entries do not decode whole, is counted (``malformed``) and dropped (a record message's drop is a gap), never a
crash. It knows nothing of sockets, keys or clocks (times are given).
"""

from __future__ import annotations

import collections
import struct
from collections.abc import Iterable, Sequence
from typing import Final

from generaldomo.sansio.broker.journal import Finished, JournalRecord, Live, decode, encode
from generaldomo.sansio.wire.events import Frame

__all__ = [
    "ACK",
    "BEGIN",
    "END",
    "HEADER",
    "PART",
    "RECORDS",
    "RESYNC",
    "TIMES",
    "Replica",
    "Shipper",
]

HEADER: Final = b"GDREPL01"  # the first frame of every message on the replication link
RECORDS, BEGIN, PART, END, ACK, RESYNC = b"R", b"B", b"P", b"E", b"A", b"S"
TIMES: Final = 1024  # shipping times the active keeps for the lag in seconds, at most (beyond: merged)
_NUMBER = struct.Struct("<Q")
_ORIGIN = 8  # bytes of an origin
_SHAPES: Final = {RECORDS: 5, BEGIN: 4, PART: 5, END: 5, ACK: 4, RESYNC: 4}  # frames of each kind of message


def _number(value: int) -> bytes:
    return _NUMBER.pack(value)


def _read_number(frame: bytes) -> int:
    if len(frame) != _NUMBER.size:
        raise ValueError("a number of the wrong size")
    return int(_NUMBER.unpack(frame)[0])


def _parse(frames: Sequence[Frame]) -> tuple[bytes, bytes, int, bytes] | None:
    """``(kind, origin, number, last frame)`` of a replication message (the last frame is empty for those with
    four frames); None if it is not one."""
    if not 4 <= len(frames) <= 5 or bytes(frames[0]) != HEADER:
        return None
    kind, origin = bytes(frames[1]), bytes(frames[2])
    if _SHAPES.get(kind) != len(frames) or len(origin) not in (0, _ORIGIN):
        return None
    try:
        number = _read_number(bytes(frames[3]))
    except (ValueError, struct.error):
        return None
    return kind, origin, number, bytes(frames[4]) if len(frames) == 5 else b""


def _records(data: bytes) -> list[JournalRecord] | None:
    """The records of ``data`` (entries), None unless every byte of it is a good entry."""
    decoded = decode(data)
    if decoded.damaged or decoded.truncated or decoded.end != len(data):
        return None
    return decoded.records


def _chunks(entries: Iterable[bytes], frame_bytes: int) -> Iterable[tuple[int, bytes]]:
    """``entries`` joined into frames of at most ``frame_bytes`` (an entry larger goes alone), with how many each
    holds."""
    chunk: list[bytes] = []
    size = 0
    for entry in entries:
        if chunk and size + len(entry) > frame_bytes:
            yield len(chunk), b"".join(chunk)
            chunk, size = [], 0
        chunk.append(entry)
        size += len(entry)
    if chunk:
        yield len(chunk), b"".join(chunk)


class Shipper:
    """The active broker's end: numbers and encodes its journal's records (:meth:`ship`), folds them into its own
    :attr:`live` (what a snapshot holds), answers the passive's messages (:meth:`heard`) and says the lag
    (:meth:`lag`). ``origin``: eight bytes naming this run's sequence; ``frame_bytes``: the largest frame of entries
    it makes (an entry larger goes alone); ``pace``: seconds between two snapshots, at least."""

    __slots__ = ("_times", "acked", "frame_bytes", "live", "origin", "pace", "sequence", "snapshot_at", "snapshots")

    def __init__(self, origin: bytes, frame_bytes: int, pace: float) -> None:
        if len(origin) != _ORIGIN:
            raise ValueError(f"an origin is {_ORIGIN} bytes")
        self.origin, self.frame_bytes, self.pace = origin, frame_bytes, pace
        self.sequence = 0  # the number of the last record shipped
        self.acked: int | None = None  # the number the passive last said it applied (None: not heard, or resyncing)
        self.live = Live()
        self.snapshot_at: float | None = None  # when the last snapshot was made
        self.snapshots = 0
        self._times: collections.deque[tuple[int, float]] = collections.deque()  # (last number, when shipped)

    def ship(self, records: Sequence[JournalRecord], now: float) -> list[list[bytes]]:
        """The messages that ship ``records`` (a turn's, in order) at ``now``."""
        if not records:
            return []
        live, first = self.live, self.sequence + 1
        messages = []
        for count, entries in _chunks(map(encode, records), self.frame_bytes):
            messages.append([HEADER, RECORDS, self.origin, _number(first), entries])
            first += count
        live.apply_all(records)
        self.sequence = first - 1
        times = self._times
        if len(times) < TIMES:
            times.append((self.sequence, now))
        else:  # merged into the newest: its time stays the older one (the lag is not understated)
            times[-1] = (self.sequence, times[-1][1])
        return messages

    def beat(self) -> list[bytes]:
        """The message that tells the passive, once per pair heartbeat, the number the next record will get (no
        records: a passive that missed the last ones finds its gap by it)."""
        return [HEADER, RECORDS, self.origin, _number(self.sequence + 1), b""]

    def heard(self, frames: Sequence[Frame], now: float) -> list[list[bytes]] | None:
        """What to send for the passive's message ``frames``: a snapshot when it asks for one and one is due (else
        nothing); None if the message is malformed (counted by the caller)."""
        parsed = _parse(frames)
        if parsed is None or parsed[0] not in (ACK, RESYNC):
            return None
        kind, origin, applied, _ = parsed
        if kind == ACK and origin == self.origin and applied <= self.sequence:
            self.acked = applied
            times = self._times
            while times and times[0][0] <= applied:
                times.popleft()
            return []
        self.acked = None
        return self.snapshot(now)

    def snapshot(self, now: float) -> list[list[bytes]]:
        """The messages of a snapshot of :attr:`live` (nothing if the last one is less than :attr:`pace` old)."""
        if self.snapshot_at is not None and now < self.snapshot_at + self.pace:
            return []
        self.snapshot_at = now
        self.snapshots += 1
        origin, sequence = self.origin, _number(self.sequence)
        messages = [[HEADER, BEGIN, origin, sequence]]
        count = 0
        for n, entries in _chunks(map(encode, self.live.records()), self.frame_bytes):
            messages.append([HEADER, PART, origin, sequence, entries])
            count += n
        messages.append([HEADER, END, origin, sequence, _number(count)])
        return messages

    def expire(self, before: float) -> None:
        """Forget the kept answers kept before ``before`` (the journal's wall clock: as the log's compaction)."""
        self.live.expire(before)

    def lag(self, now: float) -> tuple[int | None, float | None]:
        """The replication lag at ``now``: records shipped and not yet applied by the passive, and seconds since
        the oldest of them was shipped; None, None while the passive has not said what it applied."""
        if self.acked is None:
            return None, None
        times = self._times
        return self.sequence - self.acked, (max(0.0, now - times[0][1]) if times else 0.0)


class Replica:
    """The passive broker's end: :meth:`receive` the active's messages, folded into :attr:`live` (what a takeover
    restores), within ``budget`` bytes; :meth:`beat` is the message to send it once per pair heartbeat (and at
    once when :meth:`receive` returns True: a gap)."""

    __slots__ = (
        "_count",
        "_staging",
        "_staging_at",
        "applied",
        "budget",
        "gaps",
        "live",
        "malformed",
        "origin",
        "over_budget",
        "snapshots",
        "synced",
    )  # fmt: skip

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.live = Live()
        self.origin = b""  # whose sequence :attr:`applied` counts in (empty: none yet)
        self.applied = 0  # the number of the last record applied
        self.synced = False  # whether records are applied as they come (else a snapshot is awaited)
        self.gaps = self.malformed = self.over_budget = self.snapshots = 0
        self._staging: Live | None = None  # the snapshot being received
        self._staging_at = (b"", 0)  # its origin and sequence
        self._count = 0  # records in it so far

    def clear(self) -> None:
        """Forget what was folded (this broker took over and restored it: when it is passive again, a snapshot
        starts it anew); the counts stay."""
        self.live, self.origin, self.applied, self.synced, self._staging = Live(), b"", 0, False, None

    def beat(self) -> list[bytes]:
        """The message telling the active what was applied (or asking for a snapshot)."""
        return [HEADER, ACK if self.synced else RESYNC, self.origin, _number(self.applied)]

    def receive(self, frames: Sequence[Frame]) -> bool:
        """Fold in the active's message ``frames``; True when a gap was found just now (:meth:`beat` asks for a
        snapshot)."""
        parsed = _parse(frames)
        if parsed is None or parsed[0] in (ACK, RESYNC) or len(parsed[1]) != _ORIGIN:
            self.malformed += 1
            return False
        kind, origin, number, data = parsed
        if kind == RECORDS:
            return self._records(origin, number, data)
        if kind == BEGIN:
            self._staging, self._staging_at, self._count = Live(), (origin, number), 0
            return False
        staging = self._staging
        if staging is None or self._staging_at != (origin, number):
            return False  # a part of a snapshot not begun, or of an older one: ignored
        if kind == PART:
            records = _records(data)
            if records is None:
                self.malformed += 1
                self._staging = None
                return self._gap()
            self._count += len(records)
            self._fold(staging, records)
            return False
        self._staging = None
        if len(data) != _NUMBER.size or self._count != _read_number(data):
            self.malformed += 1
            return self._gap()
        self.live, self.origin, self.applied, self.synced = staging, origin, number, True
        self.snapshots += 1
        return False

    def _records(self, origin: bytes, first: int, data: bytes) -> bool:
        records = _records(data)
        if records is None:
            self.malformed += 1
            return self._gap()
        if not self.synced:
            return False  # a snapshot is awaited (asked for by the beat)
        if origin != self.origin:
            return self._gap()
        if first + len(records) - 1 <= self.applied:
            return False  # shipped again: applied already
        if first > self.applied + 1:
            return self._gap()
        self._fold(self.live, records[self.applied + 1 - first :])
        self.applied = first + len(records) - 1
        return False

    def _fold(self, live: Live, records: Iterable[JournalRecord]) -> None:
        budget = self.budget
        for record in records:
            if not isinstance(record, Finished) and live.bytes > budget:
                self.over_budget += 1
                continue
            live.apply(record)

    def _gap(self) -> bool:
        self.gaps += 1
        self.synced = False
        return True

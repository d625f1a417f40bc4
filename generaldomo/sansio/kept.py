"""Kept answers: final replies the broker has sent, kept for a while so a client that lost one can re-ask.

This module owns the bounded store behind the broker's "every request is answered" promise: each answer is
kept for ``seconds`` after it was sent, within ``budget`` bytes, the oldest evicted first, and each is charged
to the ledger (:mod:`generaldomo.sansio.ledger`) under the connection of the client it was for. Each is kept
with a digest of the request it answers (:func:`request_digest`), so that it is handed out again only for that
request: a peer that sends someone's request id first, with a request of its own, captures nothing. It is fed
the time by its caller and reads no clock; it knows nothing of sockets, tasks or dialects (keys and frames are
the core's).
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections import OrderedDict
from collections.abc import Hashable, Iterator, Sequence
from typing import NamedTuple

from generaldomo.sansio.ledger import FRAME, OVERHEAD, Connection, Kind, Ledger

ENTRY_OVERHEAD = OVERHEAD[Kind.KEPT]  # bytes an entry costs beyond its frames (key, record, dict slot)
# Python's hash of bytes is SipHash with a key drawn per process, unless PYTHONHASHSEED fixes the key
_KEYED_HASH = bool(sys.flags.hash_randomization) and os.environ.get("PYTHONHASHSEED", "random") == "random"


def answer_size(frames: list[bytes]) -> int:
    """Bytes a kept answer of ``frames`` costs, overhead included."""
    return ENTRY_OVERHEAD + sum(map(len, frames)) + FRAME * len(frames)


def request_digest(description: bytes, body: Sequence[bytes]) -> Hashable:
    """What identifies a request's content: a digest of its description and payload frames. Python's hash of
    bytes is keyed SipHash (a key drawn per process, so that nobody can make two requests collide) and costs
    little; with ``PYTHONHASHSEED`` set its key could be known, so then BLAKE2b digests the request."""
    if _KEYED_HASH:
        return hash((description, tuple(body)))
    digest = hashlib.blake2b(digest_size=16)
    for frame in (description, *body):
        digest.update(len(frame).to_bytes(8, "big"))
        digest.update(frame)
    return digest.digest()


class Kept(NamedTuple):
    """A kept answer's frames, and the digest of the request it answers."""

    frames: list[bytes]
    request: Hashable


_Entry = tuple[float, list[bytes], int, Connection, Hashable]  # kept at, frames, size, charged to, request digest


class KeptAnswers:
    """Frames of final answers by key, for ``seconds`` after they were kept, in at most ``budget`` bytes."""

    def __init__(self, seconds: float, budget: int, ledger: Ledger | None = None) -> None:
        self.seconds = seconds
        self.budget = budget
        self.bytes = 0
        self.evicted = 0  # answers dropped for the byte budget before their time was up
        self._ledger = ledger if ledger is not None else Ledger()
        self._answers: OrderedDict[Hashable, _Entry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._answers)

    def keep(
        self, key: Hashable, frames: list[bytes], now: float, where: Connection = (0, b""), request: Hashable = None
    ) -> None:
        """Keep ``frames`` as the answer for ``key`` (replacing any older one) to the request whose digest is
        ``request``, charged to ``where``; ``frames`` must not change."""
        size = answer_size(frames)
        if self.seconds <= 0 or size > self.budget:
            return
        old = self._answers.pop(key, None)
        if old is not None:
            self._drop(old)
        self._answers[key] = (now, frames, size, where, request)
        self.bytes += size
        self._ledger.charge(where, Kind.KEPT, size)
        while self.bytes > self.budget:
            self._drop(self._answers.popitem(last=False)[1])
            self.evicted += 1

    def holdings(self) -> Iterator[tuple[Connection, int]]:
        """``(connection, bytes)`` of every answer kept: what it is charged in the ledger."""
        for _, _, size, where, _ in self._answers.values():
            yield where, size

    def get(self, key: Hashable, now: float) -> list[bytes] | None:
        """The answer kept for ``key``, or None if there is none (or its time is up)."""
        kept = self.find(key, now)
        return None if kept is None else kept.frames

    def find(self, key: Hashable, now: float) -> Kept | None:
        """The answer kept for ``key`` and the digest of its request, or None if there is none (or its time is
        up)."""
        entry = self._answers.get(key)
        if entry is None or entry[0] + self.seconds <= now:
            return None
        return Kept(entry[1], entry[4])

    def forget(self, key: Hashable) -> None:
        """Drop the answer kept for ``key``, if any."""
        entry = self._answers.pop(key, None)
        if entry is not None:
            self._drop(entry)

    def expire(self, now: float) -> None:
        """Forget the answers whose time is up."""
        answers = self._answers
        cutoff = now - self.seconds
        while answers:
            entry = next(iter(answers.values()))
            if entry[0] > cutoff:
                return
            answers.popitem(last=False)
            self._drop(entry)

    def _drop(self, entry: _Entry) -> None:
        _, _, size, where, _ = entry
        self.bytes -= size
        self._ledger.release(where, Kind.KEPT, size)

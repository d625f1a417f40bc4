"""Kept answers: final replies the broker has sent, kept for a while so a client that lost one can re-ask.

This module owns the bounded store behind the broker's "every request is answered" promise: each answer is
kept for ``seconds`` after it was sent, within ``budget`` bytes, the oldest evicted first, and each is charged
to the ledger (:mod:`generaldomo.sansio.broker.accounts.ledger`) under the connection of the client it was for. An
answer may be kept with the digest of the request it answers (:func:`generaldomo.sansio.wire.ticket.request_digest`):
then it is handed out only for a request with that digest. It is fed the time by its caller and reads no clock; it
knows nothing of sockets, tasks or dialects (keys and frames are the core's).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator

from generaldomo.sansio.broker.accounts.ledger import FRAME, OVERHEAD, ConnectionId, Holding, Ledger
from generaldomo.sansio.wire.events import Frame

__all__ = ["ENTRY_OVERHEAD", "Entry", "KeptAnswers", "answer_size"]

ENTRY_OVERHEAD = OVERHEAD[Holding.KEPT]  # bytes an entry costs beyond its frames (key, record, dict slot)
Entry = tuple[float, list[Frame], int, ConnectionId, bytes | None]  # kept at, frames, size, charged to, digest


def answer_size(frames: list[Frame]) -> int:
    """Bytes a kept answer of ``frames`` costs, overhead included."""
    return ENTRY_OVERHEAD + sum(map(len, frames)) + FRAME * len(frames)


class KeptAnswers:
    """Frames of final answers by key, for ``seconds`` after they were kept, in at most ``budget`` bytes."""

    def __init__(self, seconds: float, budget: int, ledger: Ledger | None = None) -> None:
        self.seconds = seconds
        self.budget = budget
        self.bytes = 0
        self.evicted = 0  # answers dropped for the byte budget before their time was up
        self._ledger = ledger if ledger is not None else Ledger()
        self._answers: OrderedDict[Hashable, Entry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._answers)

    def keep(
        self,
        key: Hashable,
        frames: list[Frame],
        now: float,
        where: ConnectionId = (0, b""),
        digest: bytes | None = None,
    ) -> None:
        """Keep ``frames`` as the answer for ``key`` (replacing any older one), charged to ``where``, for a request
        of ``digest`` if given; ``frames`` must not change."""
        size = answer_size(frames)
        if self.seconds <= 0 or size > self.budget:
            return
        old = self._answers.pop(key, None)
        if old is not None:
            self._drop(old)
        self._answers[key] = (now, frames, size, where, digest)
        self.bytes += size
        self._ledger.charge(where, Holding.KEPT, size)
        while self.bytes > self.budget:
            self._drop(self._answers.popitem(last=False)[1])
            self.evicted += 1

    def holdings(self) -> Iterator[tuple[ConnectionId, int]]:
        """``(connection, bytes)`` of every answer kept: what it is charged in the ledger."""
        for _, _, size, where, _ in self._answers.values():
            yield where, size

    def get(self, key: Hashable, now: float, digest: Callable[[], bytes] | None = None) -> list[Frame] | None:
        """The answer kept for ``key``, or None if there is none (or its time is up, or it was kept for a request
        of another digest than ``digest()``: called only then, so that the request's digest is made only when
        it counts)."""
        entry = self._answers.get(key)
        if entry is None or entry[0] + self.seconds <= now:
            return None
        if entry[4] is not None and digest is not None and digest() != entry[4]:
            return None
        return entry[1]

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

    def _drop(self, entry: Entry) -> None:
        _, _, size, where, _ = entry
        self.bytes -= size
        self._ledger.release(where, Holding.KEPT, size)

"""Kept answers: final replies the broker has sent, kept for a while so a client that lost one can re-ask.

This module owns the bounded store behind the broker's "every request is answered" promise: each answer is
kept for ``seconds`` after it was sent, within ``budget`` bytes, the oldest evicted first. An answer may be
kept with the digest of the request it answers (:func:`generaldomo.sansio.ticket.request_digest`): then it is
handed out only for a request with that digest. It is fed the time by its caller and reads no clock; it knows
nothing of sockets, tasks or dialects (keys and frames are the core's).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable

ENTRY_OVERHEAD = 256  # bytes an entry costs beyond its frames (key, record, dict slot), counted in the budget


class KeptAnswers:
    """Frames of final answers by key, for ``seconds`` after they were kept, in at most ``budget`` bytes."""

    def __init__(self, seconds: float, budget: int) -> None:
        self.seconds = seconds
        self.budget = budget
        self.bytes = 0
        self.evicted = 0  # answers dropped for the byte budget before their time was up
        self._answers: OrderedDict[Hashable, tuple[float, list[bytes], int, bytes | None]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._answers)

    def keep(self, key: Hashable, frames: list[bytes], now: float, digest: bytes | None = None) -> None:
        """Keep ``frames`` as the answer for ``key`` (replacing any older one), for a request of ``digest`` if
        given; ``frames`` must not change."""
        size = ENTRY_OVERHEAD + sum(map(len, frames))
        if self.seconds <= 0 or size > self.budget:
            return
        old = self._answers.pop(key, None)
        if old is not None:
            self.bytes -= old[2]
        self._answers[key] = (now, frames, size, digest)
        self.bytes += size
        while self.bytes > self.budget:
            self.bytes -= self._answers.popitem(last=False)[1][2]
            self.evicted += 1

    def get(self, key: Hashable, now: float, digest: Callable[[], bytes] | None = None) -> list[bytes] | None:
        """The answer kept for ``key``, or None if there is none (or its time is up, or it was kept for a request
        of another digest than ``digest()``: called only then, so that the request's digest is made only when
        it counts)."""
        entry = self._answers.get(key)
        if entry is None or entry[0] + self.seconds <= now:
            return None
        if entry[3] is not None and digest is not None and digest() != entry[3]:
            return None
        return entry[1]

    def expire(self, now: float) -> None:
        """Forget the answers whose time is up."""
        answers = self._answers
        cutoff = now - self.seconds
        while answers:
            kept_at, _, size, _ = next(iter(answers.values()))
            if kept_at > cutoff:
                return
            answers.popitem(last=False)
            self.bytes -= size

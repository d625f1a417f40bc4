"""Dead letters: the tasks that finally failed, kept per service for an operator to look at, replay or drop.

This module owns the bounded store behind ``generaldomo dead``: each letter is a failed task's request (its
description and payload, tenant and priority) with why and when it failed, kept under its task id in its
service's letters, at most ``per_service`` of them per service and ``budget`` bytes in all (a service's at most
:data:`SERVICE_SHARE` of them, so that a service whose workers fail everything does not evict the others'), the
oldest evicted first (counted), and forgotten once their time is up (:meth:`DeadLetters.expire`). Each is charged
to the ledger (:mod:`generaldomo.sansio.broker.accounts.ledger`, as
:attr:`~generaldomo.sansio.broker.accounts.ledger.Holding.DEAD`) under the connection of the client that sent it,
as kept answers are (a budget of their own: they never make that client's next request wait). A letter leaves
only once: taken (for a replay, or dropped), evicted or expired, so that no letter is replayed twice. It is fed
the time by its caller and reads no clock; it knows nothing of sockets, tasks, services' queues or dialects.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections import OrderedDict
from collections.abc import Iterator

from generaldomo.sansio.broker.accounts.ledger import FRAME, OVERHEAD, ConnectionId, Holding, Ledger

__all__ = [
    "ENTRY_OVERHEAD",
    "REASON_BYTES",
    "SERVICE_SHARE",
    "DeadLetter",
    "DeadLetters",
    "ServiceLetters",
    "letter_size",
]

ENTRY_OVERHEAD = OVERHEAD[Holding.DEAD]  # bytes a letter costs beyond its fields' bytes
SERVICE_SHARE = 0.5  # the share of the byte budget one service's letters may hold
REASON_BYTES = 256  # bytes of the worker's reason a letter keeps (the start of its answer's first frame)


@dataclasses.dataclass(frozen=True, slots=True)
class DeadLetter:
    """A task that finally failed: its id, service, request (``description`` and ``body``, ``tenant`` and
    ``priority``), the status its client was answered, why (``reason``, in words), when (the core's clock), after
    how many ``attempts``, the connection it is charged to and its ``size`` in bytes (:func:`letter_size`)."""

    id: bytes
    service: str
    description: bytes
    body: tuple[bytes | memoryview, ...]
    status: bytes
    reason: str
    when: float
    attempts: int
    tenant: str | None
    priority: int
    charged: ConnectionId
    size: int


def letter_size(
    task_id: bytes, service: str, description: bytes, body: tuple[bytes | memoryview, ...], reason: str
) -> int:
    """Bytes a letter of these fields costs, overhead included."""
    fields = len(task_id) + len(service.encode()) + len(description) + len(reason.encode())
    return ENTRY_OVERHEAD + fields + sum(map(len, body)) + FRAME * len(body)


@dataclasses.dataclass(frozen=True, slots=True)
class ServiceLetters:
    """A service's dead letters in short: how many, their bytes, and when the newest came (the core's clock)."""

    service: str
    count: int
    bytes: int
    newest: float


class DeadLetters:
    """Dead letters by service, at most ``per_service`` per service (0: none kept) and ``budget`` bytes in all, the
    oldest evicted first (see the module docstring)."""

    def __init__(self, per_service: int, budget: int, ledger: Ledger | None = None) -> None:
        self.per_service = per_service
        self.budget = budget
        self.bytes = 0
        self.evicted = 0  # letters dropped for a bound (count or bytes), oldest first
        self._ledger = ledger if ledger is not None else Ledger()
        self._all: OrderedDict[bytes, DeadLetter] = OrderedDict()  # every letter, oldest first
        self._by_service: dict[str, OrderedDict[bytes, DeadLetter]] = {}  # each service's, oldest first
        self._service_bytes: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._all)

    def keep(self, letter: DeadLetter) -> bool:
        """Keep ``letter`` (one with its id leaves first), evicting the oldest beyond the bounds; False when it is
        not kept at all (none are, or it alone is larger than the budget)."""
        if self.per_service <= 0 or letter.size > self.budget * SERVICE_SHARE:
            return False
        old = self._all.get(letter.id)
        if old is not None:
            self._remove(old)
        self._all[letter.id] = letter
        self._by_service.setdefault(letter.service, OrderedDict())[letter.id] = letter
        self._service_bytes[letter.service] = self._service_bytes.get(letter.service, 0) + letter.size
        self.bytes += letter.size
        self._ledger.charge(letter.charged, Holding.DEAD, letter.size)
        mine = self._by_service[letter.service]
        while len(mine) > self.per_service or self._service_bytes[letter.service] > self.budget * SERVICE_SHARE:
            self._evict(next(iter(mine.values())))
        while self.bytes > self.budget:
            self._evict(next(iter(self._all.values())))
        return True

    def expire(self, before: float) -> None:
        """Forget the letters that came before ``before`` (their time is up; not counted as evicted)."""
        letters = self._all
        while letters:
            letter = next(iter(letters.values()))
            if letter.when >= before:
                return
            self._remove(letter)

    def get(self, service: str, task_id: bytes) -> DeadLetter | None:
        """The letter of the task ``task_id`` in ``service``'s letters, or None."""
        letters = self._by_service.get(service)
        return None if letters is None else letters.get(task_id)

    def take(self, service: str, task_id: bytes) -> DeadLetter | None:
        """Take the letter of the task ``task_id`` out of ``service``'s letters (to replay or drop it); None when it
        is not there: a letter is taken once."""
        letter = self.get(service, task_id)
        if letter is not None:
            self._remove(letter)
        return letter

    def count(self, service: str) -> int:
        """How many letters ``service`` has."""
        letters = self._by_service.get(service)
        return 0 if letters is None else len(letters)

    def letters(self, service: str, limit: int, after: bytes | None = None) -> tuple[list[DeadLetter], bool]:
        """Up to ``limit`` of ``service``'s letters, oldest first, those after the letter ``after`` if given (one
        gone since: from the start), and whether there are more."""
        letters = self._by_service.get(service)
        if letters is None:
            return [], False
        shown: list[DeadLetter] = []
        started = after is None or after not in letters
        for task_id, letter in letters.items():
            if not started:
                started = task_id == after
                continue
            if len(shown) == limit:
                return shown, True
            shown.append(letter)
        return shown, False

    def services(self, n: int) -> list[ServiceLetters]:
        """The ``n`` services with the most letters, most first (then by name)."""
        busiest = heapq.nsmallest(n, self._by_service.items(), key=lambda item: (-len(item[1]), item[0]))
        return [
            ServiceLetters(
                service=name, count=len(letters), bytes=self._service_bytes[name],
                newest=next(reversed(letters.values())).when,
            )
            for name, letters in busiest
        ]  # fmt: skip

    def service_count(self) -> int:
        """How many services have letters."""
        return len(self._by_service)

    def holdings(self) -> Iterator[tuple[ConnectionId, int]]:
        """``(connection, bytes)`` of every letter: what it is charged in the ledger."""
        for letter in self._all.values():
            yield letter.charged, letter.size

    def _evict(self, letter: DeadLetter) -> None:
        self._remove(letter)
        self.evicted += 1

    def _remove(self, letter: DeadLetter) -> None:
        del self._all[letter.id]
        mine = self._by_service[letter.service]
        del mine[letter.id]
        left = self._service_bytes[letter.service] - letter.size
        if mine:
            self._service_bytes[letter.service] = left
        else:
            del self._by_service[letter.service], self._service_bytes[letter.service]
        self.bytes -= letter.size
        self._ledger.release(letter.charged, Holding.DEAD, letter.size)

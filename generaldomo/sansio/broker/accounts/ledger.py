"""The ledger: every byte the broker holds on a peer's behalf, charged to the connection it came from.

This module owns the accounts and the budgets, and nothing else. A *connection* is the link a message came
over and the first hop of its address (the ROUTER identity or the SERVER routing id of the socket connection
itself): the hops of an envelope after the first are what the peer says of itself, so a forged hop never
makes a new connection (:func:`connection`). Each holding is charged with its size in bytes to its
connection and to the total when it is made and released when it goes; the callers (the broker core for
tasks, workers, services, flow entries, clients it listens to, kept answers and dead letters; the IO layer for
replies not yet on their way) say how many bytes each holding costs, overheads included (:data:`OVERHEAD`).

Rules: :meth:`Ledger.admit` says whether a new holding fits (the connection's budget, the total budget and
the connection's cap on holdings of its kind) without charging anything; :meth:`Ledger.charge` charges
unconditionally (what was admitted, or what must be kept anyway, such as a reply on its way) and
:meth:`Ledger.release` gives back exactly what a charge took. Kept answers and dead letters (:data:`ASIDE`) are
charged and shown like the rest but leave the budgets to others: each has a budget of its own, whose oldest are
evicted first, so a busy client's answers (or its failed tasks) never make its next request wait. An account
exists only while it holds something, so the ledger costs memory only for connections with holdings. It knows
nothing of sockets, clocks, messages or what the holdings are.
"""

from __future__ import annotations

import dataclasses
import enum
import heapq
from collections.abc import Iterable, Mapping
from typing import Final

__all__ = [
    "ASIDE",
    "CHARGED",
    "ENVELOPE_HOP",
    "FRAME",
    "MARGIN",
    "OVERHEAD",
    "RESERVE",
    "TENANT_LIMIT",
    "Account",
    "ConnectionId",
    "Holding",
    "Ledger",
    "Refusal",
    "address_bytes",
    "connection",
    "exceeds",
    "flow_charge",
    "request_charge",
]

ConnectionId = tuple[int, bytes | int]  # (link, the first hop of the address)


def connection(link: int, address: bytes | int | tuple[bytes, ...]) -> ConnectionId:
    """The connection a message from ``address`` on ``link`` came over: the first hop of an envelope."""
    return (link, address if not isinstance(address, tuple) else address[0])


def address_bytes(address: bytes | int | tuple[bytes, ...]) -> int:
    """Bytes an address holds in memory beyond a fixed overhead: the hops of an envelope."""
    if isinstance(address, bytes):
        return len(address)
    if isinstance(address, int):
        return 0
    return sum(map(len, address)) + ENVELOPE_HOP * len(address)


def request_charge(size: int, frames: int, request_id: bytes | None, address: bytes | int | tuple[bytes, ...]) -> int:
    """What a request costs: ``size`` bytes of description and body in ``frames`` body frames, its id and the
    envelope it came with, and the overhead of a task."""
    return (
        OVERHEAD[Holding.TASK]
        + size
        + FRAME * frames
        + (0 if request_id is None else len(request_id))
        + (address_bytes(address))
    )


def exceeds(budget: int | None, total: int, held: int) -> bool:
    """True when ``total`` bytes in all, ``held`` of them for the connection asking, break ``budget`` (None: no
    budget). The small-request rule, the same for every budget shared by all connections (the ledger's total,
    the queue budgets): a connection that would hold no more than :data:`RESERVE` bytes still gets in when the
    budget is full, as long as the total stays within the budget and a :data:`MARGIN` of it, so that whoever
    fills a budget, a peer with one small request at a time is still served."""
    return budget is not None and total > budget and (held > RESERVE or total > budget + budget * MARGIN)


def flow_charge(name: str, tenants: Iterable[str] = ()) -> int:
    """What a flow entry for the service name ``name`` costs, with limits for the ``tenants`` it names (each
    :data:`TENANT_LIMIT` bytes and its name: a peer may name 1024 per entry)."""
    return OVERHEAD[Holding.FLOW] + len(name.encode()) + sum(TENANT_LIMIT + len(t.encode()) for t in tenants)


class Holding(enum.Enum):
    """What a holding is."""

    TASK = "tasks"  # a queued or running request: ids, description, body, envelope
    WORKER = "workers"  # a registered worker: description, envelope, what it said of itself
    SERVICE = "services"  # a service a peer's request or READY made, with its queues, flow and statistics
    FLOW = "flows"  # flow limits set for a service name through mmi.flow, its tenants' limits too
    CLIENT = "clients"  # a generaldomo client the broker listens to (for its silence)
    KEPT = "kept"  # a final answer kept for the client's re-asks
    DEAD = "dead"  # a task that finally failed, kept in its service's dead letters
    UNSENT = "unsent"  # replies handed to the socket that have not left the process

    # members are singletons: the C identity hash serves, not Enum's own (it hashes the name in Python at every dict
    # or set lookup); without both enums here, the core costs 9,900 instructions more per request and reply, 5.2 %
    # (``python -m bench.peer_instructions --role core``, 2026-12-07)
    __hash__ = object.__hash__


# Bytes a holding costs beyond the bytes of its fields (records, dictionary and queue entries, small
# objects), measured with tracemalloc on CPython 3.11 and rounded up
# (tests/sansio/broker/accounts/test_ledger.py checks them).
OVERHEAD: Final[Mapping[Holding, int]] = {
    Holding.TASK: 768,
    Holding.WORKER: 1536,
    Holding.SERVICE: 48 * 1024,  # its queues, flow state, recent times and its latest fair.KEEP_IDLE idle tenants
    Holding.FLOW: 512,
    Holding.CLIENT: 384,
    Holding.KEPT: 512,
    Holding.DEAD: 640,  # its record, its letters' entries (by id, by service) and its reason's text
    Holding.UNSENT: 0,
}
# Holdings with a budget of their own, the oldest evicted first: they leave the connections' and the total budgets
# to the others (Account.kept counts their bytes).
ASIDE: Final = frozenset({Holding.KEPT, Holding.DEAD})
TENANT_LIMIT: Final = (
    256  # bytes one tenant's limits in a flow entry cost beyond its name (the entry, the queue's copy)
)
ENVELOPE_HOP: Final = 64  # bytes one hop of an envelope costs beyond its length (a bytes object, a tuple slot)
CHARGED: Final = "charged to the connection whose message made it, as "  # how a holding says it is charged
RESERVE: Final = 64 * 1024  # bytes a connection may hold beyond a full total budget, within the margin below
MARGIN: Final = 0.125  # the share of the total budget that the connections holding little may go beyond it
FRAME: Final = 48  # bytes one frame of a message costs beyond its length (a bytes object, a tuple or list slot)


class Refusal(enum.Enum):
    """Why a holding does not fit; the value names the broker's counter."""

    CONNECTION_BYTES = "refused_connection_bytes"
    TOTAL_BYTES = "refused_total_bytes"
    CONNECTION_COUNT = "refused_connection_count"

    __hash__ = object.__hash__  # (as Holding's)

    def counter(self, kind: Holding) -> str:
        """The counter of this refusal for a holding of ``kind``."""
        if self is Refusal.CONNECTION_COUNT:
            return f"refused_connection_{kind.value}"
        return str(self.value)


@dataclasses.dataclass(slots=True, init=False)
class Account:
    """What one connection holds: bytes (``kept``: of them, in kept answers and dead letters, :data:`ASIDE`), and
    how many holdings of each kind (None: none yet, a new dict). Its ``__init__`` is written out so that the
    compiled core builds it natively (see :mod:`generaldomo.sansio.wire.events`)."""

    bytes: int
    kept: int
    tasks: int  # of them, in requests (what the queue budgets count)
    counts: dict[Holding, int]

    def __init__(self, bytes: int = 0, kept: int = 0, tasks: int = 0, counts: dict[Holding, int] | None = None) -> None:
        self.bytes = bytes
        self.kept = kept
        self.tasks = tasks
        self.counts = {} if counts is None else counts

    def count(self, kind: Holding) -> int:
        return self.counts.get(kind, 0)


class Ledger:
    """Accounts by connection, a total, and the budgets: ``total`` bytes in all, ``per_connection`` bytes per
    connection (None: no budget), and ``caps``: at most so many holdings of a kind per connection."""

    def __init__(
        self, total: int | None = None, per_connection: int | None = None, caps: Mapping[Holding, int | None] = {}
    ) -> None:
        self.total_budget = total
        self.connection_budget = per_connection
        self.caps = {kind: cap for kind, cap in caps.items() if cap is not None}
        self.total = 0
        self.by_kind: dict[Holding, int] = dict.fromkeys(Holding, 0)  # bytes held, per kind of holding
        self._accounts: dict[ConnectionId, Account] = {}

    def __len__(self) -> int:
        """Connections with holdings."""
        return len(self._accounts)

    def account(self, where: ConnectionId) -> Account:
        """What ``where`` holds (an empty account if nothing)."""
        return self._accounts.get(where) or Account()

    def tasks(self, where: ConnectionId) -> int:
        """Bytes of tasks charged to ``where`` (no account is made for the asking)."""
        account = self._accounts.get(where)
        return 0 if account is None else account.tasks

    def held(self, where: ConnectionId) -> int:
        """Bytes charged to ``where``."""
        account = self._accounts.get(where)
        return 0 if account is None else account.bytes

    def admit(self, where: ConnectionId, kind: Holding, size: int) -> Refusal | None:
        """Why a new holding of ``kind`` and ``size`` bytes for ``where`` does not fit, or None if it does."""
        account = self._accounts.get(where)
        cap = self.caps.get(kind)
        if cap is not None and account is not None and account.counts.get(kind, 0) >= cap:
            return Refusal.CONNECTION_COUNT
        return self.room(where, size, account)

    def room(self, where: ConnectionId, size: int, account: Account | None = None) -> Refusal | None:
        """Why ``size`` more bytes for ``where`` would break a byte budget, or None if they fit (the total: by
        the small-request rule, :func:`exceeds`)."""
        if account is None:
            account = self._accounts.get(where)
        held = size + (0 if account is None else account.bytes - account.kept)
        aside = self.by_kind[Holding.KEPT] + self.by_kind[Holding.DEAD]
        if exceeds(self.total_budget, self.total - aside + size, held):
            return Refusal.TOTAL_BYTES
        if self.connection_budget is not None and held > self.connection_budget:
            return Refusal.CONNECTION_BYTES
        return None

    def over_budget(self, where: ConnectionId, size: int = 0) -> bool:
        """True when ``where`` holds more than its budget (kept answers aside), or would with ``size`` more."""
        account = self._accounts.get(where)
        budget = self.connection_budget
        return budget is not None and size + (0 if account is None else account.bytes - account.kept) > budget

    def charge(self, where: ConnectionId, kind: Holding, size: int) -> None:
        """Charge one holding of ``kind`` and ``size`` bytes to ``where``, whatever the budgets."""
        account = self._accounts.get(where)
        if account is None:
            account = self._accounts[where] = Account()
        account.bytes += size
        if kind in ASIDE:
            account.kept += size
        elif kind is Holding.TASK:
            account.tasks += size
        counts = account.counts
        counts[kind] = counts.get(kind, 0) + 1
        self.total += size
        self.by_kind[kind] += size

    def release(self, where: ConnectionId, kind: Holding, size: int) -> None:
        """Give back one holding of ``kind`` and ``size`` bytes that was charged to ``where``."""
        account = self._accounts[where]
        account.bytes -= size
        if kind in ASIDE:
            account.kept -= size
        elif kind is Holding.TASK:
            account.tasks -= size
        counts = account.counts
        left = counts[kind] - 1
        if left:
            counts[kind] = left
        else:
            del counts[kind]
            if not counts:
                del self._accounts[where]
        self.total -= size
        self.by_kind[kind] -= size

    def top(self, n: int) -> list[tuple[ConnectionId, Account]]:
        """The ``n`` connections holding the most bytes, most first."""
        return heapq.nlargest(n, self._accounts.items(), key=lambda item: item[1].bytes)

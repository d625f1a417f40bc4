"""The broker core's clients: those it listens to, and what it sends them beyond the answers of their tasks.

This module owns the generaldomo clients the broker listens to (each last heard when, oldest first: their queued tasks
live while they are not silent; each charged to its connection), the HEARTBEAT answer's list of the re-asked ids the
broker does not know (bounded in bytes, none while the connection is over its budget), kept answers sent again to a
client that re-asks (within its connection's budget and work per second), and the line of expensive management requests
waiting for their connection's work per second (:mod:`generaldomo.sansio.broker.accounts.pacing`). The core
(:mod:`generaldomo.sansio.broker.core`) decides what a message means and answers it; this part keeps the clients' side
of it. It knows nothing of sockets, clocks or frames' layout.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import TypeAlias

from generaldomo.sansio.broker.access import Credential
from generaldomo.sansio.broker.accounts.ledger import (
    CHARGED,
    OVERHEAD,
    ConnectionId,
    Holding,
    Ledger,
    address_bytes,
    connection,
)
from generaldomo.sansio.broker.accounts.pacing import Pacer, resend_cost
from generaldomo.sansio.broker.core.counters import Counters
from generaldomo.sansio.broker.records import Peer
from generaldomo.sansio.wire.events import ClientRequest

__all__ = ["ECHO_BYTES", "HOLDINGS", "Clients", "Waiting"]

HOLDINGS = {  # what this part holds on peers' behalf (see generaldomo.sansio.broker.core.HOLDINGS)
    "_heard": CHARGED + "clients (beyond the budgets a client is not listened to)",
    "pacer": "pacing: lines bounded in bytes of waiting requests (pacing.WAITING_BYTES)",
}

ECHO_BYTES = 16 * 1024  # bytes of unknown request ids one HEARTBEAT answer names at most
Waiting: TypeAlias = tuple[Peer, ClientRequest, Credential | None]  # a management request waiting its turn


class Clients:
    """The clients' side of the broker (see the module docstring)."""

    def __init__(self, ledger: Ledger, counters: Counters) -> None:
        self._ledger = ledger
        self._counters = counters
        self._heard: OrderedDict[Peer, float] = OrderedDict()  # generaldomo clients -> last heard, oldest first
        # expensive management requests: each connection's work per second, and those waiting for it
        self.pacer: Pacer[Waiting] = Pacer()
        self._paced_due: float | None = None  # when the next waiting one may go

    # ------------------------------------------------------------------------------------------- listening

    def __len__(self) -> int:
        """How many clients the broker listens to."""
        return len(self._heard)

    def listening(self, peer: Peer) -> bool:
        """True when the broker listens to the client at ``peer``."""
        return peer in self._heard

    @staticmethod
    def charge(peer: Peer) -> int:
        """What listening to the client at ``peer`` costs its connection."""
        return OVERHEAD[Holding.CLIENT] + address_bytes(peer.address)

    def listen(self, peer: Peer, where: ConnectionId, now: float) -> None:
        """Note that the generaldomo client at ``peer`` was heard (its queued tasks live while it is not silent);
        a client the broker did not listen to yet is charged to its connection, and not listened to beyond the
        budgets (its tasks then wait as MDP ones do, without the silence rule)."""
        heard = self._heard
        if peer in heard:
            heard[peer] = now
            heard.move_to_end(peer)
            return
        size = self.charge(peer)
        if self._ledger.admit(where, Holding.CLIENT, size) is None:
            self._ledger.charge(where, Holding.CLIENT, size)
            heard[peer] = now

    def refresh(self, peer: Peer, now: float) -> None:
        """A generaldomo client the broker listens to was heard again."""
        heard = self._heard
        if peer in heard:
            heard[peer] = now
            heard.move_to_end(peer)

    def silent(self, heard_before: float) -> set[Peer]:
        """The clients last heard before ``heard_before``, no longer listened to (their charges released)."""
        silent = set()
        heard = self._heard
        while heard:
            peer, when = next(iter(heard.items()))  # the one heard least recently
            if when >= heard_before:
                break
            silent.add(peer)
            del heard[peer]
            self._ledger.release(connection(peer.link, peer.address), Holding.CLIENT, self.charge(peer))
        return silent

    def holdings(self) -> Iterator[tuple[ConnectionId, Holding, int]]:
        """The clients listened to, as ``(connection, kind, bytes)``."""
        for peer in self._heard:
            yield connection(peer.link, peer.address), Holding.CLIENT, self.charge(peer)

    # ------------------------------------------------------------------------------------------- answers

    def echo(self, peer: Peer, unknown: list[bytes]) -> list[bytes]:
        """The re-asked ids a HEARTBEAT answer names as unknown: at most :data:`ECHO_BYTES` of them (the client
        asks about the others again), and none while ``peer``'s connection is over its budget."""
        if not unknown:
            return unknown
        if self._ledger.over_budget(connection(peer.link, peer.address)):
            self._counters.echoes_refused += len(unknown)
            return []
        echoed: list[bytes] = []
        room = ECHO_BYTES
        for rid in unknown:
            room -= len(rid)
            if room < 0:
                self._counters.echoes_refused += len(unknown) - len(echoed)
                break
            echoed.append(rid)
        return echoed

    def may_resend(self, peer: Peer, size: int, now: float) -> bool:
        """True when a kept answer of ``size`` bytes may go again to ``peer`` now (its work charged); else it asks
        again later, when its connection has room or its work allows (counted)."""
        where = connection(peer.link, peer.address)
        if self._ledger.over_budget(where, size):
            self._counters.resends_refused += 1
            return False
        if not self.pacer.may_go(where, now):
            self._counters.resends_paced += 1
            return False
        self._counters.answers_resent += 1
        self.pacer.charge(where, resend_cost(size), now)
        return True

    # ------------------------------------------------------------------------------------------- paced requests

    def may_go(self, peer: Peer, now: float) -> bool:
        """True when ``peer``'s connection may have an expensive management request answered now."""
        return self.pacer.may_go(connection(peer.link, peer.address), now)

    def wait(self, waiting: Waiting, size: int, now: float) -> float | None:
        """Put an expensive management request (``waiting``, of ``size`` bytes) in its connection's line: None, it
        waits for its turn (counted ``paced``); or, beyond the waiting lines, the seconds after which one may go
        (counted ``paced_refused``: the caller answers it ``429``)."""
        peer = waiting[0]
        later = self.pacer.wait(connection(peer.link, peer.address), waiting, size, now)
        if later is None:
            self._counters.paced += 1
            self._paced_due = self.pacer.due(now)
        else:
            self._counters.paced_refused += 1
        return later

    def spent(self, peer: Peer, work: int, now: float) -> None:
        """Charge ``work`` (a management answer's cost) to ``peer``'s connection."""
        self.pacer.charge(connection(peer.link, peer.address), work, now)

    def due(self) -> float | None:
        """When the next waiting management request may go, or None."""
        return self._paced_due

    def ready(self, now: float) -> Iterator[Waiting]:
        """The waiting management requests whose turn has come at ``now``, in order."""
        for _, waiting in self.pacer.ready(now):
            yield waiting
        self._paced_due = self.pacer.due(now)

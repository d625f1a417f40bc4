"""The broker core's registered workers: its table of them, their heartbeat turns, their rests and their hosts.

This module owns who is registered: each worker by peer in order of registration with its serial, and by the
identity it keeps across its reconnects if it gave one (one registration per identity), the queue of
their heartbeat turns (next due first), those a 429's ``retry_after`` holds back until when, how many run on each
announced host, and each worker's charge to the ledger while it is registered. The core
(:mod:`generaldomo.sansio.broker.core`) decides who registers, who leaves and what is sent; this part only keeps the
table, and changes no worker's state. It knows nothing of sockets, clocks, frames or services' queues.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Iterator

from generaldomo.sansio.broker.accounts.ledger import CHARGED, Holding, Ledger, connection
from generaldomo.sansio.broker.deadlines import Deadlines
from generaldomo.sansio.broker.records import Identity, Peer, WorkerRecord
from generaldomo.sansio.broker.report import StatusQuery
from generaldomo.sansio.queues import Queue

__all__ = ["BEATS_PER_TICK", "HOLDINGS", "MAX_HOSTS", "Workers"]

HOLDINGS = {  # what this part holds on peers' behalf (see generaldomo.sansio.broker.core.HOLDINGS)
    "_beats": CHARGED + "workers",
    "_by_peer": CHARGED + "workers",
    "_by_identity": CHARGED + "workers",
    "_hosts": CHARGED + "workers",
    "_resting": CHARGED + "workers",
}

BEATS_PER_TICK = 1024  # workers one tick heartbeats (and checks for silence) at most: a long table waits its turn
MAX_HOSTS = 32  # hosts the status report counts workers of by name; the others' are summed as "other"


class Workers:
    """The registered workers (see the module docstring); ``ledger``: where each one's charge is held."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger
        self._by_peer: dict[Peer, WorkerRecord] = {}  # in order of registration
        self._by_identity: dict[Identity, WorkerRecord] = {}  # those that gave one: the latest registration of each
        self._serial = 0  # the serial of the latest registered worker
        self._hosts: Counter[str] = Counter()  # registered workers per announced host ("unknown": none)
        self._beats: Queue[WorkerRecord] = Queue(tracked=True)  # registered workers, next heartbeat due first
        self._resting: Deadlines[WorkerRecord] = Deadlines(_awake)  # workers a 429's retry_after holds back, until when

    @property
    def by_peer(self) -> dict[Peer, WorkerRecord]:
        """The registered workers by peer, in order of registration (read only)."""
        return self._by_peer

    def __len__(self) -> int:
        return len(self._by_peer)

    def get(self, peer: Peer) -> WorkerRecord | None:
        """The worker registered at ``peer``, if any."""
        return self._by_peer.get(peer)

    def holding(self, identity: Identity) -> WorkerRecord | None:
        """The worker registered under ``identity``, if any."""
        return self._by_identity.get(identity)

    def add(self, worker: WorkerRecord, beat: float) -> None:
        """Register ``worker`` (its charge held), its first heartbeat due at ``beat``; it holds its identity, if it
        has one (the caller has retired any other registration under it)."""
        self._serial += 1
        worker.serial = self._serial
        worker.beat = beat
        peer = worker.peer
        self._ledger.charge(connection(peer.link, peer.address), Holding.WORKER, worker.charge)
        self._by_peer[peer] = worker
        if worker.identity is not None:
            self._by_identity[worker.identity] = worker
        self._hosts[worker.host or "unknown"] += 1
        self._beats.append(worker)

    def remove(self, worker: WorkerRecord) -> None:
        """Take ``worker`` out of the table, its heartbeat turn, its rest and its host's count; its charge is
        released."""
        peer = worker.peer
        del self._by_peer[peer]
        if worker.identity is not None and self._by_identity.get(worker.identity) is worker:
            del self._by_identity[worker.identity]
        self._beats.remove(worker)
        host = worker.host or "unknown"
        if self._hosts[host] > 1:
            self._hosts[host] -= 1
        else:
            del self._hosts[host]
        self._ledger.release(connection(peer.link, peer.address), Holding.WORKER, worker.charge)
        if worker.rests is not None:
            worker.rests = None
            self._resting.forget()

    def clear(self) -> list[WorkerRecord]:
        """Every registered worker, the table emptied (the broker goes away)."""
        workers = list(self._by_peer.values())
        self._by_peer.clear()
        self._by_identity.clear()
        return workers

    def rest(self, worker: WorkerRecord, until: float) -> None:
        """Hold ``worker`` back from tasks until ``until`` (a 429's retry_after)."""
        worker.rests = until
        self._resting.add(until, worker)

    def resting(self) -> bool:
        """True when some worker rests."""
        return bool(self._resting)

    def woken(self, now: float) -> Iterator[WorkerRecord]:
        """The workers whose rest is over at ``now``, each no longer resting as it comes."""
        for worker in self._resting.due(now):
            worker.rests = None
            self._resting.forget()
            yield worker

    def beat_due(self, now: float) -> bool:
        """True when some worker's heartbeat is due at ``now``."""
        return bool(self._beats) and self._beats[0].beat <= now

    def beats(self, now: float, interval: float) -> tuple[list[WorkerRecord], list[WorkerRecord]]:
        """The workers whose heartbeat is due at ``now``, at most :data:`BEATS_PER_TICK`: those to heartbeat (their
        next turn an ``interval`` later), and those silent past their expiry (out of the turns; the caller makes
        them leave)."""
        beats = self._beats
        beaten: list[WorkerRecord] = []
        expired: list[WorkerRecord] = []
        for _ in range(BEATS_PER_TICK):
            if not beats or beats[0].beat > now:
                break
            worker = beats.popleft()
            if worker.expires <= now:
                expired.append(worker)
                continue
            worker.beat = now + interval
            beats.append(worker)
            beaten.append(worker)
        return beaten, expired

    def next_due(self) -> float | None:
        """When the next heartbeat or the end of a rest is due, or None."""
        soonest = self._beats[0].beat if self._beats else None
        if self._resting:
            due = self._resting.soonest()
            if due is not None and (soonest is None or due < soonest):
                soonest = due
        return soonest

    def hosts(self) -> dict[str, int]:
        """Workers per announced host ("unknown": none announced) for the :data:`MAX_HOSTS` hosts with the most,
        the others summed as "other": a few entries, whatever the workers say."""
        named = self._hosts.most_common(MAX_HOSTS)
        rest = len(self._by_peer) - sum(n for _, n in named)
        return dict(sorted(named)) | ({"other": rest} if rest else {})

    def page(self, query: StatusQuery) -> list[WorkerRecord]:
        """The workers of ``query``'s page and one more if there are more, in order of registration."""
        workers: Iterable[WorkerRecord] = self._by_peer.values()
        after, name = query.workers_after, query.service
        if after is not None:
            workers = itertools.dropwhile(lambda worker: worker.serial <= after, workers)
        if name is not None:
            workers = (worker for worker in workers if worker.service.name == name)
        return list(itertools.islice(workers, query.limit + 1))


def _awake(worker: WorkerRecord) -> bool:
    return worker.rests is None

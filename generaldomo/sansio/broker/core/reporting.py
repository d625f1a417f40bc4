"""The broker core's reports and log lines: the status report, and peers named by their labels.

This module owns what the broker tells about itself: the status report (:mod:`generaldomo.sansio.broker.report`'s
records, built from what the core and its parts hold, read, never changed), the endpoints the IO layer says it
is bound to, and the log lines about peers, rate-limited per kind and connection, which name a peer by its label
(:mod:`generaldomo.sansio.labels`), never by its address. It knows nothing of sockets, clocks or frames.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable, Hashable, Iterable, Sequence

from generaldomo.sansio.broker.accounts.dead import DeadLetters
from generaldomo.sansio.broker.accounts.kept import KeptAnswers
from generaldomo.sansio.broker.accounts.ledger import ConnectionId, Ledger, connection
from generaldomo.sansio.broker.core.budgets import Budgets
from generaldomo.sansio.broker.core.counters import Counters
from generaldomo.sansio.broker.core.workers import Workers
from generaldomo.sansio.broker.records import Peer, WorkerRecord
from generaldomo.sansio.broker.report import (
    DESCRIPTION_BYTES,
    BrokerReport,
    ConnectionReport,
    DeadLettersReport,
    Endpoint,
    JournalReport,
    LedgerReport,
    NextPage,
    PairReport,
    ServiceReport,
    SettingsReport,
    StatusQuery,
    StatusReport,
    WorkerReport,
    page,
)
from generaldomo.sansio.broker.services.service import Service
from generaldomo.sansio.config.settings import Settings
from generaldomo.sansio.labels import PeerLabels
from generaldomo.sansio.lograte import LogLimiter
from generaldomo.sansio.wire import limits

__all__ = ["HOLDINGS", "TOP_CONNECTIONS", "Reporting"]

HOLDINGS = {  # what this part holds on peers' behalf (see generaldomo.sansio.broker.core.HOLDINGS)
    "_dead": "the dead letters' part's store, read (charged there)",
    "_endpoints": "the operator's (set_endpoints)",
    "_warnings": "bounded: rate-limited per connection, flushed each sweep",
}

TOP_CONNECTIONS = 10  # connections the status report names, those holding the most bytes


class Reporting:
    """The broker's status report and log lines (see the module docstring).

    Args:
        log: the logger of the broker's lines.
        labels: names peers (its key the broker's, random per start).
        settings, counters, ledger, kept, workers, budgets: what the report reads.
        services: the services there are (the resolver's), each time it is called.
        dead: the dead letters (none: an empty store).
    """

    def __init__(
        self, log: logging.Logger, labels: PeerLabels, settings: Settings, counters: Counters, ledger: Ledger,
        kept: KeptAnswers, workers: Workers, budgets: Budgets, services: Callable[[], Iterable[Service]],
        dead: DeadLetters | None = None,
    ) -> None:  # fmt: skip
        self.labels = labels
        self._settings = settings
        self._counters = counters
        self._ledger = ledger
        self._kept = kept
        self._workers = workers
        self._budgets = budgets
        self._services = services
        self._dead = dead if dead is not None else DeadLetters(0, 0)
        self._endpoints: list[tuple[str, str]] = []
        self._warnings = LogLimiter(log)
        self.pair: Callable[[float], PairReport] | None = None  # the broker pair's report, when in a pair
        self.journal: Callable[[], JournalReport] | None = None  # the write-ahead log's, with a state directory

    def set_endpoints(self, endpoints: Sequence[tuple[str, str]]) -> None:
        """What the broker's links are bound to, as ``(transport, endpoint)``."""
        self._endpoints = list(endpoints)

    # ------------------------------------------------------------------------------------------- logs

    def label(self, peer: Peer) -> str:
        """An opaque name for ``peer`` in reports and logs (see :mod:`generaldomo.sansio.labels`)."""
        return self.labels(peer.link, peer.address)

    def connection_label(self, where: ConnectionId) -> str:
        """An opaque name for a connection: its link and a keyed hash of its first hop (as its peers' labels
        for a direct peer)."""
        return self.label(Peer(*where))

    def tenant_name(self, tenant: object) -> str:
        """A tenant's name in reports: its key or given name, or its connection's label."""
        return tenant if isinstance(tenant, str) else f"conn/{self.label(tenant)}" if isinstance(tenant, Peer) else "?"

    def warn(
        self, kind: str, peer: Peer, now: float, message: str, *args: object, level: int = logging.WARNING,
        key: Hashable = None,
    ) -> None:  # fmt: skip
        """Log about ``peer``, rate-limited per kind and connection (the hops of an envelope after the first are
        the peer's to make up), or per ``key`` if given: a refused worker's CURVE key or description, which stay
        the same when it comes back on a new connection."""
        where = connection(peer.link, peer.address)
        window = where if key is None else key
        self._warnings.warn(kind, window, lambda: self.connection_label(where), now, message, *args, level=level)

    def warn_all(self, kind: str, what: str, now: float, message: str, *args: object) -> None:
        """Log ``message`` about ``what`` (e.g. "new workers"), one line per interval for all peers: a flood
        comes from many (claimed) peers."""
        self._warnings.warn(kind, None, lambda: what, now, message, *args)

    def flush(self, now: float) -> bool:
        """Log the lines held back whose interval is over; True while some are still held."""
        self._warnings.flush(now)
        return bool(self._warnings)

    # ------------------------------------------------------------------------------------------- the report

    def report(
        self, now: float, query: StatusQuery, page_bytes: int, *, instance: bytes, started: float
    ) -> StatusReport:
        """The status report at ``now`` of the broker ``instance`` started at ``started``: its totals, and the page
        of services and workers ``query`` asks for, of ``page_bytes`` at most (see
        :meth:`generaldomo.sansio.broker.core.BrokerCore.report`)."""
        expiry = self._settings.expiry
        services, count, queued, in_flight = self._service_page(query)
        workers = self._workers.page(query)
        counters, kept = self._counters, self._kept
        broker = BrokerReport(
            instance=instance.hex(),
            uptime=round(now - started, 3),
            endpoints=[Endpoint(transport=str(t), endpoint=endpoint) for t, endpoint in self._endpoints],
            counters=counters.reported(),
            queued=queued,
            settings=SettingsReport.of(self._settings, limits.as_settings()),
            queued_bytes=self._budgets.total,
            kept_answers=len(kept),
            kept_bytes=kept.bytes,
            kept_evicted=kept.evicted,
            ledger=self._ledger_report(),
            service_count=count,
            worker_count=len(self._workers),
            hosts=self._workers.hosts(),
            internal_errors=counters.internal_errors,
            in_flight=in_flight,
            dead_letters=DeadLettersReport.of(self._dead, now),
            pair=None if self.pair is None else self.pair(now),
            journal=None if self.journal is None else self.journal(),
        )
        held = self._budgets.held
        service_reports, more_services = page(
            services, query.limit, lambda s: ServiceReport.of(s, held(s), now, self.tenant_name), page_bytes
        )
        worker_reports, more_workers = page(
            workers, query.limit, lambda worker: self._worker_report(worker, now, expiry), page_bytes
        )
        next_page = NextPage(  # after the last one listed, when there is one more
            services_after=service_reports[-1].name if more_services and query.order == "name" else None,
            workers_after=worker_reports[-1].serial if more_workers else None,
        )
        return StatusReport(broker=broker, services=service_reports, workers=worker_reports, next=next_page)

    @staticmethod
    def _worker_report(worker: WorkerRecord, now: float, expiry: float) -> WorkerReport:
        return WorkerReport(
            peer=worker.label,
            description=worker.description[:DESCRIPTION_BYTES].decode(errors="replace"),
            service=worker.service.name,
            dialect=worker.dialect.value,
            state=worker.state.value,
            tasks_done=worker.done,
            last_seen=round(max(0.0, now - (worker.expires - expiry)), 3),
            host=worker.host,
            pid=worker.pid,
            description_bytes=len(worker.description),
            serial=worker.serial,
        )

    def _service_page(self, query: StatusQuery) -> tuple[list[Service], int, int, int]:
        """The services of ``query``'s page and one more if there are more (in its order), the number of
        services, and the tasks queued and in flight in all."""
        count = queued = in_flight = 0
        chosen: list[Service] = []
        name, after = query.service, query.services_after
        for service in self._services():
            count += 1
            queued += len(service.pending)
            in_flight += service.flow.in_flight
            if (name is None or service.name == name) and (after is None or service.name > after):
                chosen.append(service)
        if query.order == "busy":
            busiest = heapq.nsmallest(query.limit, chosen, key=_busy)
            return busiest, count, queued, in_flight
        return heapq.nsmallest(query.limit + 1, chosen, key=_name), count, queued, in_flight

    def _ledger_report(self) -> LedgerReport:
        ledger = self._ledger
        top = [
            ConnectionReport(
                connection=self.connection_label(where),
                bytes=account.bytes,
                holdings={k.value: n for k, n in account.counts.items()},
            )
            for where, account in ledger.top(TOP_CONNECTIONS)
        ]
        held = {kind.value: size for kind, size in ledger.by_kind.items() if size}
        return LedgerReport(held_bytes=ledger.total, by_kind=held, connections=len(ledger), top=top)


def _name(service: Service) -> str:
    return service.name


def _busy(service: Service) -> tuple[int, str]:
    """Sort key of the busiest services first: most workers, queued tasks and tasks in flight, then by name."""
    return (-(len(service.workers) + len(service.pending) + service.flow.in_flight), service.name)

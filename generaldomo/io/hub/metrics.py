"""Prometheus exposition of the broker's status report, on an optional HTTP port.

This module owns the mapping from the typed status report (:class:`~generaldomo.sansio.broker.report.StatusReport`)
to Prometheus metrics. It reads the snapshot the broker's loop refreshes, never the live core, so it can run
on the HTTP server's thread; the snapshot has the broker's totals, the ledger, workers per host and the 200
busiest services (:data:`generaldomo.io.broker.SNAPSHOT`), so neither its cost nor the number of series grows
with what peers make. It needs the optional ``prometheus_client`` package
(``pip install generaldomo[metrics]``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any, cast

from generaldomo.sansio.broker.flow.flow import FLOW
from generaldomo.sansio.broker.report import DeadLettersReport, ServiceReport, StatusReport, WorkerReport
from generaldomo.sansio.config import knobs

__all__ = ["MAX_HOSTS", "PAIR_STATES", "PREFIX", "StatusCollector", "serve", "workers_by_host"]

PREFIX = "generaldomo"
MAX_HOSTS = 32  # hosts named in the workers-by-host gauge; workers on the others count as host "other"
_SERVICE_GAUGES: dict[str, Callable[[ServiceReport], float]] = {
    "workers": lambda s: s.workers,
    "waiting": lambda s: s.waiting,
    "queued": lambda s: s.queued,
    "delayed": lambda s: s.delayed,
    "queued_bytes": lambda s: s.queued_bytes,
    "in_flight": lambda s: s.in_flight,
    "in_flight_bytes": lambda s: s.flow.in_flight_bytes,
    "observed_rate": lambda s: s.observed_rate,
}
_SERVICE_COUNTERS: dict[str, Callable[[ServiceReport], float]] = {
    "completed": lambda s: s.completed,
    "failed": lambda s: s.failed,
    "reissued": lambda s: s.reissued,
    "duplicates_dropped": lambda s: s.duplicates_dropped,
    "expired": lambda s: s.expired,
    "throttled": lambda s: s.throttled,
    "retried": lambda s: s.retried,
}


def _cap(service: ServiceReport) -> int | None:
    adaptive = service.flow.adaptive
    return None if adaptive is None else adaptive.cap


def _floor(service: ServiceReport) -> float | None:
    adaptive = service.flow.adaptive
    return None if adaptive is None else adaptive.floor


def _backoff_rate(service: ServiceReport) -> float | None:
    backoff = service.flow.backoff
    return None if backoff is None else backoff.rate


def _retries(service: ServiceReport) -> float | None:
    retry = service.flow.retry
    return None if retry is None else retry["retries"]


def _flow_field(field: str) -> Callable[[ServiceReport], float | None]:
    return lambda service: cast(float | None, getattr(service.flow, field))


# gauges shown for the services that have them (None: not set), by full name: the flow limits' (their knobs')
# and the state of the adaptive cap and of the rate adapted to 429s
_LIMITS: dict[str, tuple[str, Callable[[ServiceReport], float | None]]] = {
    **{
        knob.gauge: (f"Per service, the flow limit {knob.name}: {knob.help}", _flow_field(knob.field))
        for knob in FLOW
        if knob.gauge is not None and knob.field is not None
    },
    f"{PREFIX}_service_adaptive_limit": ("Tasks in flight the adaptive cap allows now", _cap),
    f"{PREFIX}_service_adaptive_floor_seconds": ("Least recent service time the adaptive cap measures against", _floor),
    f"{PREFIX}_service_backoff_rate": ("Dispatches per second the service's 429s allow now", _backoff_rate),
    f"{PREFIX}_service_time_estimate_seconds": (
        "The estimated service time deadline-aware dispatch reads",
        lambda service: service.service_time_estimate,
    ),
    f"{PREFIX}_service_retry_limit": ("Retries of a task the service's retry policy allows", _retries),
}


_TENANT_GAUGES = {
    "queued": "Per tenant of a service: tasks queued",
    "in_flight": "Per tenant of a service: tasks in flight",
    "weight": "Per tenant of a service: its weight in the fair shares",
    "dispatched": "Per tenant of a service: dispatches since it last appeared",
}


def _dead_letters(dead: DeadLettersReport) -> Iterator[Any]:
    """The dead letters: in all, their bytes, those evicted, and per service (the services the report names)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    yield GaugeMetricFamily(f"{PREFIX}_dead_letters", "Tasks that failed for good, kept as dead letters", dead.letters)
    yield GaugeMetricFamily(f"{PREFIX}_dead_letters_bytes", "Bytes of the dead letters", dead.bytes)
    yield CounterMetricFamily(
        f"{PREFIX}_dead_letters_evicted", "Dead letters dropped, oldest first, for their bounds", dead.evicted
    )
    family = GaugeMetricFamily(
        f"{PREFIX}_service_dead_letters", "Dead letters per service (those with the most)", labels=["service"]
    )
    for service in dead.services:
        family.add_metric([service.service], service.count)
    yield family


class StatusCollector:
    """A Prometheus collector over the latest status report (None until the first one exists)."""

    def __init__(self, snapshot: Callable[[], StatusReport | None]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        report = self._snapshot()
        if report is None:
            return
        broker = report.broker
        yield GaugeMetricFamily(f"{PREFIX}_uptime_seconds", "Seconds since the broker started", broker.uptime)
        yield GaugeMetricFamily(f"{PREFIX}_queued_bytes", "Bytes of requests the broker holds", broker.queued_bytes)
        yield GaugeMetricFamily(f"{PREFIX}_kept_answers", "Answers kept for re-asking clients", broker.kept_answers)
        yield from _dead_letters(broker.dead_letters)
        yield CounterMetricFamily(
            f"{PREFIX}_internal_errors",
            "Messages and periodic jobs whose handling raised an unexpected error (dropped, logged)",
            broker.internal_errors,
        )
        yield GaugeMetricFamily(f"{PREFIX}_services", "Services known, all of them", broker.service_count)
        yield GaugeMetricFamily(f"{PREFIX}_workers", "Registered workers, all of them", broker.worker_count)
        yield from _ledger(report)
        yield from _settings(report)
        yield from _pair(report)
        yield from _journal(report)
        events = CounterMetricFamily(f"{PREFIX}_events", "Broker events by kind", labels=["event"])
        for event, count in sorted(broker.counters.items()):
            events.add_metric([event], count)
        yield events
        services = report.services
        for kind, fields in ((GaugeMetricFamily, _SERVICE_GAUGES), (CounterMetricFamily, _SERVICE_COUNTERS)):
            for field, value in fields.items():
                family = kind(f"{PREFIX}_service_{field}", f"Per service: {field}", labels=["service"])
                for service in services:
                    family.add_metric([service.name], value(service))
                yield family
        for field in ("queue_time", "service_time"):
            family = GaugeMetricFamily(
                f"{PREFIX}_service_{field}_seconds", f"Recent {field} percentiles", labels=["service", "quantile"]
            )
            for service in services:
                for name, seconds in _percentiles(service, field):
                    family.add_metric([service.name, f"0.{name[1:]}"], seconds)
            yield family
        for name, (help_text, limit) in _LIMITS.items():
            family = GaugeMetricFamily(name, help_text, labels=["service"])
            for service in services:
                if (allowed := limit(service)) is not None:
                    family.add_metric([service.name], allowed)
            yield family
        for field, help_text in _TENANT_GAUGES.items():  # the busiest tenants the report lists (32 per service)
            family = GaugeMetricFamily(f"{PREFIX}_tenant_{field}", help_text, labels=["service", "tenant"])
            for service in services:
                for tenant in service.tenants:
                    family.add_metric([service.name, tenant.name], getattr(tenant, field))
            yield family
        busy = GaugeMetricFamily(
            f"{PREFIX}_service_busy_tenants", "Tenants with tasks queued or in flight", labels=["service"]
        )
        for service in services:
            busy.add_metric([service.name], service.busy_tenants)
        yield busy
        hosts = GaugeMetricFamily(f"{PREFIX}_workers_by_host", "Registered workers per host", labels=["host"])
        for host, count in broker.hosts.items() if broker.hosts else workers_by_host(report.workers):
            hosts.add_metric([host], count)
        yield hosts


def _settings(report: StatusReport) -> Iterator[Any]:
    """A gauge per broker setting that has a metric (its knob's), absent while it is None (no limit)."""
    from prometheus_client.core import GaugeMetricFamily

    settings = report.broker.settings
    for knob in knobs.SETTINGS:
        value = None if knob.field is None else getattr(settings, knob.field)
        if knob.gauge is not None and value is not None:
            unit = f" ({knob.unit})" if knob.unit else ""
            yield GaugeMetricFamily(knob.gauge, f"The broker setting {knob.name}{unit}: {knob.help}", value)


PAIR_STATES = ("primary", "backup", "active", "passive", "broken")  # a broker pair's states (pair.PairState)


def _pair(report: StatusReport) -> Iterator[Any]:
    """A broker pair's gauges (none for a broker alone): its state (1 for the one it is in, labelled with its role),
    the seconds since the peer broker was last heard (absent: never), the replication lag (absent: unknown) and the
    requests the replicated state holds."""
    from prometheus_client.core import GaugeMetricFamily

    pair = report.broker.pair
    if pair is None:
        return
    states = GaugeMetricFamily(
        f"{PREFIX}_pair_state",
        "A broker pair's state: 1 for this broker's (active: it serves)",
        labels=["role", "state"],
    )
    for state in PAIR_STATES:
        states.add_metric([pair.role, state], 1.0 if state == pair.state else 0.0)
    yield states
    if pair.last_contact is not None:
        yield GaugeMetricFamily(
            f"{PREFIX}_pair_last_contact_seconds",
            "Seconds since the peer broker of the pair was heard",
            pair.last_contact,
        )
    if pair.lag_records is not None:
        yield GaugeMetricFamily(
            f"{PREFIX}_replication_lag_records", "Journal records the passive broker had not applied", pair.lag_records
        )
    if pair.lag_seconds is not None:
        yield GaugeMetricFamily(
            f"{PREFIX}_replication_lag_seconds",
            "Seconds since the oldest record the passive broker had not applied was shipped",
            pair.lag_seconds,
        )
    yield GaugeMetricFamily(
        f"{PREFIX}_replicated_requests", "Requests the replicated state of the pair holds", pair.replicated_requests
    )


def _journal(report: StatusReport) -> Iterator[Any]:
    """The write-ahead log's figures (none without a state directory): records waiting for the writer, its size,
    its group commits and compactions."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    journal = report.broker.journal
    if journal is None:
        return
    yield GaugeMetricFamily(
        f"{PREFIX}_journal_waiting_records", "Records of the write-ahead log not yet written", journal.waiting
    )
    yield GaugeMetricFamily(f"{PREFIX}_journal_bytes", "Bytes of the write-ahead log", journal.bytes)
    yield CounterMetricFamily(f"{PREFIX}_journal_commits", "Group commits of the write-ahead log", journal.commits)
    yield CounterMetricFamily(
        f"{PREFIX}_journal_compactions", "Compactions of the write-ahead log", journal.compactions
    )


def _ledger(report: StatusReport) -> Iterator[Any]:
    """The ledger's gauges: bytes held in all and by kind, connections holding any, the top connections."""
    from prometheus_client.core import GaugeMetricFamily

    ledger = report.broker.ledger
    yield GaugeMetricFamily(f"{PREFIX}_held_bytes", "Bytes held on peers' behalf (the ledger)", ledger.held_bytes)
    kinds = GaugeMetricFamily(f"{PREFIX}_held_bytes_by_kind", "Bytes held by kind of holding", labels=["kind"])
    for kind, size in sorted(ledger.by_kind.items()):
        kinds.add_metric([kind], size)
    yield kinds
    yield GaugeMetricFamily(f"{PREFIX}_connections_holding", "Connections holding anything", ledger.connections)
    top = GaugeMetricFamily(
        f"{PREFIX}_connection_held_bytes", "Bytes held for the connections holding the most", labels=["connection"]
    )
    for connection in ledger.top:
        top.add_metric([connection.connection], connection.bytes)
    yield top


def workers_by_host(workers: list[WorkerReport]) -> list[tuple[str, int]]:
    """Workers per host as they announced it ("unknown": not announced), the :data:`MAX_HOSTS` busiest named,
    the rest summed as "other" (label values stay few whatever workers say)."""
    counts = Counter(worker.host or "unknown" for worker in workers)
    named = counts.most_common(MAX_HOSTS)
    rest = sum(counts.values()) - sum(count for _, count in named)
    return sorted(named) + ([("other", rest)] if rest else [])


def _percentiles(service: ServiceReport, field: str) -> list[tuple[str, float]]:
    """``(name, seconds)`` of the known percentiles of ``service``'s ``queue_time`` or ``service_time``."""
    times = service.queue_time if field == "queue_time" else service.service_time
    known = (("p50", times.p50), ("p90", times.p90), ("p99", times.p99))
    return [(name, value) for name, value in known if value is not None]


def serve(snapshot: Callable[[], StatusReport | None], port: int = 0, address: str = "127.0.0.1") -> int:
    """Serve the metrics over HTTP from a daemon thread; return the port (``0`` picks a free one)."""
    try:
        from prometheus_client import CollectorRegistry, start_http_server
    except ImportError:
        raise ImportError("metrics need prometheus_client: pip install 'generaldomo[metrics]'") from None

    registry = CollectorRegistry()
    registry.register(StatusCollector(snapshot))
    server, _ = start_http_server(port, address, registry=registry)
    return int(server.server_port)

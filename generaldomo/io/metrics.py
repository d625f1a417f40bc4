"""Prometheus exposition of the broker's status report, on an optional HTTP port.

This module owns the mapping from the ``mmi.status`` report (see :mod:`generaldomo.sansio.mmi`) to Prometheus
metrics. It reads the snapshot the broker's loop refreshes, never the live core, so it can run on the HTTP
server's thread. It needs the optional ``prometheus_client`` package (``pip install generaldomo[metrics]``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

PREFIX = "generaldomo"
_SERVICE_GAUGES = ("workers", "waiting", "queued", "in_flight", "observed_rate")
_SERVICE_COUNTERS = ("completed", "failed", "reissued", "duplicates_dropped", "expired")


class StatusCollector:
    """A Prometheus collector over the latest status report (None until the first one exists)."""

    def __init__(self, snapshot: Callable[[], dict[str, Any] | None]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        report = self._snapshot()
        if report is None:
            return
        broker = report["broker"]
        yield GaugeMetricFamily(f"{PREFIX}_uptime_seconds", "Seconds since the broker started", broker["uptime"])
        events = CounterMetricFamily(f"{PREFIX}_events", "Broker events by kind", labels=["event"])
        for event, count in sorted(broker["counters"].items()):
            events.add_metric([event], count)
        yield events
        services = report["services"]
        for field in _SERVICE_GAUGES:
            family = GaugeMetricFamily(f"{PREFIX}_service_{field}", f"Per service: {field}", labels=["service"])
            for service in services:
                family.add_metric([service["name"]], service[field])
            yield family
        for field in _SERVICE_COUNTERS:
            family = CounterMetricFamily(f"{PREFIX}_service_{field}", f"Per service: {field}", labels=["service"])
            for service in services:
                family.add_metric([service["name"]], service[field])
            yield family
        for field in ("queue_time", "service_time"):
            family = GaugeMetricFamily(
                f"{PREFIX}_service_{field}_seconds", f"Recent {field} percentiles", labels=["service", "quantile"]
            )
            for service in services:
                for name, value in service[field].items():
                    if value is not None:
                        family.add_metric([service["name"], f"0.{name[1:]}"], value)
            yield family
        for field, help_text in (("rate", "Dispatches per second allowed"), ("concurrency", "Tasks in flight allowed")):
            family = GaugeMetricFamily(f"{PREFIX}_service_{field}_limit", help_text, labels=["service"])
            for service in services:
                if service["flow"][field] is not None:
                    family.add_metric([service["name"]], service["flow"][field])
            yield family


def serve(snapshot: Callable[[], dict[str, Any] | None], port: int = 0, address: str = "127.0.0.1") -> int:
    """Serve the metrics over HTTP from a daemon thread; return the port (``0`` picks a free one)."""
    try:
        from prometheus_client import CollectorRegistry, start_http_server
    except ImportError:
        raise ImportError("metrics need prometheus_client: pip install 'generaldomo[metrics]'") from None

    registry = CollectorRegistry()
    registry.register(StatusCollector(snapshot))
    server, _ = start_http_server(port, address, registry=registry)
    return int(server.server_port)

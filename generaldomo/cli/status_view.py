"""Plain-text rendering of the broker's ``mmi.status`` report, for people.

This module owns the layout of ``generaldomo status``; it reads the typed report
(:class:`~generaldomo.sansio.report.StatusReport`) and knows nothing of sockets or of how the report is made.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from generaldomo.sansio.report import StatusReport


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Columns padded to their widest cell."""
    cells = [list(map(str, headers))] + [[_cell(value) for value in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join([lines[0], "  ".join("-" * w for w in widths), *lines[1:]])


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def render(report: StatusReport | Mapping[str, Any]) -> str:
    """The report (or its JSON-ready data, as ``mmi.status`` sends it) as three tables: broker, services,
    workers."""
    if not isinstance(report, StatusReport):
        report = StatusReport.from_dict(report)
    broker = report.broker
    endpoints = ", ".join(f"{e.transport} {e.endpoint}" for e in broker.endpoints)
    counters = ", ".join(f"{k} {v}" for k, v in sorted(broker.counters.items())) or "none yet"
    held = f"queued {broker.queued} ({broker.queued_bytes} B held), kept answers {broker.kept_answers}"
    head = f"broker {broker.instance}  up {broker.uptime:.0f} s  {endpoints}\n{held}\ncounters: {counters}"
    services = table(
        ["service", "workers", "waiting", "queued", "in flight", "done", "failed", "reissued", "dups", "expired",
         "rate/s", "limit/s", "max conc", "queue p50 ms", "queue p99 ms", "serve p50 ms", "serve p99 ms"],
        [
            [s.name, s.workers, s.waiting, s.queued, s.in_flight, s.completed, s.failed, s.reissued,
             s.duplicates_dropped, s.expired, s.observed_rate, s.flow.rate, s.flow.concurrency,
             _ms(s.queue_time.p50), _ms(s.queue_time.p99), _ms(s.service_time.p50), _ms(s.service_time.p99)]
            for s in report.services
        ],
    )  # fmt: skip
    workers = table(
        ["worker", "description", "service", "dialect", "state", "tasks", "last seen s"],
        [
            [w.peer, w.description[:40], w.service, w.dialect, w.state, w.tasks_done, w.last_seen]
            for w in report.workers
        ],
    )
    return f"{head}\n\n{services}{_flow_lines(report)}\n\n{workers}"


def _flow_lines(report: StatusReport) -> str:
    """One line per service with a byte limit or an adaptive cap (none: nothing)."""
    lines = []
    for s in report.services:
        parts = []
        if s.flow.bytes_in_flight is not None:
            parts.append(f"bytes in flight {s.flow.in_flight_bytes}/{s.flow.bytes_in_flight}")
        if (adaptive := s.flow.adaptive) is not None:
            floor = "-" if adaptive.floor is None else f"{adaptive.floor * 1000:.1f} ms"
            parts.append(f"adaptive cap {adaptive.cap} ({adaptive.min}..{adaptive.max}, floor {floor})")
        if parts:
            lines.append(f"\n{s.name}: " + ", ".join(parts))
    return "".join(lines)

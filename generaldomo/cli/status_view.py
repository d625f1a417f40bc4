"""Plain-text rendering of the broker's ``mmi.status`` report, for people.

This module owns the layout of ``generaldomo status``: which columns each table has and the lines above
them; how a cell looks and how a table fits a width is :mod:`generaldomo.cli.columns`'. A layout of one
services table is used when it fits the width, else the services are shown in two tables (counts; flow and
times). It reads the typed report (:class:`~generaldomo.sansio.broker.report.StatusReport`) and knows nothing of
sockets, terminals or of how the report is made.
"""

from __future__ import annotations

import string
import textwrap
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from generaldomo.cli.columns import Column, Format, cell, cut, printable, table, width_of
from generaldomo.sansio.broker.flow.flow import LIMITS
from generaldomo.sansio.broker.report import ServiceReport, StatusReport, WorkerReport
from generaldomo.sansio.config import knobs

__all__ = ["COUNTS", "FLOW", "NAME", "WIDTH", "WORKERS", "S", "W", "render"]

WIDTH: Final = 100  # columns the report fits in unless told otherwise

S = ServiceReport
NAME: Final = Column[S]("service", Format.TEXT, lambda s: s.name, shrinks=True)
COUNTS: Final = [
    NAME,
    Column[S]("workers", Format.COUNT, lambda s: s.workers),
    Column[S]("waiting", Format.COUNT, lambda s: s.waiting),
    Column[S]("queued", Format.COUNT, lambda s: s.queued),
    Column[S]("in flight", Format.COUNT, lambda s: s.in_flight),
    Column[S]("done", Format.COUNT, lambda s: s.completed),
    Column[S]("failed", Format.COUNT, lambda s: s.failed),
    Column[S]("reissued", Format.COUNT, lambda s: s.reissued),
    Column[S]("retried", Format.COUNT, lambda s: s.retried),
    Column[S]("dups", Format.COUNT, lambda s: s.duplicates_dropped),
    Column[S]("expired", Format.COUNT, lambda s: s.expired),
]


def _limit(name: str) -> Callable[[ServiceReport], Any]:
    return lambda s: getattr(s.flow, name)


FLOW: Final = [
    Column[S]("rate/s", Format.RATE, lambda s: s.observed_rate),
    *(  # the flow limits declared with a column, in their order
        Column[S](
            limit.column, Format.RATE if limit.knob.kind is knobs.Kind.FLOAT else Format.COUNT, _limit(limit.name)
        )
        for limit in LIMITS
        if limit.column
    ),
    Column[S]("queue p50 ms", Format.MS, lambda s: s.queue_time.p50),
    Column[S]("queue p99 ms", Format.MS, lambda s: s.queue_time.p99),
    Column[S]("serve p50 ms", Format.MS, lambda s: s.service_time.p50),
    Column[S]("serve p99 ms", Format.MS, lambda s: s.service_time.p99),
]
W = WorkerReport
WORKERS: Final = [
    Column[W]("worker", Format.TEXT, lambda w: w.peer),
    Column[W]("host", Format.TEXT, lambda w: w.host, shrinks=True),
    Column[W]("pid", Format.ID, lambda w: w.pid),
    Column[W]("service", Format.TEXT, lambda w: w.service, shrinks=True),
    Column[W]("state", Format.TEXT, lambda w: w.state),
    Column[W]("tasks", Format.COUNT, lambda w: w.tasks_done),
    Column[W]("seen s ago", Format.SECONDS, lambda w: w.last_seen),
    Column[W]("dialect", Format.TEXT, lambda w: w.dialect),
    Column[W]("description", Format.TEXT, lambda w: w.description, shrinks=True),
]


def render(report: StatusReport | Mapping[str, Any], width: int | None = WIDTH) -> str:
    """The report (or its JSON-ready data, as ``mmi.status`` sends it) in lines of at most ``width``
    characters (None: as wide as it takes): the broker, then tables of services and workers."""
    if not isinstance(report, StatusReport):
        report = StatusReport.from_dict(report)
    one = table([*COUNTS, *FLOW], report.services)
    if width is None or max(map(width_of, one.splitlines())) <= width:
        services = [table([*COUNTS, *FLOW], report.services, width)]
    else:
        services = [table(COUNTS, report.services, width), table([NAME, *FLOW], report.services, width)]
    services[-1] += "".join("\n" + _wrap(printable(line), width) for line in _flow_lines(report))
    return "\n\n".join([_head(report, width), *services, table(WORKERS, report.workers, width)])


def _head(report: StatusReport, width: int | None) -> str:
    """The lines about the broker as a whole."""
    broker = report.broker
    up = cell(Format.SECONDS, broker.uptime)
    endpoints = ", ".join(f"{e.transport} {e.endpoint}" for e in broker.endpoints) or "none"
    counters = ", ".join(f"{name} {cell(Format.COUNT, n)}" for name, n in sorted(broker.counters.items()))
    lines = [
        f"broker {broker.instance}, up {up} s",
        f"endpoints: {endpoints}",
        f"queued {cell(Format.COUNT, broker.queued)} ({cell(Format.COUNT, broker.queued_bytes)} B held), "
        f"kept answers {cell(Format.COUNT, broker.kept_answers)} ({cell(Format.COUNT, broker.kept_bytes)} B)",
        f"{_shown(len(report.services), broker.service_count, 'services')}, "
        f"{_shown(len(report.workers), broker.worker_count, 'workers')}",
        _ledger_line(report),
        _dead_line(report),
        f"counters: {counters or 'none yet'}",
    ]
    return "\n".join(_wrap(printable(line), width) for line in lines)


def _dead_line(report: StatusReport) -> str:
    """The dead letters: how many, their bytes, and the services with the most."""
    dead = report.broker.dead_letters
    services = ", ".join(f"{printable(s.service)} {cell(Format.COUNT, s.count)}" for s in dead.services[:5])
    more = f" of {dead.service_count} services" if dead.service_count > len(dead.services[:5]) else ""
    return (
        f"dead letters {cell(Format.COUNT, dead.letters)} ({cell(Format.COUNT, dead.bytes)} B, "
        f"{cell(Format.COUNT, dead.evicted)} evicted){': ' + services + more if services else ''}"
    )


def _shown(listed: int, total: int, what: str) -> str:
    """``N what`` and, when the report lists fewer of them, how many it lists (a report from a broker that
    gives no total lists them all)."""
    total = max(total, listed)
    return f"{cell(Format.COUNT, total)} {what}" + (f" ({cell(Format.COUNT, listed)} shown)" if listed < total else "")


def _ledger_line(report: StatusReport) -> str:
    """What the broker holds for its peers, by kind, and the connection holding the most."""
    ledger = report.broker.ledger
    kinds = ", ".join(f"{kind} {cell(Format.COUNT, size)}" for kind, size in sorted(ledger.by_kind.items()))
    line = f"held {cell(Format.COUNT, ledger.held_bytes)} B for {cell(Format.COUNT, ledger.connections)} connections"
    if kinds:
        line += f" ({kinds})"
    if ledger.top:
        line += f"; most: {ledger.top[0].connection} {cell(Format.COUNT, ledger.top[0].bytes)} B"
    return line


def _wrap(line: str, width: int | None) -> str:
    if width is None or width_of(line) <= width:
        return line
    wrapped: Sequence[str] = textwrap.wrap(line, width, subsequent_indent="  ", break_on_hyphens=False)
    return "\n".join(cut(part, width) for part in wrapped)


class _Shown(string.Formatter):
    """The formatter of the flow lines: None as ``-``, ``{x:ms}`` seconds as milliseconds."""

    def format_field(self, value: Any, format_spec: str) -> str:
        if value is None:
            return "-"
        if format_spec == "ms":
            return f"{float(value) * 1000:.1f} ms"
        return format(value, format_spec)


def _flow_lines(report: StatusReport) -> list[str]:
    """One line per service with a flow limit set that has no column (its ``line``; none: nothing), each without
    its newline."""
    shown, lines = _Shown(), []
    for s in report.services:
        parts = [
            shown.format(limit.line or f"{limit.name.replace('_', ' ')} {{{limit.name}}}", **s.flow.fields())
            for limit in LIMITS
            if not limit.column and limit.line is not None and getattr(s.flow, limit.name) is not None
        ]
        if parts:
            lines.append(f"{s.name}: " + ", ".join(parts))
    return lines

"""Field limits: the bounds of every field a peer may send, in one table.

This module owns the table. :mod:`generaldomo.sansio.wire.protocol` checks each field of a message against it while
it parses the message (beyond a bound the message is :class:`~generaldomo.sansio.wire.events.Malformed`: dropped and
counted), :mod:`generaldomo.sansio.wire.wirejson` reads JSON from the wire within its JSON bounds, the flow limits
check their numbers against its ranges, and the peers' sessions parse the broker's messages with the same
bounds. ``docs/protocol.rst`` shows the table as :func:`rst_table` renders it (a test checks that they agree),
and the status report lists it in its settings (:func:`as_settings`). A test or a fuzzer reads :data:`FIELDS`
to build values just within and just beyond each bound. The broker's configurable limits
(message size, frames, budgets) are :class:`~generaldomo.sansio.config.settings.Settings`, not this table. It knows
nothing of sockets or clocks.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Final

__all__ = [
    "ADAPTIVE",
    "BURST",
    "BYTES_IN_FLIGHT",
    "CONCURRENCY",
    "DEADLINE_MS",
    "DEAD_PAGE",
    "DESCRIPTION",
    "FIELDS",
    "FIELDS_FRAME",
    "HOP",
    "HOPS",
    "HOST",
    "INSTANCE",
    "JSON_BYTES",
    "JSON_DEPTH",
    "JSON_INTEGER",
    "JSON_NUMBER",
    "MMI_FRAMES",
    "NOT_BEFORE_MS",
    "PEER_INFO",
    "PID",
    "PRIORITY",
    "RATE",
    "REASKED",
    "REQUEST_ID",
    "RETRIES",
    "RETRY_DELAY",
    "RETRY_STATUS",
    "SERVICE_NAME",
    "STATUS",
    "STATUS_PAGE",
    "STATUS_QUERY",
    "TAKEN",
    "TASK_ID",
    "TENANT",
    "TENANTS",
    "TIMING",
    "TRACEPARENT",
    "TRACESTATE",
    "TRACESTATE_MEMBERS",
    "WEIGHT",
    "WORKER_ID",
    "Field",
    "Measure",
    "as_settings",
    "rst_table",
]


class Measure(enum.Enum):
    """What a bound applies to."""

    BYTES = "bytes"  # the length of a frame
    CHARACTERS = "characters"  # the length of a text
    ITEMS = "items"  # how many frames, hops or ids
    DEPTH = "levels"  # nesting of JSON arrays and objects
    VALUE = "value"  # a number's value


@dataclasses.dataclass(frozen=True, slots=True)
class Field:
    """One field's bounds: ``low`` to ``high`` inclusive (``low_open``: ``low`` itself excluded), in ``measure``;
    ``beyond`` says what happens to a message outside them, ``shown`` (if given) the bounds in words."""

    name: str
    what: str
    low: int
    high: int
    measure: Measure
    beyond: str
    low_open: bool = False
    shown: str = ""

    def admits(self, value: int | float) -> bool:
        """True when ``value`` (a length, a count or a number, per :attr:`measure`) is within the bounds."""
        above_low = value > self.low if self.low_open else value >= self.low
        return above_low and value <= self.high

    def fits(self, frame: bytes | memoryview) -> bool:
        """True when a frame's length is within the bounds."""
        return self.low <= len(frame) <= self.high

    def refusal(self, value: int | float) -> str:
        """Why ``value`` is refused, for a log line or an error reply."""
        unit = "" if self.measure is Measure.VALUE else f" {self.measure.value}"
        return f"{self.what} of {_number(value)}{unit} is outside {self.bounds}"

    @property
    def bounds(self) -> str:
        """The bounds in words: ``1 to 255 bytes``, ``more than 0 to 1e+09``."""
        if self.shown:
            return self.shown
        low = f"more than {_number(self.low)}" if self.low_open else _number(self.low)
        unit = "" if self.measure is Measure.VALUE else f" {self.measure.value}"
        return f"{low} to {_number(self.high)}{unit}"


def _number(value: int | float) -> str:
    """``255``, ``2^53``, ``-2^53``, ``2^32-1``, ``10^9``."""
    if isinstance(value, float):
        if not value.is_integer() or abs(value) >= 1e15:
            return f"{value:g}".replace("e+", "e")
        value = int(value)
    size, sign = abs(value), "-" if value < 0 else ""
    if size >= 2**16 and size & (size - 1) == 0:
        return f"{sign}2^{size.bit_length() - 1}"
    if size >= 2**16 and size & (size + 1) == 0:
        return f"{sign}2^{size.bit_length()}-1"
    if size >= 10**6 and str(size).rstrip("0") == "1":
        return f"{sign}10^{len(str(size)) - 1}"
    return str(value)


_MALFORMED = "malformed"
_ANSWERED = "malformed; a GDP request: 400"
_WORKER = "malformed; its worker dropped"
_400 = "400"
_CLIENT = "a peer drops the message"
_TRACE = "left out, counted"

REQUEST_ID: Final = Field("request_id", "request id", 1, 255, Measure.BYTES, _MALFORMED)
DESCRIPTION: Final = Field("description", "description", 0, 4096, Measure.BYTES, _ANSWERED)
SERVICE_NAME: Final = Field("service_name", "service name", 1, 255, Measure.BYTES, _400)
TASK_ID: Final = Field("task_id", "task id", 1, 1024, Measure.BYTES, _WORKER)  # a ticket: up to 1024
STATUS: Final = Field("status", "status", 3, 3, Measure.BYTES, _WORKER, shown="exactly 3 ASCII digits")
HOP: Final = Field("hop", "envelope hop", 1, 255, Measure.BYTES, _MALFORMED)
HOPS: Final = Field("hops", "envelope hops", 1, 16, Measure.ITEMS, _MALFORMED)
REASKED: Final = Field("reasked", "request ids asked about", 0, 64, Measure.ITEMS, _MALFORMED)
TAKEN: Final = Field("taken", "results a broker HEARTBEAT acknowledges", 0, 1024, Measure.ITEMS, "the rest ignored")
PEER_INFO: Final = Field("peer_info", "peer info", 2, 1024, Measure.BYTES, _MALFORMED)
HOST: Final = Field("host", "peer info host", 1, 255, Measure.CHARACTERS, "left out")
PID: Final = Field("pid", "peer info pid", 1, 2**32 - 1, Measure.VALUE, "left out")
WORKER_ID: Final = Field("worker_id", "peer info id", 1, 64, Measure.CHARACTERS, "left out")
MMI_FRAMES: Final = Field("mmi_frames", "MMI request body", 0, 2, Measure.ITEMS, _400)
STATUS_QUERY: Final = Field("status_query", "mmi.status query", 0, 4096, Measure.BYTES, _400)
STATUS_PAGE: Final = Field("status_page", "mmi.status page (services, workers)", 1, 1000, Measure.VALUE, _400)
DEAD_PAGE: Final = Field("dead_page", "mmi.dead page (letters, services)", 1, 1000, Measure.VALUE, _400)
JSON_BYTES: Final = Field("json_bytes", "JSON text", 2, 4096, Measure.BYTES, _400)
JSON_DEPTH: Final = Field("json_depth", "JSON nesting", 0, 16, Measure.DEPTH, _400)
JSON_INTEGER: Final = Field("json_integer", "JSON integer", -(2**53), 2**53, Measure.VALUE, _400)
JSON_NUMBER: Final = Field(
    "json_number", "JSON number", -(2**1000), 2**1000, Measure.VALUE, _400, shown="finite, -2^1000 to 2^1000"
)  # powers of two: exact as floats
RATE: Final = Field("rate", "flow rate", 0, 10**9, Measure.VALUE, _400, low_open=True)
BURST: Final = Field("burst", "flow burst", 1, 10**9, Measure.VALUE, _400)
CONCURRENCY: Final = Field("concurrency", "flow concurrency", 1, 10**9, Measure.VALUE, _400)
BYTES_IN_FLIGHT: Final = Field("bytes_in_flight", "flow bytes in flight", 1, 2**53, Measure.VALUE, _400)
ADAPTIVE: Final = Field("adaptive", "adaptive cap bound", 1, 10**6, Measure.VALUE, _400)
RETRIES: Final = Field("retries", "retry count", 0, 100, Measure.VALUE, _400)
RETRY_DELAY: Final = Field("retry_delay", "retry backoff (seconds)", 0, 3600, Measure.VALUE, _400, low_open=True)
RETRY_STATUS: Final = Field("retry_status", "retried status", 500, 599, Measure.VALUE, _400)
FIELDS_FRAME: Final = Field("fields_frame", "request fields", 0, 256, Measure.BYTES, _MALFORMED)
TENANT: Final = Field("tenant", "tenant", 1, 64, Measure.BYTES, _MALFORMED + "; in mmi.flow: 400")
PRIORITY: Final = Field("priority", "priority", -5, 5, Measure.VALUE, _MALFORMED)
DEADLINE_MS: Final = Field("deadline_ms", "deadline (milliseconds)", 0, 2**32 - 1, Measure.VALUE, "clamped to it")
NOT_BEFORE_MS: Final = Field("not_before_ms", "not before (milliseconds)", 0, 2**32 - 1, Measure.VALUE, "clamped to it")
WEIGHT: Final = Field("weight", "tenant weight", 1, 1000, Measure.VALUE, _400)
TENANTS: Final = Field("tenants", "tenants with limits, per service", 0, 1024, Measure.ITEMS, _400)
INSTANCE: Final = Field("instance", "broker instance", 1, 255, Measure.BYTES, _CLIENT)
TIMING: Final = Field(
    "timing", "timing", 0, 16, Measure.BYTES, "no timing", shown="0 or 16 bytes, finite, not negative"
)
TRACEPARENT: Final = Field("traceparent", "traceparent", 55, 255, Measure.CHARACTERS, _TRACE)
TRACESTATE: Final = Field("tracestate", "tracestate", 0, 255, Measure.CHARACTERS, _TRACE)
TRACESTATE_MEMBERS: Final = Field("trace_members", "tracestate members", 0, 32, Measure.ITEMS, _TRACE)

FIELDS: Final[tuple[Field, ...]] = (
    REQUEST_ID,
    DESCRIPTION,
    SERVICE_NAME,
    TASK_ID,
    STATUS,
    HOP,
    HOPS,
    REASKED,
    TAKEN,
    PEER_INFO,
    HOST,
    PID,
    WORKER_ID,
    MMI_FRAMES,
    STATUS_QUERY,
    STATUS_PAGE,
    DEAD_PAGE,
    JSON_BYTES,
    JSON_DEPTH,
    JSON_INTEGER,
    JSON_NUMBER,
    RATE,
    BURST,
    CONCURRENCY,
    BYTES_IN_FLIGHT,
    ADAPTIVE,
    RETRIES,
    RETRY_DELAY,
    RETRY_STATUS,
    FIELDS_FRAME,
    TENANT,
    PRIORITY,
    DEADLINE_MS,
    NOT_BEFORE_MS,
    WEIGHT,
    TENANTS,
    INSTANCE,
    TIMING,
    TRACEPARENT,
    TRACESTATE,
    TRACESTATE_MEMBERS,
)


def as_settings() -> dict[str, dict[str, int | float | str]]:
    """The table as the status report's settings show it: ``{name: {"min": .., "max": .., "unit": ..}}`` (bounds
    beyond 2^53 as floats, which every JSON reader takes)."""
    return {
        field.name: {"min": _json_number(field.low), "max": _json_number(field.high), "unit": field.measure.value}
        for field in FIELDS
    }


def _json_number(value: int) -> int | float:
    return value if abs(value) <= 2**53 else float(value)


def rst_table() -> str:
    """The table as ``docs/protocol.rst`` shows it (a reST simple table)."""
    header = ("field", "bounds", "beyond them")
    rows = [header, *((f"``{f.name}``", f.bounds, f.beyond) for f in FIELDS)]
    widths = [max(len(row[column]) for row in rows) for column in range(len(header))]
    rule = "  ".join("=" * width for width in widths)
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    return "\n".join([rule, lines[0], rule, *lines[1:], rule])

"""Every setting and flow limit an operator turns, declared once: one typed :class:`Knob` each.

This module owns the table. A knob says what a setting is (name, type, default, unit, bounds, help) and every
name it goes by: the ``generaldomo`` flag, the ``GENERALDOMO_*`` environment variable, the configuration file's
key, the field of the status report and the Prometheus metric. The CLI makes its flags from it
(:mod:`generaldomo.cli.broker`, :mod:`generaldomo.cli.flow`), reads values given as text through
:meth:`Knob.parse` (flags, environment, configuration file alike), and the metrics name their gauges by it;
tests check that :class:`~generaldomo.sansio.config.settings.Settings`, the settings report,
``docs/status.schema.json``, the CLI's help and the guide's settings table agree with it. A new setting is a
field of ``Settings`` (its default) and a knob here; a flow limit's knob is part of its declaration
(:data:`generaldomo.sansio.broker.flow.flow.LIMITS`).

Rules: a knob's ``name`` is its Python name (the ``Settings`` or ``FlowLimits`` field), its configuration key and
the CLI's argparse destination; the environment variable follows from it, and so does the flag unless given.
A value read from text is checked against the knob's type and bounds. Where a knob allows None
(``none_means`` says what it means), one word stands for it: ``none`` where None lifts a limit (no limit, never,
off), ``auto`` where it means a default worked out from other settings (``derived``); ``none`` is read for
those too, as files written before ``auto`` say. It knows nothing of sockets, clocks, files or argparse.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Callable
from typing import Any, Final

from generaldomo.sansio.config.settings import PeerSettings, Settings
from generaldomo.sansio.wire import limits

__all__ = [
    "AUTO",
    "COMMAND",
    "COMMANDS",
    "ENV_PREFIX",
    "MAX_BYTES",
    "MAX_COUNT",
    "MAX_SECONDS",
    "METRIC_PREFIX",
    "NONE",
    "PEER",
    "SETTINGS",
    "TENANT",
    "Kind",
    "Knob",
    "by_name",
    "command",
    "setting",
    "tenant_limits",
]

ENV_PREFIX: Final = "GENERALDOMO_"
METRIC_PREFIX: Final = "generaldomo"
NONE: Final = "none"  # the text that stands for None where None lifts a limit (no limit, never, off)
AUTO: Final = "auto"  # the text that stands for None where None means a default worked out from other settings


class Kind(enum.Enum):
    """The type of a knob's value, and so how its text is read."""

    INT = "integer"
    FLOAT = "number"
    TEXT = "text"
    RANGE = "MIN..MAX"  # whole-number bounds, JSON {"min": ..., "max": ...}
    RATE_RANGE = "MIN..[MAX]"  # bounds per second, MAX optional (null: none), JSON {"min": ..., "max": ...}
    TENANTS = "tenants"  # per-tenant limits, JSON {"name": {"weight": ...}} (see generaldomo.sansio.broker.flow.fair)
    POLICY = "KEY=VALUE/..."  # a structured value with a text form of its own (the knob's reader and writer)


_UNIT_SUFFIX = {"seconds": "_seconds", "bytes": "_bytes"}


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Knob:
    """One setting or limit: what it is and every name it goes by (see the module docstring)."""

    name: str
    kind: Kind
    default: Any
    help: str
    unit: str = ""  # "seconds", "bytes", "per second", ...: for the docs and the metric's name
    low: int | float | None = None  # the bounds, inclusive (``low_open``: ``low`` itself excluded); None: unbounded
    high: int | float | None = None  # (int | float: a whole-number bound stays an int, in the schema too)
    low_open: bool = False
    none_means: str = ""  # what None means (``"no limit"``, ``"never"``); empty: None is not allowed
    derived: bool = False  # None means a default worked out from other settings: written AUTO, not NONE
    flag: str = ""  # the CLI flag; empty: ``--`` and the name with dashes
    metavar: str = ""
    report: str | None = ""  # the status report's field; empty: the name; None: not reported
    metric: str | None = ""  # the Prometheus gauge; empty: derived from the name and unit; None: none
    reader: Callable[[str], Any] | None = None  # a POLICY's text to its JSON form (ValueError saying what is wrong)
    writer: Callable[[Any], str] | None = None  # a POLICY's JSON form to its text

    @property
    def nullable(self) -> bool:
        return bool(self.none_means)

    @property
    def word(self) -> str:
        """The text that stands for None: :data:`AUTO` for a derived default, else :data:`NONE`."""
        return AUTO if self.derived else NONE

    @property
    def option(self) -> str:
        """The CLI flag."""
        return self.flag or "--" + self.name.replace("_", "-")

    @property
    def variable(self) -> str:
        """The environment variable: ``GENERALDOMO_`` and the name in capitals."""
        return ENV_PREFIX + self.name.upper()

    @property
    def key(self) -> str:
        """The configuration file's key."""
        return self.name

    @property
    def field(self) -> str | None:
        """The field of the report (settings or flow) that shows the value; None: none does."""
        return self.name if self.report == "" else self.report

    @property
    def gauge(self) -> str | None:
        """The full name of the knob's Prometheus gauge (None: none): ``generaldomo_`` and ``metric``, else
        ``generaldomo_setting_`` and the name, with its unit (``_seconds``, ``_bytes``) if the name lacks it."""
        if self.metric is None:
            return None
        if self.metric:
            return f"{METRIC_PREFIX}_{self.metric}"
        suffix = _UNIT_SUFFIX.get(self.unit, "")
        name = self.name if self.name.endswith(suffix) else self.name + suffix
        return f"{METRIC_PREFIX}_setting_{name}"

    @property
    def bounds(self) -> str:
        """The bounds in words (empty: none)."""
        if self.low is None and self.high is None:
            return ""
        low = "" if self.low is None else f"{'above' if self.low_open else 'at least'} {_shown(self.low)}"
        high = "" if self.high is None else f"at most {_shown(self.high)}"
        return ", ".join(part for part in (low, high) if part)

    def json_schema(self) -> dict[str, Any]:
        """The JSON schema of the value as the status report shows it (``docs/status.schema.json``)."""
        kind = {Kind.INT: "integer", Kind.FLOAT: "number", Kind.TEXT: "string"}.get(self.kind, "object")
        schema: dict[str, Any] = {"type": [kind, "null"] if self.nullable else kind}
        if self.low is not None:
            schema["exclusiveMinimum" if self.low_open else "minimum"] = self.low
        if self.high is not None:
            schema["maximum"] = self.high
        return schema

    def admits(self, value: float) -> bool:
        """True when a number is finite and within the bounds (NaN and the infinities never are)."""
        if not math.isfinite(value):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or value <= self.high

    def parse(self, text: str) -> Any:
        """The value ``text`` stands for, in the form ``Settings``, ``FlowLimits`` and ``mmi.flow`` take (ranges
        as JSON objects); ValueError saying what is expected."""
        text = text.strip()
        if self.nullable and text.lower() in (self.word, NONE):
            return None
        if self.kind is Kind.TEXT:
            return text
        if self.kind is Kind.RANGE or self.kind is Kind.RATE_RANGE:
            return self._range(text)
        if self.reader is not None:
            return self.reader(text)
        if self.kind is Kind.TENANTS:
            raise ValueError(f"{self.name} are set one tenant at a time (see --tenant), not from {text!r}")
        try:
            number = _number(self.kind, text)
        except ValueError:
            raise ValueError(f"{self.name} must be {self._expected}, not {text!r}") from None
        return self.check(number)

    def check(self, value: Any) -> Any:
        """``value`` (a parsed or configured one: a number, None, a range's JSON) if this knob admits it, else
        ValueError saying what is expected. Numbers are finite: NaN and the infinities never are admitted (``none``
        says "no limit" or "never" where a knob allows it)."""
        if value is None:
            if self.nullable:
                return None
            raise ValueError(f"{self.name} must be {self._expected}, not none")
        if self.kind is Kind.INT or self.kind is Kind.FLOAT:
            whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
            if isinstance(value, bool) or not isinstance(value, int | float) or (self.kind is Kind.INT and not whole):
                raise ValueError(f"{self.name} must be {self._expected}, not {value!r}")
            value = int(value) if self.kind is Kind.INT else float(value)
            if not self.admits(value):
                raise ValueError(f"{self.name} must be {self._expected}, not {value!r}")
        return value

    @property
    def _expected(self) -> str:
        what = {Kind.INT: "a whole number", Kind.FLOAT: "a number"}.get(self.kind, self.kind.value)
        bounds = f" ({self.bounds})" if self.bounds else ""
        lifted = f" or {self.word} ({self.none_means})" if self.nullable else ""
        return f"{what}{bounds}{lifted}"

    def _range(self, text: str) -> dict[str, int | float | None]:
        low, sep, high = text.partition("..")
        kind = Kind.INT if self.kind is Kind.RANGE else Kind.FLOAT
        expected = f"MIN..MAX{' (MAX may be left out)' if self.kind is Kind.RATE_RANGE else ''} or {self.word}"
        try:
            if not sep or (not high and self.kind is Kind.RANGE):
                raise ValueError
            bounds = {"min": _number(kind, low), "max": None if not high else _number(kind, high)}
            if not all(math.isfinite(bound) for bound in bounds.values() if bound is not None):
                raise ValueError
            return bounds
        except ValueError:
            raise ValueError(f"{self.name} bounds are {expected}, not {text!r}") from None


def _number(kind: Kind, text: str) -> int | float:  # (an int stays one: a compiled float would convert it)
    if len(text) > _MAX_DIGITS:  # int() of a long text takes a while (and Python refuses beyond 4,300 digits)
        raise ValueError(f"{len(text)} characters")
    return int(text) if kind is Kind.INT else float(text)


_MAX_DIGITS = 64


def _shown(value: int | float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


_SETTINGS = {field.name: field for field in dataclasses.fields(Settings)}


MAX_SECONDS: Final = 1_000_000.0  # about 11.6 days: the longest wait or interval any knob takes
MAX_COUNT: Final = 2**31 - 1  # the most of anything counted
MAX_BYTES: Final = 2**62  # the most bytes of anything


def _bounded(kind: Kind, unit: str, more: dict[str, Any]) -> dict[str, Any]:
    """``more`` with an upper bound where none is given: every number is finite and bounded."""
    if more.get("high") is None and kind in (Kind.INT, Kind.FLOAT):
        more["high"] = MAX_SECONDS if unit == "seconds" else MAX_BYTES if unit == "bytes" else MAX_COUNT
    return more


def setting(name: str, kind: Kind, help: str, **more: Any) -> Knob:
    """The knob of the broker setting ``name``: a field of ``Settings``, whose default it takes."""
    more = _bounded(kind, more.get("unit", ""), more)
    return Knob(name=name, kind=kind, default=_SETTINGS[name].default, help=help, **more)


def command(name: str, kind: Kind, help: str, **more: Any) -> Knob:
    """The knob of a command's own number (not a broker setting: no report, no metric); its default is the
    command's (given where the flag is added)."""
    more = _bounded(kind, more.get("unit", ""), more)
    return Knob(name=name, kind=kind, default=None, help=help, report=None, metric=None, **more)


_NO_LIMIT = "no limit"
_SHARE = _SETTINGS["connection_worker_share"].default

# The broker's settings: Settings, field by field (heartbeat_interval and liveness are every peer's too).
SETTINGS: Final[tuple[Knob, ...]] = (
    setting(
        "heartbeat_interval", Kind.FLOAT, "heartbeat interval (use the same on the broker and its peers)",
        unit="seconds", low=0, low_open=True, flag="--heartbeat", metavar="SECONDS",
    ),
    setting(
        "liveness", Kind.INT, "missed heartbeats before a peer is presumed gone", low=1, high=1000, metavar="N"
    ),
    setting(
        "max_attempts", Kind.INT, "workers a task may be lost with before the client gets 503", low=1, metavar="N",
    ),
    setting(
        "queue_timeout", Kind.FLOAT, "answer 504 to requests queued longer (default: never)",
        unit="seconds", low=0, low_open=True, none_means="never", metavar="SECONDS",
    ),
    setting(
        "anonymous_queue_timeout", Kind.FLOAT,
        "answer 504 to requests without a request id (every MDP request) queued longer; 'none': as --queue-timeout",
        unit="seconds", low=0, low_open=True, none_means="as queue_timeout", metavar="SECONDS",
    ),
    setting(
        "max_message", Kind.INT, "requests and results larger than this get 413",
        unit="bytes", low=1, none_means=_NO_LIMIT, metavar="BYTES",
    ),
    setting(
        "max_frames", Kind.INT, "messages with more frames are dropped while they are read",
        low=1, metavar="N",
    ),
    setting(
        "queue_bytes", Kind.INT, "bytes of requests held, 429 beyond; 'none': no limit",
        unit="bytes", low=0, none_means=_NO_LIMIT, metavar="BYTES",
    ),
    setting(
        "service_queue_bytes", Kind.INT, "the same per service; 'none': no limit",
        unit="bytes", low=0, none_means=_NO_LIMIT, metavar="BYTES",
    ),
    setting(
        "keep_answers", Kind.FLOAT, "how long final answers are kept for clients' re-asks",
        unit="seconds", low=0, metavar="SECONDS",
    ),
    setting(
        "keep_bytes", Kind.INT, "bytes of kept answers, oldest evicted first", unit="bytes", low=0, metavar="BYTES"
    ),
    setting(
        "dead_letters", Kind.INT,
        "tasks that finally failed kept per service (see 'generaldomo dead'), oldest evicted first; 0: none",
        low=0, high=1_000_000, metavar="N",
    ),
    setting(
        "dead_bytes", Kind.INT,
        "bytes of dead letters, all services together (one service's at most half), oldest evicted first",
        unit="bytes", low=0, metavar="BYTES",
    ),
    setting(
        "dead_seconds", Kind.FLOAT, "how long a dead letter is kept", unit="seconds", low=0, metavar="SECONDS"
    ),
    setting(
        "service_idle", Kind.FLOAT, "forget services idle this long; 'none': never",
        unit="seconds", low=0, none_means="never", metavar="SECONDS",
    ),
    setting(
        "served_memory", Kind.FLOAT,
        "how long a service that had workers counts as known to requests that fail fast for unknown services (404)",
        unit="seconds", low=0, metavar="SECONDS",
    ),
    setting(
        "client_expiry", Kind.FLOAT,
        "drop the queued requests of a client silent this long (default 'auto': twice the liveness expiry, at least "
        "10 s)",
        unit="seconds", low=0, low_open=True, none_means="twice the liveness expiry, at least 10 s",
        derived=True, metavar="SECONDS",
    ),
    setting(
        "max_workers", Kind.INT, "registered workers at most, more are refused; 'none': no limit",
        low=1, none_means=_NO_LIMIT, metavar="N",
    ),
    setting(
        "recovery", Kind.FLOAT,
        "restarted on a --state-dir, hold dispatch this long for workers resuming tasks (default 'auto': twice "
        "the heartbeat; 0: off)",
        unit="seconds", low=0, none_means="twice the heartbeat interval", derived=True, metavar="SECONDS",
    ),
    setting(
        "deadline_estimate_after", Kind.INT,
        "answered tasks of a service after which a task whose deadline leaves less than the service's estimated "
        "service time is answered 504 at once instead of dispatched; 'none': off",
        low=1, high=1_000_000, none_means="off: every task is dispatched while its deadline has not passed",
        metavar="N",
    ),
    setting(
        "held_bytes", Kind.INT, "bytes held for all peers (the ledger); 'none': no limit",
        unit="bytes", low=0, none_means=_NO_LIMIT, metavar="BYTES",
    ),
    setting(
        "connection_bytes", Kind.INT, "bytes held for one connection; 'none': no limit",
        unit="bytes", low=0, none_means=_NO_LIMIT, metavar="BYTES",
    ),
    setting(
        "connection_requests", Kind.INT, "queued and running requests per connection; 'none': no limit",
        low=0, none_means=_NO_LIMIT, metavar="N",
    ),
    setting(
        "connection_services", Kind.INT, "services one connection may make; 'none': no limit",
        low=0, none_means=_NO_LIMIT, metavar="N",
    ),
    setting(
        "connection_worker_share", Kind.FLOAT, "share of --max-workers one connection may register (at most 0.5)",
        low=0, low_open=True, high=0.5, metavar="SHARE",
    ),
    setting(
        "connection_queue_share", Kind.FLOAT, "share of --queue-bytes one connection's requests may hold (at most 0.5)",
        low=0, low_open=True, high=0.5, metavar="SHARE",
    ),
)  # fmt: skip

_PEER = PeerSettings()
# A peer's heartbeats (client, worker, bridge): the broker's two knobs with the peers' defaults.
PEER: Final[tuple[Knob, ...]] = tuple(
    dataclasses.replace(knob, default=getattr(_PEER, knob.name), report=None, metric=None)
    for knob in SETTINGS
    if knob.name in ("heartbeat_interval", "liveness")
)

# The commands' own numbers (flags, GENERALDOMO_* variables, configuration files alike): each read by its knob.
COMMAND: Final[tuple[Knob, ...]] = (
    command("timeout", Kind.FLOAT, "wait for the answer", unit="seconds", low=0, low_open=True, metavar="SECONDS"),
    command(
        "delay", Kind.FLOAT, "the broker dispatches the request no earlier than this long from now", unit="seconds",
        low=0, high=limits.NOT_BEFORE_MS.high / 1000, metavar="SECONDS",
    ),
    command(
        "find_timeout", Kind.FLOAT, "wait this long for the broker file to appear or a beacon to be heard",
        unit="seconds", low=0, metavar="SECONDS",
    ),
    command("beacon_port", Kind.INT, "beacon UDP port", low=1, high=65535, metavar="PORT"),
    command(
        "ha_heartbeat", Kind.FLOAT, "with --ha-peer: seconds between the pair's state messages (the peer is "
        "presumed gone after two missed)", unit="seconds", low=0.01, high=3600, metavar="SECONDS",
    ),
    command(
        "beacon_interval", Kind.FLOAT, "seconds between beacons", unit="seconds", low=0.05, metavar="SECONDS"
    ),
    command(
        "metrics_port", Kind.INT, "serve Prometheus metrics over HTTP (0: any free port; default: no metrics)",
        low=0, high=65535, metavar="PORT",
    ),
    command(
        "interval", Kind.FLOAT, "seconds between two status requests", unit="seconds", low=0.1, metavar="SECONDS"
    ),
    command("shown_services", Kind.INT, "services shown at most", low=1, high=100_000, metavar="N", flag="--services"),
    command("shown_workers", Kind.INT, "workers shown at most", low=1, high=100_000, metavar="N", flag="--workers"),
    command(
        "dead_limit", Kind.INT, "dead letters (or services) listed at most", low=1, high=limits.DEAD_PAGE.high,
        metavar="N", flag="--limit",
    ),
    command(
        "max_streams", Kind.INT, "pages (event streams) open at once, all clients together", low=1, high=10_000,
        metavar="N", flag="--streams",
    ),
    command(
        "max_streams_per_client", Kind.INT, "pages (event streams) open at once from one client address", low=1,
        high=10_000, metavar="N", flag="--streams-per-client",
    ),
    command(
        "watch", Kind.FLOAT, "refresh every SECONDS until interrupted (default: print once)",
        unit="seconds", low=0.1, metavar="SECONDS",
    ),
    command(
        "idle_timeout", Kind.FLOAT, "close DEALERs idle this long", unit="seconds", low=0, low_open=True,
        metavar="SECONDS",
    ),
    command(
        "max_in_flight", Kind.INT,
        "requests in flight at once (one connection to the broker each), and 7/8 of them for one client "
        "connection; more wait in the connection's queue",
        low=1, high=100_000, metavar="N",
    ),
    command(
        "connection_queue_bytes", Kind.INT,
        "bytes of requests one client connection may have waiting for a place in flight; more get status 429 "
        "with a retry_after, which a generaldomo Client waits out and sends again",
        unit="bytes", low=0, high=1 << 40, metavar="BYTES",
    ),
    command("concurrency", Kind.INT, "tasks at once, per service", low=1, high=10_000, metavar="N"),
    command(
        "stop_grace", Kind.FLOAT, "time running tasks get on stop", unit="seconds", low=0, metavar="SECONDS"
    ),
    command("sleep", Kind.FLOAT, "simulated work per request", unit="seconds", low=0, metavar="SECONDS"),
    command("requests", Kind.INT, "pipelined requests per transport", low=1, high=10_000_000, metavar="N"),
)  # fmt: skip
COMMANDS: Final = {knob.name: knob for knob in COMMAND}

# A tenant's limits within a service (fair.TenantLimits; keys of a tenant in mmi.flow's "tenants").
TENANT: Final[tuple[Knob, ...]] = (
    Knob(name="weight", kind=Kind.INT, default=1, help="its quantum in the rotation", low=limits.WEIGHT.low,
         high=limits.WEIGHT.high, report=None, metric=None),
    Knob(name="rate", kind=Kind.FLOAT, default=None, help="dispatches per second", low=0, low_open=True,
         high=limits.RATE.high, none_means=_NO_LIMIT, report=None, metric=None),
    Knob(name="burst", kind=Kind.INT, default=None, help="back to back under the rate (default 1)", low=1,
         high=limits.BURST.high, none_means="1", derived=True, report=None, metric=None),
    Knob(name="concurrency", kind=Kind.INT, default=None, help="tasks in flight", low=1,
         high=limits.CONCURRENCY.high, none_means=_NO_LIMIT, report=None, metric=None),
)  # fmt: skip


def by_name(knobs: tuple[Knob, ...]) -> dict[str, Knob]:
    return {knob.name: knob for knob in knobs}


def tenant_limits(name: str, text: str) -> dict[str, Any] | None:
    """``KEY=VALUE,...`` (keys of :data:`TENANT`, or ``none``) as tenant ``name``'s limits in ``mmi.flow``'s
    JSON; ValueError saying what is wrong."""
    if text.strip().lower() == NONE:
        return None
    known, chosen = by_name(TENANT), {}
    for pair in text.split(","):
        key, sep, value = pair.partition("=")
        if not sep or key not in known:
            raise ValueError(f"tenant limits are {', '.join(known)}, not {pair!r}")
        try:
            chosen[key] = known[key].parse(value)
        except ValueError as error:
            raise ValueError(f"{key} of tenant {name!r}: {error}") from None
    return chosen

"""The broker's status report (``mmi.status``) as types: what the core reports and what readers get back.

This module owns the report's shape and its JSON form: :meth:`StatusReport.to_json` gives the text the broker
sends (attrs' ``asdict``), :meth:`StatusReport.from_json` reads it back on the client side (cattrs: unknown keys
are ignored and missing ones take defaults, so readers and brokers of other versions get along). Every record is
built by keyword (``kw_only``), so a field moved or added cannot swap two counters. The builders read a service's
state; the core builds the rest. It knows nothing of sockets or clocks (``now`` is given).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

import attrs

from generaldomo.sansio.broker.accounts.dead import DeadLetters
from generaldomo.sansio.broker.flow import flow as flow_module
from generaldomo.sansio.broker.flow.adaptive import AdaptiveReport as AdaptiveReport
from generaldomo.sansio.broker.flow.backoff import BackoffReport as BackoffReport
from generaldomo.sansio.broker.flow.declaration import Limit, Reported, report_fields
from generaldomo.sansio.broker.flow.fair import REPORTED_TENANTS as REPORTED_TENANTS
from generaldomo.sansio.broker.flow.flow import Flow, FlowLimits
from generaldomo.sansio.broker.services.service import Service
from generaldomo.sansio.broker.services.stats import ServiceStats, percentiles
from generaldomo.sansio.config.settings import Settings
from generaldomo.sansio.wire import wirejson
from generaldomo.sansio.wire.limits import STATUS_PAGE, STATUS_QUERY

__all__ = [
    "ADAPTIVE_BYTES",
    "BACKOFF_BYTES",
    "COMPLETION_BYTES",
    "DEAD_SERVICES",
    "DESCRIPTION_BYTES",
    "ESCAPED",
    "MAX_PAGE",
    "MAX_QUERY",
    "PAGE",
    "PAGE_BYTES",
    "RETRY_BYTES",
    "SERVICE_BYTES",
    "TENANT_BYTES",
    "WORKER_BYTES",
    "BrokerReport",
    "ConnectionReport",
    "DeadLettersReport",
    "DeadServiceReport",
    "Endpoint",
    "JournalReport",
    "LedgerReport",
    "NextPage",
    "PairReport",
    "Percentiles",
    "RecentReport",
    "ServiceReport",
    "SettingsReport",
    "StatusQuery",
    "StatusReport",
    "TenantReport",
    "WorkerReport",
    "as_data",
    "flow_report_class",
    "limits_in_force",
    "page",
]

if TYPE_CHECKING:
    import cattrs

PAGE = 100  # services and workers an mmi.status reply lists unless asked for fewer or more
MAX_PAGE = STATUS_PAGE.high  # the most it lists
MAX_QUERY = STATUS_QUERY.high  # bytes of an mmi.status request's query
DESCRIPTION_BYTES = 256  # bytes of a worker's description a report shows (description_bytes: all of them)
# A page's bytes and work, whatever the broker holds: each record it lists is bounded (names, tenants and
# completions listed are), and the page lists services, then workers, each up to half of PAGE_BYTES by the
# records' estimates below, which are at least their JSON's bytes (at least one record of each), the rest left
# to the next page (``next``).
PAGE_BYTES = 384 * 1024
SERVICE_BYTES = 1152  # a service's record, besides its name, tenants, completions, adaptive cap and backoff
ADAPTIVE_BYTES = 256  # its adaptive cap's report
BACKOFF_BYTES = 288  # its backoff's report
RETRY_BYTES = 128  # its retry policy's report, besides 5 bytes per status it names
TENANT_BYTES = 160  # a tenant listed, or a tenant's limits, besides its name
COMPLETION_BYTES = 80  # a completion in its ``recent`` columns
WORKER_BYTES = 512  # a worker's record, besides its texts
DEAD_SERVICES = 10  # services the report names in its dead letters, those with the most
ESCAPED = 12  # bytes of JSON text a character of a name may take (a character beyond U+FFFF: two \\uXXXX)
_QUERY_KEYS = frozenset({"limit", "services_after", "workers_after", "service", "order"})


@attrs.frozen(kw_only=True)
class Percentiles:
    """Recent times in seconds; None until there are some."""

    p50: float | None = None
    p90: float | None = None
    p99: float | None = None

    @classmethod
    def of(cls, values: Iterable[float]) -> Percentiles:
        """The nearest-rank percentiles of ``values`` (see
        :func:`~generaldomo.sansio.broker.services.stats.percentiles`)."""
        p50, p90, p99 = percentiles(values)
        return cls(p50=p50, p90=p90, p99=p99)


def limits_in_force(flow: Flow) -> FlowLimits:
    """The limits ``flow`` enforces, as both ``mmi.flow`` and the report show them (:attr:`Flow.in_force`)."""
    return flow.in_force


class _FlowReportBase:
    """What the flow report does besides holding its fields (those of :func:`flow_report_class`)."""

    __slots__ = ()
    reported: ClassVar[tuple[tuple[str, Reported], ...]] = ()  # each field's name and how it is reported

    @classmethod
    def of(cls, flow: Flow, now: float) -> Any:
        """The report of ``flow`` at ``now``: each field as its declaration reports it (of the tenants' limits,
        those of "*" and the first others set, up to :data:`REPORTED_TENANTS`, their number in
        ``tenant_limits``)."""
        limits = flow.in_force
        return cls(**{name: reported(flow, limits, now) for name, reported in cls.reported})

    def fields(self) -> dict[str, Any]:
        """Its fields by name, in order (their records as they are)."""
        return {name: getattr(self, name) for name, _ in self.reported}

    @property
    def estimated_bytes(self) -> int:
        """At least as many bytes as its JSON text (see :data:`PAGE_BYTES`)."""
        adaptive, backoff, tenants, retry = (
            getattr(self, name, None) for name in ("adaptive", "backoff", "tenants", "retry")
        )
        parts = (ADAPTIVE_BYTES if adaptive is not None else 0) + (BACKOFF_BYTES if backoff is not None else 0)
        parts += 0 if retry is None else RETRY_BYTES + 5 * len(retry["statuses"])
        return parts + sum(TENANT_BYTES + ESCAPED * len(name) for name in tenants or ())


def flow_report_class(limits: Sequence[Limit]) -> type[Any]:
    """The record of a service's flow report, a field per limit declared in ``limits`` and those beside it (see
    :func:`~generaldomo.sansio.broker.flow.declaration.report_fields`), in their order: the limits in force and
    the tasks (and their request bytes) in flight."""
    declared = report_fields(limits)
    fields = {f.name: attrs.field(default=f.default, type=f.type) for f in declared}
    made: type[_FlowReportBase] = attrs.make_class(
        "FlowReport", fields, bases=(_FlowReportBase,), frozen=True, kw_only=True, slots=True
    )
    made.reported = tuple((f.name, f.reported) for f in declared)
    made.__module__ = __name__
    made.__doc__ = flow_report_class.__doc__
    return made


if TYPE_CHECKING:

    class FlowReport(_FlowReportBase):
        """A service's flow report (made from the declarations: :func:`flow_report_class`)."""

        def __init__(self, **fields: Any) -> None: ...

        def __getattr__(self, name: str) -> Any: ...

else:
    FlowReport = flow_report_class(flow_module.LIMITS)


@attrs.frozen(kw_only=True)
class RecentReport:
    """A service's last completed tasks (at most :data:`~generaldomo.sansio.broker.services.stats.RECENT`), oldest
    first, as three columns: seconds since each ended, its queue time and its service time (s). The last one is the
    service's completion number ``completed``, so a reader polling the report knows which ones it has not
    seen yet; together they draw a timeline of its dispatches."""

    ended: list[float] = attrs.field(factory=list)
    queued: list[float] = attrs.field(factory=list)
    served: list[float] = attrs.field(factory=list)

    @classmethod
    def of(cls, stats: ServiceStats, now: float) -> RecentReport:
        """The report of the last completions in ``stats`` at ``now`` (times to 0.1 ms)."""
        recent = stats.recent()
        return cls(
            ended=[round(now - ended, 4) for ended, _, _ in recent],
            queued=[round(queued, 4) for _, queued, _ in recent],
            served=[round(served, 4) for _, _, served in recent],
        )


@attrs.frozen(kw_only=True)
class TenantReport:
    """One tenant of a service with tasks queued or in flight: its weight, queued and in flight, whether a limit
    of its own holds it, and its dispatches (since it last appeared). ``name``: its CURVE key, the name its
    client gave, or ``conn/`` and its connection's opaque label."""

    name: str = ""
    weight: int = 1
    queued: int = 0
    in_flight: int = 0
    held: bool = False
    dispatched: int = 0


@attrs.frozen(kw_only=True)
class ServiceReport:
    """One service: its workers, queue, limits, tenants and what happened to its tasks."""

    name: str = ""
    workers: int = 0
    waiting: int = 0
    queued: int = 0
    delayed: int = 0  # queued tasks held until their not_before or a retry's backoff ends (not in the queue yet)
    in_flight: int = 0
    flow: FlowReport = attrs.field(factory=FlowReport)
    completed: int = 0
    failed: int = 0
    reissued: int = 0
    duplicates_dropped: int = 0
    expired: int = 0
    observed_rate: float = 0.0
    queue_time: Percentiles = attrs.field(factory=Percentiles)
    service_time: Percentiles = attrs.field(factory=Percentiles)
    service_time_estimate: float | None = None  # what deadline-aware dispatch reads (s); None: none answered yet
    queued_bytes: int = 0  # bytes of the requests the broker holds for it (queued or running)
    recent: RecentReport = attrs.field(factory=RecentReport)
    tenants: list[TenantReport] = attrs.field(factory=list)  # the busiest
    busy_tenants: int = 0  # tenants with tasks queued or in flight
    throttled: int = 0  # tasks its workers sent back with 429, queued again
    retried: int = 0  # answers its retry policy retried

    @classmethod
    def of(
        cls, service: Service, queued_bytes: int, now: float, name: Callable[[Hashable], str] = str
    ) -> ServiceReport:
        """The report of ``service`` at ``now``; ``name`` names a tenant by its key."""
        flow, stats = service.flow, service.stats
        pending = service.pending
        tenants = [
            TenantReport(
                name=name(key), weight=limits.weight, queued=queued, in_flight=in_flight, held=held, dispatched=done
            )
            for key, limits, queued, in_flight, held, done in pending.busiest(REPORTED_TENANTS)
        ]
        return cls(
            name=service.name,
            workers=len(service.workers),
            waiting=len(service.waiting),
            queued=len(service.pending),
            delayed=len(service.delayed),
            in_flight=flow.in_flight,
            flow=FlowReport.of(flow, now),
            completed=stats.completed,
            failed=stats.failed,
            reissued=stats.reissued,
            duplicates_dropped=stats.duplicates_dropped,
            expired=stats.expired,
            observed_rate=stats.rate(now),
            queue_time=Percentiles.of(stats.queue_times),
            service_time=Percentiles.of(stats.service_times),
            service_time_estimate=None if stats.estimate is None else round(stats.estimate, 6),
            queued_bytes=queued_bytes,
            recent=RecentReport.of(stats, now),
            tenants=tenants,
            busy_tenants=pending.busy_tenants,
            throttled=stats.throttled,
            retried=stats.retried,
        )

    @property
    def estimated_bytes(self) -> int:
        """At least as many bytes as its JSON text (see :data:`PAGE_BYTES`)."""
        completions = COMPLETION_BYTES * len(self.recent.ended)
        tenants = sum(TENANT_BYTES + ESCAPED * len(tenant.name) for tenant in self.tenants)
        return SERVICE_BYTES + ESCAPED * len(self.name) + tenants + self.flow.estimated_bytes + completions


@attrs.frozen(kw_only=True)
class WorkerReport:
    """One registered worker. ``peer`` is an opaque label, never the peer's routing id; ``host`` and ``pid``
    are what the worker said of itself (None: it did not say, as MDP workers cannot); ``description`` is its
    first :data:`DESCRIPTION_BYTES` bytes, ``description_bytes`` its whole length; ``serial`` its place in the
    order of registration (the pages' cursor)."""

    peer: str = ""
    description: str = ""
    service: str = ""
    dialect: str = ""
    state: str = ""
    tasks_done: int = 0
    last_seen: float = 0.0
    host: str | None = None
    pid: int | None = None
    description_bytes: int = 0
    serial: int = 0

    @property
    def estimated_bytes(self) -> int:
        """At least as many bytes as its JSON text (see :data:`PAGE_BYTES`)."""
        texts = len(self.peer) + len(self.description) + len(self.service) + len(self.host or "")
        return WORKER_BYTES + ESCAPED * texts


class _Record(Protocol):
    @property
    def estimated_bytes(self) -> int: ...


Candidate = TypeVar("Candidate")
Record = TypeVar("Record", bound=_Record)


def page(
    candidates: Sequence[Candidate], limit: int, build: Callable[[Candidate], Record], page_bytes: int = PAGE_BYTES
) -> tuple[list[Record], bool]:
    """The records ``build`` makes of the first ``candidates``, up to ``limit`` of them and half of ``page_bytes``
    by their estimates (at least one), and whether some candidates were left out."""
    records: list[Record] = []
    spent, budget = 0, page_bytes // 2
    for candidate in itertools.islice(candidates, limit):
        record = build(candidate)
        spent += record.estimated_bytes
        if spent > budget and records:
            break
        records.append(record)
    return records, len(records) < len(candidates)


@attrs.frozen(kw_only=True)
class Endpoint:
    """A bound endpoint of one of the broker's links."""

    transport: str = ""
    endpoint: str = ""


@attrs.frozen(kw_only=True)
class SettingsReport:
    """The timing and limits the broker enforces (see :class:`~generaldomo.sansio.config.settings.Settings`)."""

    heartbeat_interval: float = 0.0
    liveness: int = 0
    max_attempts: int = 0
    queue_timeout: float | None = None
    anonymous_queue_timeout: float | None = None
    max_message: int | None = None
    max_frames: int | None = None
    queue_bytes: int | None = None
    service_queue_bytes: int | None = None
    keep_answers: float = 0.0
    keep_bytes: int = 0
    dead_letters: int = 0
    dead_bytes: int = 0
    dead_seconds: float = 0.0
    service_idle: float | None = None
    client_expiry: float | None = None
    max_workers: int | None = None
    field_limits: dict[str, dict[str, Any]] = attrs.field(factory=dict)  # generaldomo.sansio.wire.limits, by field
    recovery: float | None = None
    held_bytes: int | None = None
    connection_bytes: int | None = None
    connection_requests: int | None = None
    connection_services: int | None = None
    connection_worker_share: float = 0.0
    connection_workers: int | None = None  # what the share allows
    connection_queue_share: float = 0.0
    connection_queue_bytes: int | None = None  # what the share allows
    served_memory: float = 0.0
    deadline_estimate_after: int | None = None

    @classmethod
    def of(cls, settings: Settings, field_limits: dict[str, dict[str, Any]]) -> SettingsReport:
        """The report of ``settings`` (those of its values this report shows, by name) and of ``field_limits``."""
        shown = {
            "connection_workers": settings.connection_workers,
            "connection_queue_bytes": settings.connection_queue_bytes,
            "field_limits": field_limits,
        }
        values = dataclasses.asdict(settings) | shown
        return cls(**{field.name: values[field.name] for field in attrs.fields(cls)})


@attrs.frozen(kw_only=True)
class ConnectionReport:
    """What one connection holds in the ledger: ``connection`` is an opaque label (link and a keyed hash of
    its routing id), ``holdings`` the number of holdings of each kind (tasks, workers, services, ...)."""

    connection: str = ""
    bytes: int = 0
    holdings: dict[str, int] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class PairReport:
    """This broker's place in a broker pair (:mod:`generaldomo.sansio.broker.pair`): its ``role`` (primary or
    backup), its ``state`` (active: it serves; passive; primary or backup: not yet decided; broken), the peer
    broker's pair endpoint, the state the peer said last and how many seconds ago (None: never heard), and the
    state changes so far. The replication of the journal (:mod:`generaldomo.sansio.broker.replication`): the last
    record this broker shipped as the active (``sequence``) and applied as the passive (``applied``), the lag the
    passive last reported (records and seconds; None: no passive has reported, or it awaits a snapshot), and the
    requests, kept answers and run-time flow limits the replicated state holds (the active's: what it shipped; the
    passive's: what it would restore on taking over)."""

    role: str = ""
    state: str = ""
    peer: str = ""
    peer_state: str | None = None
    last_contact: float | None = None
    changes: int = 0
    sequence: int = 0
    applied: int = 0
    lag_records: int | None = None
    lag_seconds: float | None = None
    replicated_requests: int = 0
    replicated_answers: int = 0
    replicated_flows: int = 0


@attrs.frozen(kw_only=True)
class JournalReport:
    """The write-ahead log of the broker's state directory (:mod:`generaldomo.io.hub.wal`): its ``fsync`` policy,
    the records written and those ``waiting`` for the writer (what the broker's answers wait for), the group
    commits and compactions so far, and the log's size."""

    fsync: str = ""
    written: int = 0
    waiting: int = 0
    commits: int = 0
    compactions: int = 0
    bytes: int = 0


@attrs.frozen(kw_only=True)
class LedgerReport:
    """The ledger (:mod:`generaldomo.sansio.broker.accounts.ledger`): bytes held on peers' behalf in all
    (``held_bytes``) and by kind of holding, the connections that hold any, and the
    :data:`~generaldomo.sansio.broker.core.reporting.TOP_CONNECTIONS` that hold the most."""

    held_bytes: int = 0
    by_kind: dict[str, int] = attrs.field(factory=dict)
    connections: int = 0
    top: list[ConnectionReport] = attrs.field(factory=list)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class DeadServiceReport:
    """A service's dead letters: how many, their bytes, and the age in seconds of the newest."""

    service: str = ""
    count: int = 0
    bytes: int = 0
    newest_age: float = 0.0


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class DeadLettersReport:
    """The dead letters (:mod:`generaldomo.sansio.broker.accounts.dead`): the tasks that failed for good, kept in
    all (``letters``, ``bytes``), evicted for the bounds, in how many services, and the :data:`DEAD_SERVICES`
    services with the most (``generaldomo dead list`` shows the rest)."""

    letters: int = 0
    bytes: int = 0
    evicted: int = 0
    service_count: int = 0
    services: list[DeadServiceReport] = dataclasses.field(default_factory=list)

    @classmethod
    def of(cls, dead: DeadLetters, now: float) -> DeadLettersReport:
        """The report of ``dead`` at ``now``."""
        return cls(
            letters=len(dead), bytes=dead.bytes, evicted=dead.evicted, service_count=dead.service_count(),
            services=[
                DeadServiceReport(service=s.service, count=s.count, bytes=s.bytes, newest_age=round(now - s.newest, 3))
                for s in dead.services(DEAD_SERVICES)
            ],
        )  # fmt: skip


@attrs.frozen(kw_only=True)
class BrokerReport:
    """The broker as a whole."""

    instance: str = ""
    uptime: float = 0.0
    endpoints: list[Endpoint] = attrs.field(factory=list)
    counters: dict[str, int] = attrs.field(factory=dict)
    queued: int = 0
    settings: SettingsReport = attrs.field(factory=SettingsReport)
    queued_bytes: int = 0
    kept_answers: int = 0
    kept_bytes: int = 0
    kept_evicted: int = 0  # kept answers dropped for the byte budget before their time was up
    ledger: LedgerReport = attrs.field(factory=LedgerReport)
    service_count: int = 0  # services in all (the report lists a page of them)
    worker_count: int = 0  # registered workers in all (the report lists a page of them)
    hosts: dict[str, int] = attrs.field(factory=dict)  # workers per announced host, the busiest; "other": the rest
    internal_errors: int = 0  # messages and periodic jobs whose handling raised an unexpected error (barrier)
    in_flight: int = 0  # tasks running on workers, all services
    dead_letters: DeadLettersReport = attrs.field(factory=DeadLettersReport)
    pair: PairReport | None = None  # its place in a broker pair (None: a broker alone)
    journal: JournalReport | None = None  # its state directory's write-ahead log (None: no state directory)


@attrs.frozen(kw_only=True)
class NextPage:
    """Where the next page of an ``mmi.status`` report starts, as the request body asks for it: after the
    service called ``services_after`` (in name order) and after the worker whose serial is ``workers_after``
    (in order of registration); None: this page has the last of them."""

    services_after: str | None = None
    workers_after: int | None = None


@attrs.frozen(kw_only=True)
class StatusQuery:
    """What an ``mmi.status`` request asks for (its optional JSON body): at most ``limit`` services and
    workers (:data:`PAGE` unless asked; at most :data:`MAX_PAGE`), those after the cursors of a
    :class:`NextPage`, those of the service called ``service`` only, in name order (``order="name"``) or the
    busiest services first (``"busy"``: most workers, queued and in flight; no further pages)."""

    limit: int = PAGE
    services_after: str | None = None
    workers_after: int | None = None
    service: str | None = None
    order: str = "name"

    @classmethod
    def from_json(cls, frame: bytes) -> StatusQuery:
        """The query in an ``mmi.status`` body frame; ValueError when it is not one."""
        if len(frame) > MAX_QUERY:
            raise ValueError(f"a status query has at most {MAX_QUERY} bytes")
        try:
            data = wirejson.loads(frame, MAX_QUERY)
        except ValueError:
            raise ValueError("a status query is a JSON object") from None
        if not isinstance(data, dict):
            raise ValueError("a status query is a JSON object")
        unknown = set(data) - _QUERY_KEYS
        if unknown:
            raise ValueError(f"unknown status query keys {sorted(unknown)}; known: {', '.join(sorted(_QUERY_KEYS))}")
        limit = data.get("limit", PAGE)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
            raise ValueError(f"limit must be a whole number from 1 to {MAX_PAGE}")
        for key in ("services_after", "service"):
            if not isinstance(data.get(key), str | None):
                raise ValueError(f"{key} must be a string (or null)")
        after = data.get("workers_after")
        if after is not None and (isinstance(after, bool) or not isinstance(after, int) or after < 0):
            raise ValueError("workers_after must be a whole number (or null)")
        if data.get("order", "name") not in ("name", "busy"):
            raise ValueError('order must be "name" or "busy"')
        return cls(**data)

    def to_json(self) -> bytes:
        """The body frame that asks for this query."""
        data = {key: value for key, value in attrs.asdict(self).items() if value is not None}
        return json.dumps(data).encode()


def _plain(instance: object, field: object, value: Any) -> Any:
    """A field's value as JSON-ready data: the flow's records (dataclasses) as dicts, the rest as it is."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value


def as_data(record: Any) -> dict[str, Any]:
    """A report record (this module's, or one of those it holds) as JSON-ready data."""
    return attrs.asdict(record, value_serializer=_plain)


def _is_record(kind: type[Any]) -> bool:
    return attrs.has(kind) or dataclasses.is_dataclass(kind)


def _erased(kind: type[Any]) -> bool:
    """True for a record of the compiled core whose fields' types the compiler erased (an optional field's is
    ``type``): such a record holds plain values, taken as the JSON gives them."""
    return dataclasses.is_dataclass(kind) and any(field.type is type for field in dataclasses.fields(kind))


def _as_given(data: Mapping[str, Any], kind: type[Any]) -> Any:
    """A record of plain values from its JSON object (keys it does not know left out, as cattrs does)."""
    names = {field.name for field in dataclasses.fields(kind) if field.init}
    return kind(**{key: value for key, value in data.items() if key in names})


@functools.cache
def _converter() -> cattrs.Converter:
    """cattrs' converter of JSON-ready data into these records, each of which must come as a JSON object
    (cattrs alone would take a string for a record of defaults). Made at first use: only readers of reports need
    cattrs, and importing it takes a tenth of a second."""
    import cattrs
    from cattrs.gen import make_dict_structure_fn

    converter = cattrs.Converter()

    def record(kind: type[Any]) -> Callable[[Any, type[Any]], Any]:
        structure = make_dict_structure_fn(kind, converter) if not _erased(kind) else _as_given

        def strictly(data: Any, _: type[Any]) -> Any:
            if not isinstance(data, Mapping):
                raise ValueError(f"a {kind.__name__} is a JSON object, not {type(data).__name__}")
            return structure(data, kind)

        return strictly

    converter.register_structure_hook_factory(_is_record, record)
    return converter


@attrs.frozen(kw_only=True)
class StatusReport:
    """The ``mmi.status`` report: the broker, its services and its workers."""

    broker: BrokerReport = attrs.field(factory=BrokerReport)
    services: list[ServiceReport] = attrs.field(factory=list)
    workers: list[WorkerReport] = attrs.field(factory=list)
    next: NextPage = attrs.field(factory=NextPage)

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        return as_data(self)

    def to_json(self) -> str:
        """The report as JSON text, as ``mmi.status`` sends it."""
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StatusReport:
        """The report from JSON-ready data; ValueError when it is not a status report."""
        import cattrs

        try:
            return _converter().structure(data, cls)
        except (cattrs.BaseValidationError, TypeError, ValueError, KeyError, AttributeError) as error:
            raise ValueError(f"not a status report: {error!r}") from None

    @classmethod
    def from_json(cls, text: str | bytes) -> StatusReport:
        """The report from the JSON text of an ``mmi.status`` reply; ValueError when it is not one."""
        return cls.from_dict(wirejson.loads(text, None))

    def service(self, name: str) -> ServiceReport | None:
        """The report of the service called ``name``, if there is one."""
        return next((s for s in self.services if s.name == name), None)

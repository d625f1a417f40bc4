"""Flow control for one service: a rate limit (token bucket), a concurrency cap, a cap on request bytes in
flight, an adaptive concurrency cap (:mod:`generaldomo.sansio.broker.flow.adaptive`) and a rate adapted to the service's
429 answers (:mod:`generaldomo.sansio.broker.flow.backoff`; the lower of it and the rate limit holds; a 429's
retry_after holds back the worker that said it, which is the broker core's business, not the service's).

This module owns the arithmetic of admission: given the time and the size of the next task, may it be
dispatched now, and if not, when. Rules: a task is in flight from its dispatch until it is answered, fails,
or is lost with its worker; its bytes count against ``bytes_in_flight`` all that time. A task larger than
the byte limit is dispatched alone, when nothing else is in flight (it is never refused for its size here;
the broker's message and queue budgets bound sizes). With both a fixed and an adaptive cap, the lower one
holds. Only answered tasks teach the adaptive cap. It is fed the time by its caller and reads no clock; it
knows nothing of tasks, workers or sockets. Reissued tasks count like new ones, since each dispatch loads
the service. A service without limits only counts its tasks and their bytes in flight here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable
from typing import Any, Final

from generaldomo.sansio.broker.flow.adaptive import REPORT_SCHEMA as ADAPTIVE_SCHEMA
from generaldomo.sansio.broker.flow.adaptive import Adaptive, AdaptiveLimits, AdaptiveReport
from generaldomo.sansio.broker.flow.backoff import REPORT_SCHEMA as BACKOFF_SCHEMA
from generaldomo.sansio.broker.flow.backoff import Backoff, BackoffLimits, BackoffReport
from generaldomo.sansio.broker.flow.bucket import TokenBucket
from generaldomo.sansio.broker.flow.declaration import Beside, Control, Limit, knob
from generaldomo.sansio.broker.flow.fair import (
    REPORTED_TENANTS,
    TENANTS_SCHEMA,
    TenantLimits,
    first_tenants,
    merge_tenants,
    tenants_of,
)
from generaldomo.sansio.broker.flow.retry import REPORT_SCHEMA as RETRY_SCHEMA
from generaldomo.sansio.broker.flow.retry import RetryPolicy, retry_text
from generaldomo.sansio.checked import check_fields, checked_record
from generaldomo.sansio.config.knobs import Kind, Knob
from generaldomo.sansio.wire.limits import ADAPTIVE, BURST, BYTES_IN_FLIGHT, CONCURRENCY, RATE

__all__ = ["FLOW", "LIMIT", "LIMITS", "LIMIT_NAMES", "Flow", "FlowLimits", "limits_json"]

_NO_LIMIT = "no limit"
_COUNT: Final = {"$ref": "#/$defs/count"}

# The limits of a service (FlowLimits, mmi.flow's keys, the flow report's fields), each declared once: from
# these are made the CLI's flags, the report, its schema, the status view, the dashboard's form and the guide's
# table (see generaldomo.sansio.broker.flow.declaration).
LIMITS: Final[tuple[Limit, ...]] = (
    Limit(
        knob=knob(
            RATE, Kind.FLOAT, "dispatches per second; 'none' lifts it",
            unit="per second", none_means=_NO_LIMIT, metavar="PER_SECOND", metric="service_rate_limit",
        ),
        field=RATE, example="5", description="Dispatches per second.", always_shown=True, column="limit/s",
        control=Control(label="rate /s", size=7, summary="{value}/s", format="rate"),
    ),
    Limit(
        knob=knob(
            BURST, Kind.INT, "dispatches allowed back to back (a new limit starts at 1)",
            metavar="N", metric="service_burst_limit",
        ),
        field=BURST, example="1",
        description="Dispatches allowed back to back under the rate; null while no rate is in force.",
        always_shown=True, column="burst",
        control=Control(label="burst", placeholder="1", size=5, summary="burst {value}"),
    ),
    Limit(
        knob=knob(
            CONCURRENCY, Kind.INT, "tasks in flight at once; 'none' lifts it",
            none_means=_NO_LIMIT, metavar="N", metric="service_concurrency_limit",
        ),
        field=CONCURRENCY, example="10", description="Tasks in flight at once.", always_shown=True, column="max conc",
        control=Control(label="concurrency", size=5, summary="≤ {value} at once"),
        beside=(
            Beside(
                name="in_flight", description="Tasks dispatched and not yet answered.", schema=_COUNT, type=int,
                default=0, reported=lambda flow, limits, now: flow.in_flight,
            ),
        ),
    ),
    Limit(
        knob=knob(
            BYTES_IN_FLIGHT, Kind.INT, "request bytes in flight at once (a larger task goes alone); 'none' lifts it",
            unit="bytes", none_means=_NO_LIMIT, metavar="BYTES", metric="service_bytes_in_flight_limit",
        ),
        field=BYTES_IN_FLIGHT, example="1000000",
        description="Limit on request bytes in flight (a larger request goes alone).",
        line="bytes in flight {in_flight_bytes}/{bytes_in_flight}",
        control=Control(label="bytes in flight", size=9, summary="≤ {value} in flight", format="bytes"),
        beside=(
            Beside(
                name="in_flight_bytes", description="Request bytes (description and body) of the tasks in flight.",
                schema=_COUNT, type=int, default=0, reported=lambda flow, limits, now: flow.in_flight_bytes,
            ),
        ),
    ),
    Limit(
        knob=knob(
            ADAPTIVE, Kind.RANGE, "adapt the concurrency cap to service times within these bounds; 'none' turns it off",
            none_means="off", metavar="MIN..MAX", metric=None,
        ),
        field=ADAPTIVE, converter=AdaptiveLimits.of, example="1..64",
        description="The adaptive concurrency cap; null: off.",
        schema=ADAPTIVE_SCHEMA, type=AdaptiveReport | None,
        reported=lambda flow, limits, now: AdaptiveReport.of(flow.adaptive, now),
        line="adaptive cap {adaptive.cap} ({adaptive.min}..{adaptive.max}, floor {adaptive.floor:ms})",
        control=Control(label="adaptive", placeholder="off", size=4, summary="adaptive {min}…{max} (cap {cap})"),
    ),
    Limit(
        knob=Knob(
            name="tenants", kind=Kind.TENANTS, default=None, none_means="no per-tenant limits", flag="--tenant",
            help="a tenant's share and limits: weight (default 1), rate, burst, concurrency, e.g. "
            "alice=weight=3,concurrency=8; NAME=none forgets them; the name '*' sets every other tenant's",
            metavar="NAME=KEY=VALUE,...", metric=None,
        ),
        converter=tenants_of, schema=TENANTS_SCHEMA, type=dict[str, dict[str, Any]] | None,
        description='Weights and limits by tenant name ("*": every tenant not named), those of "*" and the first '
        f"others set (at most {REPORTED_TENANTS}; tenant_limits says how many there are); null: none set.",
        reported=lambda flow, limits, now: None if limits.tenants is None else first_tenants(limits.tenants),
        line=None,
        beside=(
            Beside(
                name="tenant_limits", description='Tenants with weights or limits set, "*" included; null: none set.',
                schema={"type": ["integer", "null"], "minimum": 0}, type=int | None, default=None,
                reported=lambda flow, limits, now: None if limits.tenants is None else len(limits.tenants), last=True,
            ),
        ),
    ),
    Limit(
        knob=Knob(
            name="backoff", kind=Kind.RATE_RANGE, default=None, unit="per second", none_means="the defaults, 0.1..",
            help="bounds (per second; MAX may be left out) of the dispatch rate adapted to the workers' 429 answers; "
            "'auto': the defaults, 0.1..", derived=True, metavar="MIN..MAX", metric=None,
        ),
        converter=BackoffLimits.of, example="1..50", schema=BACKOFF_SCHEMA, type=BackoffReport | None,
        description="The dispatch rate adapted to the service's 429 answers; null: no 429 yet and default bounds.",
        reported=lambda flow, limits, now: BackoffReport.of(flow.backoff, flow.backoff_set, now), line=None,
    ),
    Limit(
        knob=Knob(
            name="retry", kind=Kind.POLICY, default=None, derived=True, flag="--retry",
            none_means="answers marked for a retry (a handler's Reject(503, retry=True)) retried 3 times, backoff "
            "0.1..10 s",
            help="retry the service's failed answers: retries=N (0 turns retrying off), backoff=MIN..MAX seconds "
            "(doubling from MIN, with jitter, within the request's deadline), statuses=500+503 (retried without a "
            "handler's mark); a bare number is retries=N; 'auto': the defaults",
            metavar="retries=N/backoff=MIN..MAX/statuses=S+S", metric=None, reader=retry_text,
            writer=lambda value: value if isinstance(value, str) else _policy(value).text(),
        ),
        converter=RetryPolicy.of, example="retries=3/backoff=0.1..10", schema=RETRY_SCHEMA,
        type=dict[str, Any] | None, description="The retry policy; null: the defaults (answers marked for a retry "
        "retried 3 times, backoff 0.1..10 s).",
        reported=lambda flow, limits, now: None if limits.retry is None else limits.retry.as_json(),
        line="retry {retry[retries]}x, backoff {retry[backoff][min]}..{retry[backoff][max]} s",
    ),
)  # fmt: skip
LIMIT = {limit.name: limit for limit in LIMITS}


def _policy(value: object) -> RetryPolicy:
    policy = RetryPolicy.of(value)
    assert policy is not None  # (a writer is given values, not null)
    return policy


FLOW: Final = tuple(limit.knob for limit in LIMITS)  # the limits' knobs: their CLI flags and metrics


@dataclasses.dataclass(frozen=True, slots=True)
class FlowLimits:
    """The limits an operator sets for a service name, a field per declaration in :data:`LIMITS`, in its order;
    None: no limit (``burst``: keep the current burst; ``backoff``: the default bounds; ``retry``: the default
    policy).

    Raises ValueError on a bad limit, so a FlowLimits that exists is valid."""

    rate: float | None = LIMIT["rate"].record_field
    burst: int | None = LIMIT["burst"].record_field
    concurrency: int | None = LIMIT["concurrency"].record_field
    bytes_in_flight: int | None = LIMIT["bytes_in_flight"].record_field
    adaptive: AdaptiveLimits | None = LIMIT["adaptive"].record_field
    tenants: dict[str, TenantLimits] | None = LIMIT["tenants"].record_field
    backoff: BackoffLimits | None = LIMIT["backoff"].record_field
    retry: RetryPolicy | None = LIMIT["retry"].record_field

    def merged(self, changes: dict[str, object]) -> FlowLimits:
        """These limits with ``changes`` (keys among :data:`LIMIT_NAMES`) applied; ValueError on bad input.
        ``tenants`` changes the tenants it names (null forgets one's limits; a null ``tenants`` all of them)."""
        unknown = set(changes) - set(LIMIT_NAMES)
        if unknown:
            raise ValueError(f"unknown limits {sorted(unknown)}; known: {', '.join(LIMIT_NAMES)}")
        if "tenants" in changes:
            changes = {**changes, "tenants": merge_tenants(self.tenants, changes["tenants"])}
        kept = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
        return checked_record(FlowLimits, {**kept, **changes})  # (converted before the record is made)

    def __post_init__(self) -> None:
        check_fields(self)

    @property
    def unset(self) -> bool:
        """True when nothing is limited: the limits every service starts with."""
        return self == FlowLimits()


LIMIT_NAMES = tuple({field.name: field for field in dataclasses.fields(FlowLimits)})  # mmi.flow's keys


def limits_json(limits: FlowLimits) -> dict[str, Any]:
    """``limits`` in their JSON form, a key per limit (what :meth:`FlowLimits.merged` reads back): ``mmi.flow``'s
    answer and the state directory's file."""
    return {field.name: _json_form(getattr(limits, field.name)) for field in dataclasses.fields(limits)}


def _json_form(value: Any) -> Any:
    """A limit's JSON form: a policy's as it says, another record's as its fields (in a dict of them too)."""
    if isinstance(value, RetryPolicy):
        return value.as_json()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, dict):
        return {key: _json_form(item) for key, item in value.items()}
    return value


@dataclasses.dataclass(slots=True)
class Flow:
    """Limits of one service and the state that enforces them.

    ``rate``: dispatches per second (None: unlimited), ``burst``: dispatches allowed back to back after an
    idle spell, ``concurrency``: tasks in flight at once (None: unlimited), ``bytes_in_flight``: request bytes
    in flight at once (None: unlimited), ``adaptive``: the adaptive cap's state (None: off).
    """

    rate: float | None = None
    burst: int = 1
    concurrency: int | None = None
    bytes_in_flight: int | None = None
    adaptive: Adaptive | None = None
    tenants: dict[str, TenantLimits] | None = None  # weights and limits by tenant (the service's queue applies them)
    backoff: Backoff = dataclasses.field(default_factory=Backoff)  # the rate its 429s taught, and its bounds
    backoff_set: bool = False  # the bounds were set (not the defaults)
    limits: FlowLimits = dataclasses.field(default_factory=FlowLimits)  # as last applied
    in_flight: int = 0
    in_flight_bytes: int = 0
    _cap: int | None = dataclasses.field(default=None, init=False)  # the lower of the fixed and the adaptive cap
    _rate: float | None = dataclasses.field(
        default=None, init=False
    )  # the lower of the rate limit and the adapted rate
    _bucket: TokenBucket = dataclasses.field(default_factory=TokenBucket, init=False)  # the rate in force's bucket

    def configure(self, rate: float | None, burst: int | None, concurrency: int | None) -> None:
        """Change the limits (ValueError on a bad one); the bucket starts full under a new rate."""
        self.apply(FlowLimits(rate, burst, concurrency))

    def apply(self, limits: FlowLimits) -> None:
        """Enforce ``limits`` from now on; the bucket starts full under a new rate; an adaptive cap already
        running keeps what it learnt, clamped into new bounds."""
        self.limits = limits
        self.rate, self.concurrency, self.bytes_in_flight = limits.rate, limits.concurrency, limits.bytes_in_flight
        self.tenants = limits.tenants
        self.backoff_set = limits.backoff is not None
        self.backoff.rebound(limits.backoff or BackoffLimits(), limits.rate)
        if limits.burst is not None:
            self.burst = limits.burst
        if limits.adaptive is None:
            self.adaptive = None
        elif self.adaptive is None:
            self.adaptive = Adaptive(limits.adaptive)
        else:
            self.adaptive.rebound(limits.adaptive)
        self._bucket.fill()
        self._recap()

    @property
    def in_force(self) -> FlowLimits:
        """The limits it enforces, as both ``mmi.flow`` and the report show them (``burst``: None when no rate is
        in force, since a burst only shapes a rate; ``backoff``: None while its bounds are the defaults)."""
        adaptive = None if self.adaptive is None else self.adaptive.limits
        burst = self.burst if self.rate is not None else None
        backoff = self.backoff.limits if self.backoff_set else None
        return dataclasses.replace(self.limits, burst=burst, adaptive=adaptive, backoff=backoff)

    def _recap(self) -> None:
        cap = self.concurrency
        if self.adaptive is not None:
            cap = self.adaptive.limit if cap is None else min(cap, self.adaptive.limit)
        self._cap = cap
        rate, adapted = self.rate, self.backoff.rate
        self._rate = adapted if rate is None else rate if adapted is None else min(rate, adapted)

    @property
    def rate_in_force(self) -> float | None:
        """The dispatch rate that holds: the lower of the rate limit and the adapted rate (None: neither)."""
        return self._rate

    @property
    def cap(self) -> int | None:
        """The concurrency cap in force (the lower of the fixed and the adaptive one), None if there is none."""
        return self._cap

    @property
    def limited(self) -> bool:
        return self._rate is not None or self._cap is not None or self.bytes_in_flight is not None

    def admits(self, now: float) -> bool:
        """True when one more dispatch is allowed at ``now`` (by rate and count; sizes: :meth:`fits`). An adapted
        rate that holds a dispatch back grows meanwhile (see backoff)."""
        if self._cap is not None and self.in_flight >= self._cap:
            return False
        if self._rate is None:
            return True
        backoff = self.backoff
        self._bucket.refill(now, self._rate, self.burst)
        if self._bucket.has_token:
            return True
        if backoff.rate is not None and backoff.rate == self._rate and backoff.held(now, self.rate):
            self._recap()  # it grew: a token may be due sooner
        return False

    def slow_down(
        self, now: float, dispatched: float | None, retry_after: float | None, worker: Hashable = None, workers: int = 1
    ) -> None:
        """``worker``, one of the service's ``workers``, answered 429 at ``now`` for a task dispatched at
        ``dispatched`` (see backoff): when the rate moved, the next dispatch waits for a token at the rate now
        in force."""
        if self.backoff.slow_down(now, dispatched, retry_after, self.rate, worker, workers):
            self._recap()
            self._bucket.empty(now)

    def fits(self, size: int) -> bool:
        """True when a task of ``size`` bytes may go now (the limits that look at the task itself; those that do
        not: :meth:`admits`): within ``bytes_in_flight``, or alone."""
        limit = self.bytes_in_flight
        return limit is None or self.in_flight_bytes + size <= limit or self.in_flight_bytes == 0

    def dispatched(self, now: float, size: int = 0) -> None:
        """Account for one dispatch of ``size`` bytes at ``now`` (after :meth:`admits` and :meth:`fits`)."""
        self.in_flight += 1
        self.in_flight_bytes += size
        self.backoff.dispatched(now)
        if self._rate is not None:
            self._bucket.refill(now, self._rate, self.burst)
            self._bucket.take()
        if self.adaptive is not None and self.in_flight >= self.adaptive.limit:
            self.adaptive.saturated = True  # demand reached the adaptive cap (not just a lower fixed one)

    def adopt(self, size: int = 0) -> None:
        """Account for a task of ``size`` bytes in flight that an earlier broker dispatched (a worker resumed
        it here): it counts against the caps until it leaves flight, but took no token of this rate."""
        self.in_flight += 1
        self.in_flight_bytes += size

    def finished(self, size: int = 0) -> None:
        """Account for one task of ``size`` bytes leaving flight (answered, failed or lost with its worker)."""
        self.in_flight = max(0, self.in_flight - 1)
        self.in_flight_bytes = max(0, self.in_flight_bytes - size)

    def answered(self, now: float, seconds: float) -> bool:
        """Teach the adaptive cap (if any) a task answered at ``now`` after ``seconds``; True if the cap moved."""
        if self.adaptive is None or not self.adaptive.observe(now, seconds):
            return False
        self._recap()
        return True

    def next_token(self, now: float) -> float | None:
        """When the rate next admits a dispatch, if that is what holds dispatch back; else None."""
        rate = self._rate
        if rate is None or (self._cap is not None and self.in_flight >= self._cap):
            return None
        self._bucket.refill(now, rate, self.burst)
        return self._bucket.due(rate)

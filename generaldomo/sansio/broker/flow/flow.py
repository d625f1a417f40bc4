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

from collections.abc import Hashable
from typing import Any

import attrs

from generaldomo.sansio.broker.flow.adaptive import Adaptive, AdaptiveLimits
from generaldomo.sansio.broker.flow.backoff import Backoff, BackoffLimits
from generaldomo.sansio.broker.flow.fair import TenantLimits, merge_tenants, tenants_of
from generaldomo.sansio.wire.limits import BURST, BYTES_IN_FLIGHT, CONCURRENCY, RATE

__all__ = ["LIMIT_NAMES", "Flow", "FlowLimits"]

_ROUNDING = 1e-9  # a token that floating-point arithmetic leaves a hair short of whole still counts


_BOUNDS = {field.name: field for field in (RATE, BURST, CONCURRENCY, BYTES_IN_FLIGHT)}


def _within(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    """A limit is None (no limit) or a number within its bounds in :mod:`generaldomo.sansio.wire.limits`; all but
    the rate are whole numbers."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{attribute.name} must be a number (or null for no limit)")
    field = _BOUNDS[attribute.name]
    if not field.admits(value):  # NaN is within no bounds
        raise ValueError(f"{attribute.name} must be {field.bounds} (or null for no limit), not {value!r}")
    if attribute.name != "rate" and isinstance(value, float) and not value.is_integer():
        raise ValueError(f"{attribute.name} must be a whole number, not {value!r}")


def _adaptive(value: object) -> AdaptiveLimits | None:
    return AdaptiveLimits.of(value)


def _backoff(value: object) -> BackoffLimits | None:
    return BackoffLimits.of(value)


@attrs.frozen(slots=True)
class FlowLimits:
    """The limits an operator sets for a service name; None: no limit (``burst``: keep the current burst).

    Raises ValueError on a bad limit, so a FlowLimits that exists is valid."""

    rate: float | None = attrs.field(default=None, validator=_within)
    burst: int | None = attrs.field(default=None, validator=_within)
    concurrency: int | None = attrs.field(default=None, validator=_within)
    bytes_in_flight: int | None = attrs.field(default=None, validator=_within)
    adaptive: AdaptiveLimits | None = attrs.field(default=None, converter=_adaptive)
    tenants: dict[str, TenantLimits] | None = attrs.field(default=None, converter=tenants_of)
    backoff: BackoffLimits | None = attrs.field(default=None, converter=_backoff)  # None: the default bounds

    def merged(self, changes: dict[str, object]) -> FlowLimits:
        """These limits with ``changes`` (keys among :data:`LIMIT_NAMES`) applied; ValueError on bad input.
        ``tenants`` changes the tenants it names (null forgets one's limits; a null ``tenants`` all of them)."""
        unknown = set(changes) - set(LIMIT_NAMES)
        if unknown:
            raise ValueError(f"unknown limits {sorted(unknown)}; known: {', '.join(LIMIT_NAMES)}")
        if "tenants" in changes:
            changes = {**changes, "tenants": merge_tenants(self.tenants, changes["tenants"])}
        return attrs.evolve(self, **changes)  # type: ignore[arg-type]

    @property
    def unset(self) -> bool:
        """True when nothing is limited: the limits every service starts with."""
        return self == FlowLimits()


LIMIT_NAMES = tuple(
    attrs.fields_dict(FlowLimits)
)  # mmi.flow's keys (generaldomo.sansio.config.knobs.FLOW: their knobs)


@attrs.define
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
    backoff: Backoff = attrs.field(factory=Backoff)  # the rate its 429s taught, and its bounds
    backoff_set: bool = False  # the bounds were set (not the defaults)
    in_flight: int = 0
    in_flight_bytes: int = 0
    _cap: int | None = attrs.field(default=None, init=False)  # the lower of the fixed and the adaptive cap
    _rate: float | None = attrs.field(default=None, init=False)  # the lower of the rate limit and the adapted rate
    _tokens: float = attrs.field(default=0.0, init=False)
    _refilled: float | None = attrs.field(default=None, init=False)  # None: the bucket is full

    def configure(self, rate: float | None, burst: int | None, concurrency: int | None) -> None:
        """Change the limits (ValueError on a bad one); the bucket starts full under a new rate."""
        self.apply(FlowLimits(rate, burst, concurrency))

    def apply(self, limits: FlowLimits) -> None:
        """Enforce ``limits`` from now on; the bucket starts full under a new rate; an adaptive cap already
        running keeps what it learnt, clamped into new bounds."""
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
        self._refilled = None
        self._recap()

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

    def _refill(self, now: float) -> None:
        rate = self._rate
        if rate is None:
            return
        if self._refilled is None:
            self._tokens = float(self.burst)
        else:
            self._tokens = min(float(self.burst), self._tokens + (now - self._refilled) * rate)
        self._refilled = now

    def admits(self, now: float) -> bool:
        """True when one more dispatch is allowed at ``now`` (by rate and count; sizes: :meth:`fits`). An adapted
        rate that holds a dispatch back grows meanwhile (see backoff)."""
        if self._cap is not None and self.in_flight >= self._cap:
            return False
        if self._rate is None:
            return True
        backoff = self.backoff
        self._refill(now)
        if self._tokens >= 1.0 - _ROUNDING:
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
            self._tokens, self._refilled = 0.0, now

    def fits(self, size: int) -> bool:
        """True when a task of ``size`` bytes may go now: within ``bytes_in_flight``, or alone."""
        limit = self.bytes_in_flight
        return limit is None or self.in_flight_bytes + size <= limit or self.in_flight_bytes == 0

    def dispatched(self, now: float, size: int = 0) -> None:
        """Account for one dispatch of ``size`` bytes at ``now`` (after :meth:`admits` and :meth:`fits`)."""
        self.in_flight += 1
        self.in_flight_bytes += size
        self.backoff.dispatched(now)
        if self._rate is not None:
            self._refill(now)
            self._tokens -= 1.0
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
        self._refill(now)
        return now + max(0.0, (1.0 - self._tokens) / rate)

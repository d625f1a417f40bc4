"""Flow control for one service: a rate limit (token bucket) and a concurrency cap.

This module owns the arithmetic of admission: given the time, may one more task be dispatched now, and if
not, when. It is fed the time by its caller and reads no clock; it knows nothing of tasks, workers or
sockets. Reissued tasks count like new ones, since each dispatch loads the service.
"""

from __future__ import annotations

from typing import Any

import attrs

_ROUNDING = 1e-9  # a token that floating-point arithmetic leaves a hair short of whole still counts
LIMIT_NAMES = ("rate", "burst", "concurrency")


def _positive_number(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{attribute.name} must be a number (or null for no limit)")
    if attribute.name == "rate" and value <= 0:
        raise ValueError("rate must be positive (or null for no limit)")
    if attribute.name != "rate" and (value < 1 or not float(value).is_integer()):
        raise ValueError(f"{attribute.name} must be a whole number of at least 1")


@attrs.frozen(slots=True)
class FlowLimits:
    """The limits an operator sets for a service name; None: no limit (``burst``: keep the current burst).

    Raises ValueError on a bad limit, so a FlowLimits that exists is valid."""

    rate: float | None = attrs.field(default=None, validator=_positive_number)
    burst: int | None = attrs.field(default=None, validator=_positive_number)
    concurrency: int | None = attrs.field(default=None, validator=_positive_number)

    def merged(self, changes: dict[str, object]) -> FlowLimits:
        """These limits with ``changes`` (keys among :data:`LIMIT_NAMES`) applied; ValueError on bad input."""
        unknown = set(changes) - set(LIMIT_NAMES)
        if unknown:
            raise ValueError(f"unknown limits {sorted(unknown)}; known: {', '.join(LIMIT_NAMES)}")
        return attrs.evolve(self, **changes)  # type: ignore[arg-type]

    @property
    def unset(self) -> bool:
        """True when nothing is limited: the limits every service starts with."""
        return self == FlowLimits()


@attrs.define
class Flow:
    """Limits of one service and the state that enforces them.

    ``rate``: dispatches per second (None: unlimited), ``burst``: dispatches allowed back to back after an
    idle spell, ``concurrency``: tasks in flight at once (None: unlimited).
    """

    rate: float | None = None
    burst: int = 1
    concurrency: int | None = None
    in_flight: int = 0
    _tokens: float = attrs.field(default=0.0, init=False)
    _refilled: float | None = attrs.field(default=None, init=False)  # None: the bucket is full

    def configure(self, rate: float | None, burst: int | None, concurrency: int | None) -> None:
        """Change the limits (ValueError on a bad one); the bucket starts full under a new rate."""
        self.apply(FlowLimits(rate, burst, concurrency))

    def apply(self, limits: FlowLimits) -> None:
        """Enforce ``limits`` from now on; the bucket starts full under a new rate."""
        self.rate, self.concurrency = limits.rate, limits.concurrency
        if limits.burst is not None:
            self.burst = limits.burst
        self._refilled = None

    @property
    def limited(self) -> bool:
        return self.rate is not None or self.concurrency is not None

    def _refill(self, now: float) -> None:
        if self.rate is None:
            return
        if self._refilled is None:
            self._tokens = float(self.burst)
        else:
            self._tokens = min(float(self.burst), self._tokens + (now - self._refilled) * self.rate)
        self._refilled = now

    def admits(self, now: float) -> bool:
        """True when one more dispatch is allowed at ``now``."""
        if self.concurrency is not None and self.in_flight >= self.concurrency:
            return False
        if self.rate is None:
            return True
        self._refill(now)
        return self._tokens >= 1.0 - _ROUNDING

    def dispatched(self, now: float) -> None:
        """Account for one dispatch at ``now`` (after :meth:`admits` said yes)."""
        self.in_flight += 1
        if self.rate is not None:
            self._refill(now)
            self._tokens -= 1.0

    def finished(self) -> None:
        """Account for one task leaving flight (answered, failed or lost with its worker)."""
        self.in_flight = max(0, self.in_flight - 1)

    def next_token(self, now: float) -> float | None:
        """When the rate limit next admits a dispatch, if the rate is what holds dispatch back; else None."""
        if self.rate is None or (self.concurrency is not None and self.in_flight >= self.concurrency):
            return None
        self._refill(now)
        return now + max(0.0, (1.0 - self._tokens) / self.rate)

"""Adaptive concurrency: a service's cap on tasks in flight, moved between bounds by observed service times.

Rules (additive increase, multiplicative decrease, in the spirit of TCP Vegas and Netflix's
concurrency-limits): the *floor* is the least service time seen. Completions are judged in *rounds* of as
many tasks as the cap, counting only tasks dispatched since the cap last changed (older ones tell of the old
cap). At the end of a round, with ``mean`` its mean service time: above ``SHRINK_ABOVE x floor`` the cap is
multiplied by :data:`DECREASE`, or, when it already is at its lower bound, the floor rises to ``mean`` (the
service really got slower: at the least load allowed, what it takes is its floor); at most
``GROW_BELOW x floor``, and only if the cap was reached during the round (demand pressed against it), the cap
grows by one; in between it holds. The cap starts at the lower bound and never leaves the bounds. The floor
never rises otherwise: a floor learnt under load would let the cap climb on its own latency.

This module is fed ``now`` and each completion's service time; it reads no clock and knows nothing of tasks,
workers, services or messages. :class:`AdaptiveReport` is the cap as the status report shows it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final

from generaldomo.sansio.checked import check_fields, checked, checked_record
from generaldomo.sansio.wire.limits import ADAPTIVE

__all__ = ["DECREASE", "GROW_BELOW", "SHRINK_ABOVE", "Adaptive", "AdaptiveLimits"]

GROW_BELOW = 1.2  # a round's mean service time up to this many floors: near the floor, the cap may grow
SHRINK_ABOVE = 1.5  # above this many floors: latency has climbed, the cap shrinks
DECREASE = 0.8  # the factor a shrinking cap is multiplied by


def _bound(name: str, value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int) or not ADAPTIVE.admits(value):
        raise ValueError(f"adaptive {name} must be a whole number from {ADAPTIVE.bounds}, not {value!r}")
    return value


@dataclasses.dataclass(frozen=True, slots=True)
class AdaptiveLimits:
    """The bounds an operator sets for an adaptive cap (``mmi.flow`` key ``adaptive``: ``{"min": .., "max": ..}``).

    Raises ValueError on bad bounds, so an AdaptiveLimits that exists is valid."""

    min: int = checked(_bound, default=1)
    max: int = checked(_bound, default=64)

    def __post_init__(self) -> None:
        check_fields(self)
        if self.min > self.max:
            raise ValueError(f"adaptive min ({self.min}) must not exceed max ({self.max})")

    @classmethod
    def of(cls, value: object) -> AdaptiveLimits | None:
        """Bounds from their JSON form: an object with ``min`` and/or ``max``, or null (off)."""
        if value is None or isinstance(value, AdaptiveLimits):
            return value
        if not isinstance(value, dict):
            raise ValueError('adaptive must be a JSON object like {"min": 1, "max": 64}, or null to turn it off')
        unknown = set(value) - {"min", "max"}
        if unknown:
            raise ValueError(f"unknown adaptive keys {sorted(unknown)}; known: min, max")
        return checked_record(cls, value)  # (converted before the record is made)


@dataclasses.dataclass(slots=True)
class Adaptive:
    """The state of one adaptive cap; see the module docstring."""

    limits: AdaptiveLimits
    cap: float = dataclasses.field(init=False)
    floor: float | None = dataclasses.field(default=None, init=False)  # least recent service time
    latency: float | None = dataclasses.field(default=None, init=False)  # mean service time of the last round
    changed: float | None = dataclasses.field(default=None, init=False)  # when the cap last moved
    change: str = dataclasses.field(default="", init=False)  # "increase" or "decrease": how it last moved
    saturated: bool = dataclasses.field(default=False, init=False)  # the cap was reached during this round
    _sum: float = dataclasses.field(default=0.0, init=False)
    _count: int = dataclasses.field(default=0, init=False)

    def __post_init__(self) -> None:
        self.cap = float(self.limits.min)

    @property
    def limit(self) -> int:
        """The cap in force: whole tasks in flight."""
        return int(self.cap)

    def rebound(self, limits: AdaptiveLimits) -> None:
        """New bounds; the cap is clamped into them and what was learnt is kept."""
        self.limits = limits
        self.cap = min(float(limits.max), max(float(limits.min), self.cap))

    def observe(self, now: float, seconds: float) -> bool:
        """Account for a task answered at ``now`` after ``seconds`` of service; True when the cap moved."""
        floor = self.floor = seconds if self.floor is None else min(self.floor, seconds)
        if self.changed is not None and now - seconds < self.changed:
            return False  # dispatched under an older cap
        self._sum += seconds
        self._count += 1
        if self._count < self.limit:
            return False
        mean = self._sum / self._count
        self.latency, self._sum, self._count = mean, 0.0, 0
        saturated, self.saturated = self.saturated, False
        if mean > floor * SHRINK_ABOVE:
            if self.limit <= self.limits.min:
                self.floor = mean
                return False
            return self._move(now, max(float(self.limits.min), self.cap * DECREASE), "decrease")
        if mean <= floor * GROW_BELOW and saturated:
            return self._move(now, min(float(self.limits.max), self.cap + 1.0), "increase")
        return False

    def _move(self, now: float, cap: float, change: str) -> bool:
        if cap == self.cap:
            return False
        self.cap, self.changed, self.change = cap, now, change
        return True


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AdaptiveReport:
    """An adaptive concurrency cap: its bounds, the cap now, what it learnt and when it last moved."""

    min: int = 1
    max: int = 1
    cap: int = 1
    floor: float | None = None  # least recent service time (s)
    latency: float | None = None  # mean service time of the last round (s)
    changed: float | None = None  # seconds since the cap last moved (None: never)
    change: str = ""  # "increase" or "decrease"

    @classmethod
    def of(cls, adaptive: Adaptive | None, now: float) -> AdaptiveReport | None:
        """The report of ``adaptive`` at ``now`` (None when the service has no adaptive cap)."""
        if adaptive is None:
            return None
        limits, changed = adaptive.limits, adaptive.changed
        since = None if changed is None else round(now - changed, 3)
        return cls(
            min=limits.min,
            max=limits.max,
            cap=adaptive.limit,
            floor=adaptive.floor,
            latency=adaptive.latency,
            changed=since,
            change=adaptive.change,
        )


REPORT_SCHEMA: Final = {
    "type": ["object", "null"],
    "required": ["min", "max", "cap"],
    "properties": {
        "min": {"type": "integer", "minimum": 1},
        "max": {"type": "integer", "minimum": 1},
        "cap": {"description": "Tasks in flight it allows now, within min and max.", "type": "integer", "minimum": 1},
        "floor": {"description": "Least service time seen (s).", "type": ["number", "null"], "minimum": 0},
        "latency": {
            "description": "Mean service time of the last round (s).",
            "type": ["number", "null"],
            "minimum": 0,
        },
        "changed": {
            "description": "Seconds since the cap last moved; null: never.",
            "type": ["number", "null"],
            "minimum": 0,
        },
        "change": {"description": "How the cap last moved.", "enum": ["", "increase", "decrease"]},
    },
}

"""Backpressure from the service: a dispatch rate adapted to the "slow down" (429) answers of its workers.

Rules (AIMD, as TCP's congestion avoidance): 429s multiply the rate by :data:`DECREASE` (the first decrease
starts from the dispatch rate measured over the last second), once per round trip: a 429 for a task
dispatched before the last decrease does not decrease it again. A decrease takes 429s from at least
:data:`SHARE` of the service's workers (at least one) since the last one, so that one worker alone cannot
slow a service that others serve: the rate falls only as far as that share of its workers justifies. While
dispatches are held back by this rate and no 429 comes, the rate grows by a constant step per second (a tenth
of the rate at the last decrease, at least :data:`MIN_STEP`), so the service probes for capacity again. The
rate stays within the operator's bounds (``min``, the operator's floor, default :data:`MIN_RATE`; ``max``,
default none) and never above a configured rate limit. A 429 holds back the worker that said it, not the
service, for its ``retry_after`` seconds (at most :data:`MAX_RETRY_AFTER`; at least, and without one,
:data:`MIN_REST`: :func:`rest`; the broker core keeps that worker out of its service's waiting queue);
``paused_until`` is when the latest such rest ends, for the report. Without any 429 the service has no
adapted rate at all.

This module is fed the time and each 429; it reads no clock and knows nothing of tasks, workers or messages.
:class:`BackoffReport` is the adapted rate as the status report shows it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Hashable
from typing import Any, Final

from generaldomo.sansio.checked import check_fields, checked, checked_record

__all__ = [
    "DECREASE",
    "MAX_RETRY_AFTER",
    "MIN_RATE",
    "MIN_REST",
    "MIN_STEP",
    "SHARE",
    "STEP_SHARE",
    "WINDOW",
    "Backoff",
    "BackoffLimits",
    "rest",
]

DECREASE = 0.5  # the factor a 429 multiplies the rate by
MIN_STEP = 0.5  # dispatches per second the rate grows by, at least, per second held back by it
STEP_SHARE = 0.1  # the step, as a share of the rate at the last decrease
MIN_RATE = 0.1  # the default lower bound (dispatches per second): a service never stops for good
MAX_RETRY_AFTER = 60.0  # seconds a 429's retry_after may hold back the worker that said it, at most
MIN_REST = 0.1  # seconds a 429 holds back the worker that said it, at least (with or without a retry_after)
SHARE = 0.5  # the share of a service's workers whose 429s (since the last decrease) a decrease takes
WINDOW: Final = 1.0  # seconds over which the dispatch rate is measured for the first decrease


def rest(retry_after: float | None) -> float:
    """Seconds a 429 holds back the worker that said it: its ``retry_after`` (None: it gave none), at least
    :data:`MIN_REST` and at most :data:`MAX_RETRY_AFTER`."""
    return MIN_REST if retry_after is None else max(MIN_REST, min(retry_after, MAX_RETRY_AFTER))


def _rate(name: str, value: Any) -> Any:
    if value is None and name == "max":
        return value
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < float("inf"):
        raise ValueError(f"backoff {name} must be a positive number of dispatches per second")
    return float(value)


@dataclasses.dataclass(frozen=True, slots=True)
class BackoffLimits:
    """The bounds of a service's adapted rate (``mmi.flow`` key ``backoff``: ``{"min": 1, "max": 50}``);
    ValueError on bad ones."""

    min: float = checked(_rate, default=MIN_RATE)
    max: float | None = checked(_rate, default=None)

    def __post_init__(self) -> None:
        check_fields(self)
        if self.max is not None and self.min > self.max:
            raise ValueError(f"backoff min ({self.min}) must not exceed max ({self.max})")

    @classmethod
    def of(cls, value: object) -> BackoffLimits | None:
        """Bounds from their JSON form: an object with ``min`` and/or ``max``, or null (the defaults)."""
        if value is None or isinstance(value, BackoffLimits):
            return value
        if not isinstance(value, dict):
            raise ValueError('backoff must be a JSON object like {"min": 1, "max": 50}, or null for the defaults')
        unknown = set(value) - {"min", "max"}
        if unknown:
            raise ValueError(f"unknown backoff keys {sorted(unknown)}; known: min, max")
        return checked_record(cls, value)  # (converted before the record is made)


@dataclasses.dataclass(slots=True)
class Backoff:
    """The adapted rate of one service and what it learnt; see the module docstring."""

    limits: BackoffLimits = dataclasses.field(default_factory=BackoffLimits)
    rate: float | None = None  # dispatches per second allowed now; None: no 429 yet
    throttled: int = 0  # 429s answered
    paused_until: float | None = None  # no dispatch before this time (a retry_after)
    changed: float | None = None  # when the rate last moved
    change: str = ""  # "increase" or "decrease"
    _step: float = MIN_STEP
    _held_since: float | None = None  # since when the rate has held dispatches back, without a 429
    _window: tuple[float, int] = (0.0, 0)  # (start, dispatches) of the current measuring window
    _measured: float = 0.0  # dispatches per second over the last whole window
    _said: set[Hashable] = dataclasses.field(
        default_factory=set
    )  # the workers that said 429 since the last decrease (fewer than SHARE)

    def dispatched(self, now: float) -> None:
        """Count a dispatch at ``now``, for the rate measured at the first 429."""
        start, count = self._window
        if now - start >= WINDOW:
            self._measured = count / (now - start) if now - start < 2 * WINDOW else 0.0
            self._window = (now, 1)
        else:
            self._window = (start, count + 1)

    def measured(self, now: float) -> float:
        """Dispatches per second recently: the last whole window's, or the current one's if busier (a window
        younger than a tenth of a second counts as one)."""
        start, count = self._window
        return max(self._measured, count / max(now - start, WINDOW / 10))

    def slow_down(
        self, now: float, dispatched: float | None, retry_after: float | None, ceiling: float | None,
        worker: Hashable = None, workers: int = 1,
    ) -> bool:  # fmt: skip
        """A 429 at ``now`` from ``worker``, one of the service's ``workers``, for a task dispatched at
        ``dispatched``; ``ceiling``: a configured rate limit. True when the rate moved."""
        self.throttled += 1
        until = now + rest(retry_after)
        self.paused_until = until if self.paused_until is None else max(self.paused_until, until)
        self._held_since = None
        if self.change == "decrease" and self.changed is not None and dispatched is not None:
            if dispatched < self.changed:
                return False  # it left before the last decrease could tell: one decrease per round trip
        said = self._said
        said.add(worker)
        if len(said) < max(1, math.ceil(SHARE * workers)):
            return False  # too few of its workers say so yet
        said.clear()
        base = self.rate if self.rate is not None else max(self.measured(now), self.limits.min)
        rate = self._clamp(base * DECREASE, ceiling)
        self._step = max(MIN_STEP, base * STEP_SHARE)
        return self._move(now, rate, "decrease")

    def held(self, now: float, ceiling: float | None) -> bool:
        """The adapted rate holds dispatches back at ``now``: it grows by its step for each second it has held
        them back without a pause (since the last 429; a look more than a second and two dispatch intervals
        after the previous one starts a new spell: demand fell below the rate meanwhile). True when it moved."""
        if self.rate is None:
            return False
        since, self._held_since = self._held_since, now
        if since is None or now <= since or now - since > max(WINDOW, 2.0 / self.rate):
            return False
        return self._move(now, self._clamp(self.rate + self._step * (now - since), ceiling), "increase")

    def rebound(self, limits: BackoffLimits, ceiling: float | None) -> None:
        """New bounds; the rate (if any) is clamped into them."""
        self.limits = limits
        if self.rate is not None:
            self.rate = self._clamp(self.rate, ceiling)

    def _clamp(self, rate: float, ceiling: float | None) -> float:
        top = self.limits.max
        if ceiling is not None:
            top = ceiling if top is None else min(top, ceiling)
        rate = max(self.limits.min, rate)
        return rate if top is None else min(top, rate)

    def _move(self, now: float, rate: float, change: str) -> bool:
        if rate == self.rate:
            return False
        self.rate, self.changed, self.change = rate, now, change
        return True


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class BackoffReport:
    """A service's rate adapted to its 429s: its bounds, the rate now (None: no 429 yet), the 429s so far,
    seconds the latest 429 still holds back the worker that said it, and when and how the rate last moved."""

    min: float = 0.0
    max: float | None = None
    rate: float | None = None
    throttled: int = 0
    paused: float = 0.0
    changed: float | None = None  # seconds since the rate last moved (None: never)
    change: str = ""  # "increase" or "decrease"

    @classmethod
    def of(cls, backoff: Backoff, shown: bool, now: float) -> BackoffReport | None:
        """The report of ``backoff`` at ``now`` (None when it never acted and its bounds are the defaults)."""
        if not shown and backoff.rate is None and not backoff.throttled:
            return None
        limits, changed, paused = backoff.limits, backoff.changed, backoff.paused_until
        since = None if changed is None else round(now - changed, 3)
        left = 0.0 if paused is None else round(max(0.0, paused - now), 3)
        rate = None if backoff.rate is None else round(backoff.rate, 3)
        return cls(
            min=limits.min,
            max=limits.max,
            rate=rate,
            throttled=backoff.throttled,
            paused=left,
            changed=since,
            change=backoff.change,
        )


REPORT_SCHEMA: Final = {
    "type": ["object", "null"],
    "required": ["min", "max", "rate", "throttled", "paused", "changed", "change"],
    "properties": {
        "min": {"type": "number", "exclusiveMinimum": 0},
        "max": {"type": ["number", "null"], "exclusiveMinimum": 0},
        "rate": {
            "description": "Dispatches per second allowed now; null: none yet.",
            "type": ["number", "null"],
            "exclusiveMinimum": 0,
        },
        "throttled": {"$ref": "#/$defs/count"},
        "paused": {
            "description": "Seconds the latest 429 (its retry_after) still holds back the worker that said it.",
            "type": "number",
            "minimum": 0,
        },
        "changed": {
            "description": "Seconds since the rate last moved; null: never.",
            "type": ["number", "null"],
            "minimum": 0,
        },
        "change": {"enum": ["", "increase", "decrease"]},
    },
}

"""The token bucket of a rate limit, for a service's rate (:mod:`generaldomo.sansio.broker.flow.flow`) and a tenant's
(:mod:`generaldomo.sansio.broker.flow.fair`) alike.

This module owns the arithmetic of one bucket: ``rate`` tokens a second, at most ``burst`` held, one taken per
dispatch. A bucket starts full, and again whenever it is :meth:`~TokenBucket.filled` (a new rate). Its owner
keeps the rate and the burst (they change with the limits) and gives them, and the time, at each call: the
bucket reads no clock and knows nothing of tasks or services.
"""

from __future__ import annotations

from typing import Final

__all__ = ["ROUNDING", "TokenBucket"]

ROUNDING: Final = 1e-9  # a token that floating-point arithmetic leaves a hair short of whole still counts


class TokenBucket:
    """Tokens held (as last refilled) and when they were last refilled (None: the bucket is full)."""

    __slots__ = ("refilled", "tokens")

    def __init__(self, tokens: float = 0.0) -> None:
        self.tokens = tokens
        self.refilled: float | None = None

    def refill(self, now: float, rate: float, burst: float) -> None:
        """Add the tokens ``rate`` earned since the last refill, up to ``burst`` (all of them when full)."""
        refilled = self.refilled
        self.tokens = burst if refilled is None else min(burst, self.tokens + (now - refilled) * rate)
        self.refilled = now

    @property
    def has_token(self) -> bool:
        """True when a whole token is held (as last refilled; a full bucket always holds one)."""
        return self.refilled is None or self.tokens >= 1.0 - ROUNDING

    def take(self) -> None:
        """Take the token of one dispatch (after a refill)."""
        self.tokens -= 1.0

    def due(self, rate: float) -> float | None:
        """When the next whole token is held at ``rate`` (None while full: one is held now)."""
        refilled = self.refilled
        return None if refilled is None else refilled + max(0.0, (1.0 - self.tokens) / rate)

    def fill(self) -> None:
        """Full again (a new rate starts full)."""
        self.refilled = None

    def empty(self, now: float) -> None:
        """No token held at ``now`` (the next one is due a token's time later)."""
        self.tokens, self.refilled = 0.0, now

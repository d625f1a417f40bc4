"""Rate-limited warnings: a line, then a count per interval.

This module owns one rule: for each key (a kind of warning, usually with the peer it is about), the first
``burst`` events of an interval may be logged (default one); the others in that interval are only counted,
and the next line that is allowed says how many were suppressed since the last one. At most ``max_keys`` keys
are remembered, so that peers choosing new keys cannot grow it without bound (beyond that, new keys share
one). It knows nothing of logging, clocks or sockets: callers pass ``now``.
"""

from __future__ import annotations

from collections.abc import Hashable

import attrs

DEFAULT_INTERVAL = 10.0
DEFAULT_MAX_KEYS = 1024
_OTHERS = ("ratelimit", "others")  # the key all keys share once max_keys are in use


@attrs.define(slots=True)
class _Window:
    start: float
    allowed: int = 1
    suppressed: int = 0


class RateLimiter:
    """``allow(key, now)`` is True for the first event of each key per ``interval`` seconds.

    >>> limiter = RateLimiter(interval=10.0)
    >>> [limiter.allow("bad frame", t) for t in (0.0, 1.0, 2.0, 11.0)]
    [True, False, False, True]
    >>> limiter.suppressed("bad frame")
    2
    """

    def __init__(self, interval: float = DEFAULT_INTERVAL, burst: int = 1, max_keys: int = DEFAULT_MAX_KEYS) -> None:
        self.interval = interval
        self.burst = burst
        self.max_keys = max_keys
        self._windows: dict[Hashable, _Window] = {}
        self._reported: dict[Hashable, int] = {}

    def allow(self, key: Hashable, now: float) -> bool:
        """True when an event of ``key`` at ``now`` may be logged; otherwise it is counted as suppressed."""
        window = self._windows.get(key)
        if window is None:
            if len(self._windows) >= self.max_keys and not self._forget(now):
                key = _OTHERS
                window = self._windows.get(key)
        if window is not None and now - window.start < self.interval:
            if window.allowed < self.burst:
                window.allowed += 1
                self._reported[key] = 0
                return True
            window.suppressed += 1
            return False
        self._reported[key] = window.suppressed if window is not None else 0
        self._windows[key] = _Window(now)
        return True

    def suppressed(self, key: Hashable) -> int:
        """How many events of ``key`` were suppressed before the last one allowed (0 if none was)."""
        return self._reported.get(key, 0)

    def _forget(self, now: float) -> bool:
        """Forget keys whose interval has passed (their suppressed counts with them); True if room was made."""
        stale = [k for k, w in self._windows.items() if now - w.start >= self.interval]
        for key in stale:
            del self._windows[key]
            self._reported.pop(key, None)
        return len(self._windows) < self.max_keys

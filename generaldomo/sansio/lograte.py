"""Rate-limited log lines: the one log limiter of the broker, the bridge, the links and the peers' sessions.

This module owns one rule: for each key (a kind of trouble, usually with the peer it is about), the first
``burst`` events of an interval (default one) may be logged; the others in that interval are only counted, and
the count is told: in the next line that is allowed (:meth:`LogLimiter.line`, :meth:`LogLimiter.suppressed`),
or in a line of its own when the interval is over (:meth:`LogLimiter.warn`, at the next such warning or at
:meth:`LogLimiter.flush`), so a flood of bad messages cannot flood the log. Memory is bounded: beyond
``max_keys`` windows at once, windows whose interval is over are forgotten (at most once an interval), and if
none is, new keys share one window (per kind of trouble, for :meth:`LogLimiter.warn`). It is fed the time by
its caller and reads no clock; it knows nothing of messages or sockets. (A service's rate *limit* is another
thing: :mod:`generaldomo.sansio.broker.flow.flow`.)
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Hashable

__all__ = ["DEFAULT_INTERVAL", "DEFAULT_MAX_KEYS", "LogLimiter"]

DEFAULT_INTERVAL = 10.0
DEFAULT_MAX_KEYS = 4096
_OTHERS = ("lograte", "others")  # the key all keys of allow() share once max_keys are in use
_MANY = object()  # in place of the peer, for the window the peers of one kind of warning share beyond max_keys


@dataclasses.dataclass(slots=True)
class _Window:
    opened: float
    who: str | None = None  # whom the line that opened it was about (warn's windows)
    level: int = logging.WARNING
    allowed: int = 1
    suppressed: int = 0


class LogLimiter:
    """Lets through the first ``burst`` events of each key per ``interval`` seconds, counts the others.

    >>> limiter = LogLimiter(interval=10.0)
    >>> [limiter.allow("bad frame", t) for t in (0.0, 1.0, 2.0, 11.0)]
    [True, False, False, True]
    >>> limiter.suppressed("bad frame")
    2

    Args:
        log: where :meth:`line`, :meth:`warn` and :meth:`flush` log (None: the root logger).
        interval: seconds of a window.
        burst: events of a key a window lets through.
        max_keys: windows kept at once.
    """

    def __init__(
        self,
        log: logging.Logger | None = None,
        interval: float = DEFAULT_INTERVAL,
        burst: int = 1,
        max_keys: int = DEFAULT_MAX_KEYS,
    ) -> None:
        self._log = log or logging.getLogger()
        self.interval = interval
        self.burst = burst
        self.max_keys = max_keys
        self._windows: dict[Hashable, _Window] = {}
        self._reported: dict[Hashable, int] = {}
        self._swept = float("-inf")

    def __len__(self) -> int:
        return len(self._windows)

    def allow(self, key: Hashable, now: float) -> bool:
        """True when an event of ``key`` at ``now`` may be logged; otherwise it is counted as suppressed."""
        key, window = self._find(key, _OTHERS, now)
        if window is not None and now - window.opened < self.interval:
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

    def line(self, key: Hashable, now: float, message: str, *args: object, level: int = logging.WARNING) -> None:
        """Log ``message % args`` if an event of ``key`` may be logged at ``now``, saying how many were not."""
        if self.allow(key, now):
            suppressed = self.suppressed(key)
            more = f" ({suppressed} more like it since the last line)" if suppressed else ""
            self._log.log(level, f"{message}{more}", *args)

    def warn(
        self,
        kind: str,
        peer: Hashable,
        label: Callable[[], str],
        now: float,
        message: str,
        *args: object,
        level: int = logging.WARNING,
        exc_info: bool = False,
    ) -> None:
        """Log ``message % args`` about ``peer`` (named by ``label()``, called only when a line is logged; with
        the traceback of the exception being handled if ``exc_info``) unless ``burst`` warnings of its kind about
        it were logged less than ``interval`` ago; the count of those not logged follows in a line of its own."""
        key, window = self._find((kind, peer), (kind, _MANY), now)
        if window is not None and now - window.opened < self.interval:
            if window.allowed >= self.burst:
                window.suppressed += 1
                return
            window.allowed += 1
        else:
            if window is not None:
                self._summary(key, window)
            who = "other peers" if key == (kind, _MANY) else label()
            window = self._windows[key] = _Window(now, who, level)
        self._log.log(level, f"{message} [%s]", *args, window.who, exc_info=exc_info)

    def flush(self, now: float) -> None:
        """Log the counts of :meth:`warn`'s windows that are over, and forget every window that is over."""
        self._swept = now
        over = [key for key, window in self._windows.items() if now - window.opened >= self.interval]
        for key in over:
            self._summary(key, self._windows.pop(key))
            self._reported.pop(key, None)

    def _find(self, key: Hashable, others: Hashable, now: float) -> tuple[Hashable, _Window | None]:
        """``key`` and its window; ``others`` and its window when no room is left for a new key."""
        window = self._windows.get(key)
        if window is None and len(self._windows) >= self.max_keys:
            if now - self._swept >= self.interval:
                self.flush(now)
            if len(self._windows) >= self.max_keys:
                return others, self._windows.get(others)
        return key, window

    def _summary(self, key: Hashable, window: _Window) -> None:
        if window.suppressed and window.who is not None and isinstance(key, tuple):
            self._log.log(
                window.level, "%d more %s warnings about %s in %.0f s", window.suppressed, key[0], window.who,
                self.interval,
            )  # fmt: skip

"""Rate-limited warnings: one line per kind of trouble from one peer, then a count per interval.

This module owns how often the broker may log about one peer's misbehaviour, so a flood of bad messages
cannot flood the log. It is fed the time by its caller and reads no clock; it knows nothing of messages or
sockets. Memory is bounded: beyond ``limit`` (kind, peer) windows at once, new peers share one window per
kind.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable

import attrs


@attrs.define(slots=True)
class _Window:
    opened: float
    who: str
    level: int
    suppressed: int = 0


class LogLimiter:
    """Logs the first warning of a kind from a peer in each ``interval``; counts the rest and logs the count
    when the interval is over (at the next such warning or :meth:`flush`)."""

    def __init__(self, log: logging.Logger, interval: float = 10.0, limit: int = 4096) -> None:
        self._log = log
        self.interval = interval
        self._limit = limit
        self._windows: dict[tuple[str, Hashable], _Window] = {}

    def __len__(self) -> int:
        return len(self._windows)

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
        the traceback of the exception being handled if ``exc_info``) unless a warning of its kind about it was
        logged less than ``interval`` ago."""
        key = (kind, peer)
        window = self._windows.get(key)
        if window is None and len(self._windows) >= self._limit:
            key, label = (kind, None), _many_peers
            window = self._windows.get(key)
        if window is not None and now - window.opened < self.interval:
            window.suppressed += 1
            return
        if window is not None:
            self._summary(kind, window)
        who = label()
        self._windows[key] = _Window(now, who, level)
        self._log.log(level, f"{message} [%s]", *args, who, exc_info=exc_info)

    def flush(self, now: float) -> None:
        """Log the counts of windows that are over, and forget those windows."""
        over = [key for key, window in self._windows.items() if now - window.opened >= self.interval]
        for key in over:
            self._summary(key[0], self._windows.pop(key))

    def _summary(self, kind: str, window: _Window) -> None:
        if window.suppressed:
            self._log.log(
                window.level,
                "%d more %s warnings about %s in %.0f s",
                window.suppressed,
                kind,
                window.who,
                self.interval,
            )


def _many_peers() -> str:
    return "other peers"

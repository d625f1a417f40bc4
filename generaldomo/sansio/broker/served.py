"""Which services had workers recently: the broker's bounded memory behind "no such service" answers.

This module owns that record: for each service name, the last time the broker saw a worker of it (when one
joined or left), at most :data:`MAX_NAMES` names (the least recently seen forgotten first) and for at most
``seconds``. A request that asks to fail fast for a service nobody serves is answered ``404`` only when its
service has no worker now and none within that time. It is fed the time by its caller and reads no clock; it
knows nothing of workers, tasks or frames (names are the core's).
"""

from __future__ import annotations

import difflib
from collections import OrderedDict

__all__ = ["MAX_NAMES", "MAX_SUGGESTED", "ServedRecently"]

MAX_NAMES = 4096  # service names remembered, the least recently seen forgotten first
MAX_SUGGESTED = 256  # names (most recently seen first) among which a nearest name is looked for


class ServedRecently:
    """The last time each service had a worker, for ``seconds``; see the module docstring."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._seen: OrderedDict[str, float] = OrderedDict()  # least recently seen first

    def __len__(self) -> int:
        return len(self._seen)

    def seen(self, name: str, now: float) -> None:
        """A worker of ``name`` joined or left at ``now``."""
        self._seen[name] = now
        self._seen.move_to_end(name)
        if len(self._seen) > MAX_NAMES:
            self._seen.popitem(last=False)

    def recent(self, name: str, now: float) -> bool:
        """True if ``name`` had a worker within ``seconds`` of ``now``."""
        seen = self._seen.get(name)
        return seen is not None and now - seen <= self.seconds

    def nearest(self, name: str, candidates: list[str]) -> str | None:
        """The name among ``candidates`` (at most :data:`MAX_SUGGESTED` of them are looked at) closest to
        ``name``: a likely typo; None if none is close."""
        close = difflib.get_close_matches(name, candidates[:MAX_SUGGESTED], n=1)
        return close[0] if close else None

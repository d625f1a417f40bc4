"""The simulated remote API of part ``shared`` (b), which takes a hidden number of calls a second, and the Ray
article's flow-controlled actor in front of it.

Rules: one :class:`HiddenLimitAPI` object is the API for all its callers, so it lives in one process and is
called there, from that process's threads: for the broker's run in the bench process (its workers' handler calls
it), for the actor's run inside the actor (:class:`LimitedAPIActor` holds it). It records every call as
``(time.monotonic(), went through)``; every process on one machine shares that clock. It knows nothing of Ray or
of generaldomo (importable in a Ray worker by reference).
"""

from __future__ import annotations

import threading
import time
from collections import deque

from bench.ray_actor import FlowControlledActorBase


class HiddenLimitAPI:
    """A remote API that takes ``limit`` calls in any second and answers 429 beyond, with the seconds until
    it would take one more (its calls and refusals are recorded, as (time, ok))."""

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self.lock = threading.Lock()
        self.window: deque[float] = deque()
        self.calls: list[tuple[float, bool]] = []

    def call(self) -> float | None:
        """None when the call went through; else the seconds to wait before another would."""
        with self.lock:
            now = time.monotonic()
            while self.window and self.window[0] <= now - 1.0:
                self.window.popleft()
            if len(self.window) >= self.limit:
                self.calls.append((now, False))
                return self.window[0] + 1.0 - now
            self.window.append(now)
            self.calls.append((now, True))
            return None

    def record(self) -> list[tuple[float, bool]]:
        """A copy of the calls so far."""
        with self.lock:
            return list(self.calls)


class LimitedAPIActor(FlowControlledActorBase):
    """The article's flow-controlled actor calling the API it holds, each call then taking ``work`` seconds. A
    429 comes back to the caller as False, to try again: the actor has no way to learn from it."""

    def __init__(self, limit: float, work: float) -> None:
        super().__init__()
        self.api = HiddenLimitAPI(limit)
        self.work = work

    def process_internal(self, *args: object) -> object:
        if self.api.call() is not None:
            return False
        time.sleep(self.work)
        return True

    def calls(self) -> list[tuple[float, bool]]:
        """The API's record of calls (for the Ray driver)."""
        return self.api.record()

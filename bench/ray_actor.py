"""The two sides of the Ray experiment that do the simulated work.

``FlowControlledActorBase`` is the actor-based flow controller as the Ray article describes it, written from
its prose: it keeps the minimum time between requests, the time of the most recent request, the number of
pending requests and a lock guarding the three; ``process()`` works out how long a caller must wait for its
turn, waits, then calls ``process_internal()``; the actor is made with ``max_concurrency`` so that Ray runs
that many calls at once on threads and queues the rest. Each caller takes its turn under the lock and sleeps
outside it. ``simulated`` is the same work as a generaldomo handler. Times are ``time.monotonic()``, which
every process on one machine shares; the experiment runs on one machine.
"""

from __future__ import annotations

import struct
import threading
import time

WORK = "!d"  # request: seconds of simulated work (struct format; Ray pickles these globals by value)
SPAN = "!dd"  # result: when the work started and ended


class FlowControlledActorBase:
    """Rate-based flow control shared by every Ray task that calls the actor."""

    def __init__(self) -> None:
        self.min_interval = 0.0
        self.last_request = float("-inf")
        self.pending = 0
        self.lock = threading.Lock()

    def set_rate_limit(self, requests_per_second: float | None) -> None:
        """At most this many requests per second (None: no limit)."""
        with self.lock:
            self.min_interval = 1.0 / requests_per_second if requests_per_second else 0.0

    def process(self, *args: object) -> object:
        """Wait until this request's turn, then issue it."""
        with self.lock:
            self.pending += 1
            turn = max(time.monotonic(), self.last_request + self.min_interval)
            self.last_request = turn
        try:
            time.sleep(max(0.0, turn - time.monotonic()))
            return self.process_internal(*args)
        finally:
            with self.lock:
                self.pending -= 1

    def process_internal(self, *args: object) -> object:
        """Call the remote service (subclasses)."""
        raise NotImplementedError


class SimulatedService(FlowControlledActorBase):
    """The article's flow-controlled actor, calling a service that takes ``work`` seconds."""

    def process_internal(self, *args: object) -> object:
        (work,) = args
        start = time.monotonic()
        time.sleep(float(work))  # type: ignore[arg-type]
        return start, time.monotonic()


def simulated(payload: bytes) -> bytes:
    """The same service as a generaldomo handler: ``payload`` packs the seconds of work."""
    (work,) = struct.unpack(WORK, payload)
    start = time.monotonic()
    time.sleep(work)
    return struct.pack(SPAN, start, time.monotonic())

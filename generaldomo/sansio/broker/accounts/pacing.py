"""Pacing: each connection's share of the broker's expensive work per second, and the broker's in all.

This module owns the budgets of expensive requests: a status page, a flow change (which the state directory
keeps), a kept answer sent again. Their work is counted in bytes of what they make (the answer, the change),
as their costs say (:func:`status_cost`, :func:`flow_cost`, :func:`resend_cost`), and drawn from two buckets:
the connection's (:data:`CONNECTION_WORK` bytes, refilled at as many per second) and the broker's
(:data:`BROKER_WORK`, refilled at :data:`BROKER_WORK_RATE` per second). A request goes ahead while both hold
some work (its cost may take them below zero: they refill before the next goes); otherwise it waits in its
connection's line, and the lines go ahead in turn, one request per connection per round, as the buckets refill.
A turn of the broker's loop (the messages it reads at one clock reading, ``now``, or one tick) starts expensive
work only until it has spent :data:`TURN_WORK`: the next request waits for the next turn, so that the loop goes
round its sockets between two expensive requests.
A line holds at most :data:`LINE` requests, and all lines :data:`WAITING_BYTES` bytes; beyond them a request is
refused, with the seconds until its connection's bucket holds work again (the broker answers ``429``).

A bucket is kept only while it is not full (a full one is forgotten: a connection's next request finds it
full again), so the table holds the connections that used work within the last few seconds, a number the
broker's bucket bounds; at :data:`BUCKETS` of them a new connection's request waits for room. Everything here
is bounded by construction, whatever the peers send. It knows nothing of sockets, clocks (``now`` is given),
connections (a key) or what the requests mean.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Hashable, Iterator
from typing import Final, Generic, TypeVar

__all__ = [
    "BROKER_WORK",
    "BROKER_WORK_RATE",
    "BUCKETS",
    "CONNECTION_WORK",
    "LINE",
    "LOOK_BYTES",
    "MMI_BYTES",
    "RESEND_SHARE",
    "TURN_WORK",
    "WAITING_BYTES",
    "Key",
    "Pacer",
    "flow_cost",
    "resend_cost",
    "status_cost",
]

CONNECTION_WORK: Final = 256 * 1024  # bytes of work a connection's bucket holds, and gets back per second
BROKER_WORK: Final = 256 * 1024  # bytes of work the broker's bucket holds
BROKER_WORK_RATE: Final = 1024 * 1024  # bytes of work the broker's bucket gets back per second
TURN_WORK: Final = 64 * 1024  # bytes of work one turn of the loop (one ``now``) starts at most
LINE: Final = 8  # requests waiting per connection
WAITING_BYTES: Final = 1024 * 1024  # bytes of the requests waiting in all lines
BUCKETS: Final = 4096  # connections with a bucket that is not full
LOOK_BYTES: Final = 16  # the work of looking at a service, for a status page (the page looks at each)
RESEND_SHARE: Final = 16  # a kept answer sent again costs its bytes / RESEND_SHARE (it is sent, not made)
MMI_BYTES: Final = 256  # the least a paced request costs, besides what it makes

T = TypeVar("T")
Key = Hashable


def status_cost(answer: int, services: int) -> int:
    """The work of a status page of ``answer`` bytes that looked at ``services`` services."""
    return MMI_BYTES + answer + LOOK_BYTES * services


def flow_cost(request: int, answer: int, changed: bool) -> int:
    """The work of an ``mmi.flow`` request of ``request`` bytes answered with ``answer`` bytes: twice as much
    when it changes limits (the change is applied, then written to the state directory)."""
    made = request + answer
    return MMI_BYTES + (2 * made if changed else made)


def resend_cost(answer: int) -> int:
    """The work of sending a kept answer of ``answer`` bytes again."""
    return MMI_BYTES + answer // RESEND_SHARE


class _Bucket:
    """Work held at a time: ``level`` bytes at ``at`` (below zero: in debt), refilled at ``rate`` per second up
    to ``burst``."""

    __slots__ = ("at", "burst", "level", "rate")

    def __init__(self, burst: int, rate: int, now: float) -> None:
        self.level, self.at, self.burst, self.rate = float(burst), now, burst, rate

    def now(self, now: float) -> float:
        """The level at ``now`` (and remembered as such)."""
        if now > self.at:
            self.level = min(float(self.burst), self.level + (now - self.at) * self.rate)
            self.at = now
        return self.level

    def when_positive(self, now: float) -> float:
        """When the level is above zero (``now`` if it is)."""
        level = self.now(now)
        return now if level > 0 else now + (-level / self.rate) + 1e-6


class Pacer(Generic[T]):
    """The buckets and the lines (see the module docstring): ``T`` is what a line holds (a request to answer
    later), and a key names a connection."""

    def __init__(
        self,
        connection_work: int = CONNECTION_WORK,
        broker_work: int = BROKER_WORK,
        broker_rate: int = BROKER_WORK_RATE,
        line: int = LINE,
        waiting_bytes: int = WAITING_BYTES,
        buckets: int = BUCKETS,
    ) -> None:
        self.connection_work, self.line, self.waiting_bytes, self.buckets = (
            connection_work,
            line,
            waiting_bytes,
            buckets,
        )
        self._broker: _Bucket | None = None
        self._broker_work, self._broker_rate = broker_work, broker_rate
        self._buckets: OrderedDict[Key, _Bucket] = OrderedDict()  # those not full (maybe), least recently used first
        self._lines: OrderedDict[Key, deque[tuple[T, int]]] = OrderedDict()  # in turn: the next to go first
        self.waiting = 0  # requests in all lines
        self.bytes = 0  # their bytes
        self.work = 0  # bytes of work charged in all
        self._turn, self._turn_work = float("nan"), 0  # the time of the latest turn, and the work it started

    def __len__(self) -> int:
        return self.waiting

    def _broker_bucket(self, now: float) -> _Bucket:
        if self._broker is None:
            self._broker = _Bucket(self._broker_work, self._broker_rate, now)
        return self._broker

    def _bucket(self, key: Key, now: float) -> _Bucket | None:
        """``key``'s bucket (a full one if it had none; None if the table has no room for it now)."""
        bucket = self._buckets.get(key)
        if bucket is not None:
            return bucket
        buckets = self._buckets
        while len(buckets) >= self.buckets:  # forget full buckets, least recently used first
            oldest = next(iter(buckets.values()))
            if oldest.now(now) < oldest.burst:
                return None
            buckets.popitem(last=False)
        bucket = buckets[key] = _Bucket(self.connection_work, self.connection_work, now)
        return bucket

    def may_go(self, key: Key, now: float) -> bool:
        """True when a request of ``key`` may go ahead now: nothing of its connection waits and both buckets
        hold work."""
        if key in self._lines or self._turn_spent(now) or self._broker_bucket(now).now(now) <= 0:
            return False
        bucket = self._bucket(key, now)
        return bucket is not None and bucket.now(now) > 0

    def _turn_spent(self, now: float) -> bool:
        """True when the turn at ``now`` has started :data:`TURN_WORK` already."""
        return now == self._turn and self._turn_work >= TURN_WORK

    def wait(self, key: Key, item: T, size: int, now: float) -> float | None:
        """Put ``item`` (a request of ``size`` bytes) in ``key``'s line; None when it waits there, else the
        seconds to wait before asking again (its line, or all lines, are full)."""
        line = self._lines.get(key)
        if (line is not None and len(line) >= self.line) or self.bytes + size > self.waiting_bytes:
            bucket = self._buckets.get(key)
            later = now if bucket is None else bucket.when_positive(now)
            return max(later, self._broker_bucket(now).when_positive(now)) - now + 1.0 / 16
        if line is None:
            line = self._lines[key] = deque()
        line.append((item, size))
        self.waiting += 1
        self.bytes += size
        return None

    def charge(self, key: Key, cost: int, now: float) -> None:
        """Take ``cost`` bytes of work from ``key``'s bucket and the broker's."""
        self.work += cost
        if now != self._turn:
            self._turn, self._turn_work = now, 0
        self._turn_work += cost
        self._broker_bucket(now).level -= cost
        bucket = self._bucket(key, now)
        if bucket is not None:
            bucket.now(now)
            bucket.level -= cost
            self._buckets.move_to_end(key)

    def due(self, now: float) -> float | None:
        """When the next waiting request may go (None: none waits); the next turn at the soonest."""
        if not self._lines:
            return None
        broker = self._broker_bucket(now).when_positive(now)
        room = now if len(self._buckets) < self.buckets else now + 1.0 / 16  # a full table: look again soon
        soonest = min(
            (bucket.when_positive(now) if (bucket := self._buckets.get(key)) is not None else room)
            for key in self._lines
        )
        return max(broker, soonest)

    def ready(self, now: float) -> Iterator[tuple[Key, T]]:
        """The waiting requests that may go now, one per connection per round, in turn, as long as the broker's
        bucket holds work: the caller charges each (:meth:`charge`) before it asks for the next."""
        lines, broker = self._lines, self._broker_bucket(now)
        for _ in range(self.waiting):  # each round serves one at least, or ends
            served = False
            for key in list(lines):
                if broker.now(now) <= 0 or self._turn_spent(now):
                    return
                bucket = self._bucket(key, now)
                if bucket is None or bucket.now(now) <= 0:
                    continue
                line = lines[key]
                item, size = line.popleft()
                self.waiting -= 1
                self.bytes -= size
                if line:
                    lines.move_to_end(key)
                else:
                    del lines[key]
                served = True
                yield key, item
            if not served:
                return

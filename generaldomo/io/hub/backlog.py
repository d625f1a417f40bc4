"""Replies a peer does not read: bytes handed to a link's socket that have not left the process, per connection.

libzmq bounds what it queues for one peer in messages (the send high-water mark), not in bytes, and says
nothing of what it holds. This module learns it from libzmq itself: now and then a message goes out with its
last frame shared with libzmq (zero-copy) and tracked (pyzmq's ``MessageTracker``), and libzmq lets go of that
frame only once it has written it out of the process (into the kernel, or to an inproc peer that read it).
Messages to one connection leave in order, so a *mark* that is done means everything sent before it has left.
What was sent up to a mark that is not done yet is charged to the connection in the broker's ledger
(:class:`~generaldomo.sansio.broker.accounts.ledger.Holding` ``UNSENT``) until it is.

Rules: a connection's message carries a mark once :data:`CHUNK` bytes went to it since its last mark (a large
message always does: marks cost tens of microseconds, so a peer that reads small replies pays for one mark per
:data:`CHUNK` bytes); a connection with marks not done is *backed up*, and a message to it is dropped (counted
by the link) when its unread bytes would pass the per-connection budget, or the ledger's total is full. A
connection that is not backed up is always sent to. Bytes sent since the latest mark are not charged: at most
:data:`CHUNK` per connection, for at most :data:`TAILS` connections (the first counted are forgotten beyond).
The link asks :meth:`Backlog.route` how each message goes (and tells :meth:`Backlog.marked` of a mark sent);
the broker's loop calls :meth:`Backlog.poll`.
"""

from __future__ import annotations

from collections import deque
from typing import Final, Protocol

from generaldomo.sansio.broker.accounts.ledger import MARGIN, ConnectionId, Holding, Ledger

__all__ = ["CHUNK", "POLL", "TAILS", "Backlog", "Tracker"]

CHUNK: Final = 256 * 1024  # bytes sent to a connection between two marks
TAILS: Final = 1024  # connections whose bytes since their latest mark are counted (the first counted go first)
POLL: Final = 0.05  # seconds between looks at the marks not done
SEND, MARK, DROP = 0, 1, 2  # how a message goes (Backlog.route)


class Tracker(Protocol):
    """What the backlog reads of a mark: pyzmq's ``MessageTracker``."""

    @property
    def done(self) -> bool: ...


class _Outbox:
    """One backed-up connection: its marks not done, with the bytes each covers (charged), oldest first."""

    __slots__ = ("marks", "unread")

    def __init__(self) -> None:
        self.marks: deque[tuple[Tracker, int]] = deque()
        self.unread = 0  # bytes charged: those the marks cover


class Backlog:
    """What every link of one broker has sent and not yet written out, per connection, in the ``ledger``;
    ``per_connection`` bytes at most for a backed-up connection (None: no limit)."""

    def __init__(self, ledger: Ledger, per_connection: int | None) -> None:
        self.ledger = ledger
        self.per_connection = per_connection
        self._tails: dict[ConnectionId, int] = {}  # bytes sent since the latest mark, first counted first
        self._backed_up: dict[ConnectionId, _Outbox] = {}
        self.next_poll = 0.0

    def __len__(self) -> int:
        """Connections backed up."""
        return len(self._backed_up)

    def unread(self, where: ConnectionId) -> int:
        """Bytes sent to ``where`` up to its latest mark that are not known to have left."""
        box = self._backed_up.get(where)
        return 0 if box is None else box.unread

    def route(self, where: ConnectionId, size: int) -> int:
        """How a message of ``size`` bytes to ``where`` goes: :data:`SEND` (counted as sent already),
        :data:`MARK` (send it marked and call :meth:`marked`) or :data:`DROP`."""
        backed_up = self._backed_up
        if backed_up and where in backed_up and not self._admits(where, backed_up[where], size):
            return DROP
        tails = self._tails
        tail = tails.get(where, 0) + size
        if tail >= CHUNK:
            return MARK
        tails[where] = tail
        if len(tails) > TAILS:
            del tails[next(iter(tails))]  # the first counted: its bytes since its latest mark are forgotten
        return SEND

    def _admits(self, where: ConnectionId, box: _Outbox, size: int) -> bool:
        """Whether a message of ``size`` bytes may go to ``where``, which was backed up."""
        self._settle(where, box)
        if where not in self._backed_up:
            return True
        pending = box.unread + self._tails.get(where, 0) + size
        if self.per_connection is not None and pending > self.per_connection:
            return False
        budget = self.ledger.total_budget
        return budget is None or self.ledger.total + size <= budget * (1 + MARGIN)

    def marked(self, where: ConnectionId, size: int, mark: Tracker) -> None:
        """A message of ``size`` bytes went to ``where`` with ``mark``: it and the bytes before it are charged."""
        covered = self._tails.pop(where, 0) + size
        box = self._backed_up.get(where)
        if box is None:
            box = self._backed_up[where] = _Outbox()
        box.marks.append((mark, covered))
        box.unread += covered
        self.ledger.charge(where, Holding.UNSENT, covered)

    def poll(self) -> None:
        """Release what the marks that are done cover."""
        for where, box in list(self._backed_up.items()):
            self._settle(where, box)

    def _settle(self, where: ConnectionId, box: _Outbox) -> None:
        marks = box.marks
        while marks and marks[0][0].done:
            _, covered = marks.popleft()
            box.unread -= covered
            self.ledger.release(where, Holding.UNSENT, covered)
        if not marks:
            del self._backed_up[where]

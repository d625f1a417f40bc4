"""The broker pair (Binary Star): which of two brokers serves, decided by one transition table.

This module owns the pair's state machine, after the ZeroMQ Guide's Binary Star (chapter 4). Two brokers, a
*primary* and a *backup*, tell each other their state once per pair heartbeat over their own link; one is
*active* (it serves peers), the other *passive* (it serves nobody: its peers hear nothing and move to the next
endpoint they were given). A peer not heard from for :data:`EXPIRY` heartbeats has *expired*.

The rule against two actives: a passive broker takes over only when its peer has expired **and** a client or
worker has come to it. When the link between the two fails but peers still reach the active, none comes to the
passive, which stays passive. A primary that starts alone serves once its (never heard) peer has expired; a backup
that starts alone never serves before it has heard the primary. An active that hears its peer say *active*, or a
passive that hears *passive*, has found the pair broken (two brokers would serve, or none would): it stops
serving (:attr:`PairState.BROKEN`) and the broker fails, for an operator to restart one of them (there is no
automatic fail-back). The events are the peer's state and a peer's message (:class:`PairEvent`), the latter split by
whether the peer has expired, so that the whole decision is the table :data:`PAIR`.

:class:`Pair` is the live machine of one broker: fed what its link hears and what its links receive, with the
time, it says whether to serve a message and when to send its own state. It also encodes and reads the pair
link's state message (:func:`state_message`, :func:`read_state`). It knows nothing of sockets, keys or clocks.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Final

from generaldomo.sansio.machine import Machine
from generaldomo.sansio.wire import protocol
from generaldomo.sansio.wire.events import ClientRequest, Frame, WorkerReady, WorkerResume

__all__ = [
    "EXPIRY",
    "PAIR",
    "PAIR_HEADER",
    "Pair",
    "PairEvent",
    "PairRole",
    "PairState",
    "Visit",
    "read_state",
    "state_message",
    "visit",
]

EXPIRY: Final = 2  # pair heartbeats without a word from the peer before it has expired (the Guide's two)
PAIR_HEADER: Final = b"GDPAIR01"  # the first frame of every message on the pair link


class PairRole(enum.Enum):
    """Which of the two brokers this is, as the operator says."""

    PRIMARY = "primary"
    BACKUP = "backup"


class PairState(enum.Enum):
    """A pair broker's state; the value is what the status report shows and (its first byte) what the link
    carries."""

    PRIMARY = "primary"  # starting as the primary: not yet decided
    BACKUP = "backup"  # starting as the backup: not yet decided
    ACTIVE = "active"  # serves its peers
    PASSIVE = "passive"  # serves nobody; takes over when the active has expired and a peer comes
    BROKEN = "broken"  # heard the pair broken (two actives, or two passives): serves nobody, the broker fails

    __hash__ = object.__hash__


class PairEvent(enum.Enum):
    """What a pair broker hears: its peer's state, or a message from a client or worker (with the peer live, or
    expired)."""

    PEER_PRIMARY = "peer primary"
    PEER_BACKUP = "peer backup"
    PEER_ACTIVE = "peer active"
    PEER_PASSIVE = "peer passive"
    REQUEST = "request"  # a client or worker came, the peer is live
    REQUEST_PEER_EXPIRED = "request, peer expired"

    __hash__ = object.__hash__


_PEER_EVENT: Final = {
    PairState.PRIMARY: PairEvent.PEER_PRIMARY,
    PairState.BACKUP: PairEvent.PEER_BACKUP,
    PairState.ACTIVE: PairEvent.PEER_ACTIVE,
    PairState.PASSIVE: PairEvent.PEER_PASSIVE,
}

_P, _B, _A, _S, _X = PairState.PRIMARY, PairState.BACKUP, PairState.ACTIVE, PairState.PASSIVE, PairState.BROKEN
# Every (state, event), listed: the Guide's table (bstar.c, s_execute_fsm), with "no change" spelled out and its
# aborts made the BROKEN state. Two primaries or two backups (a mistake in the configuration) decide nothing: a
# primary that hears a primary waits (and serves alone once its real peer has expired, as a lone primary would).
PAIR: Final = Machine[PairState, PairEvent](
    "broker pair",
    {
        (_P, PairEvent.PEER_PRIMARY): _P,
        (_P, PairEvent.PEER_BACKUP): _A,  # connected to the backup: ready as active
        (_P, PairEvent.PEER_ACTIVE): _S,  # the backup is active (it took over): passive
        (_P, PairEvent.PEER_PASSIVE): _P,  # we restarted quickly: the backup goes active on hearing us, then we passive
        (_P, PairEvent.REQUEST): _P,  # the backup may be active: refuse
        (_P, PairEvent.REQUEST_PEER_EXPIRED): _A,  # alone: serve
        (_B, PairEvent.PEER_PRIMARY): _B,  # the primary decides: it goes active on hearing us
        (_B, PairEvent.PEER_BACKUP): _B,
        (_B, PairEvent.PEER_ACTIVE): _S,
        (_B, PairEvent.PEER_PASSIVE): _B,
        (_B, PairEvent.REQUEST): _B,  # a backup never serves before it has heard the primary
        (_B, PairEvent.REQUEST_PEER_EXPIRED): _B,
        (_A, PairEvent.PEER_PRIMARY): _A,  # the other restarts: it will go passive on hearing us
        (_A, PairEvent.PEER_BACKUP): _A,
        (_A, PairEvent.PEER_ACTIVE): _X,  # two actives: split brain
        (_A, PairEvent.PEER_PASSIVE): _A,
        (_A, PairEvent.REQUEST): _A,
        (_A, PairEvent.REQUEST_PEER_EXPIRED): _A,
        (_S, PairEvent.PEER_PRIMARY): _A,  # the primary restarts: we stay the one serving
        (_S, PairEvent.PEER_BACKUP): _A,  # the backup restarts
        (_S, PairEvent.PEER_ACTIVE): _S,
        (_S, PairEvent.PEER_PASSIVE): _X,  # two passives: nobody would serve
        (_S, PairEvent.REQUEST): _S,  # the active is live: refuse
        (_S, PairEvent.REQUEST_PEER_EXPIRED): _A,  # failover: the active is silent and a peer came to us
        **{(_X, event): _X for event in PairEvent},
    },
)


class Visit(enum.Enum):
    """What a peer's message is to a broker of a pair that does not serve (yet): a status request (answered by
    any broker), a request to be served (a client's request, a worker's READY or RESUME: what may make a
    passive broker take over), or neither (heartbeats, cancels, disconnects, malformed messages: dropped, and
    never the reason of a takeover, so that a peer only checking on the broker cannot cause one)."""

    STATUS = "status"
    SERVE = "serve"
    NOTHING = "nothing"


def visit(frames: Sequence[Frame]) -> Visit:
    """What the message ``frames`` (from a client or worker) is to a broker that does not serve."""
    event = protocol.parse(frames)
    kind = type(event)
    if kind is ClientRequest:
        assert isinstance(event, ClientRequest)
        if event.description == b"mmi.status":
            return Visit.STATUS
        return Visit.SERVE
    return Visit.SERVE if kind is WorkerReady or kind is WorkerResume else Visit.NOTHING


def state_message(state: PairState) -> list[bytes]:
    """The frames that tell the peer broker ``state``."""
    return [PAIR_HEADER, state.value.encode("ascii")]


_STATES: Final = {state.value.encode("ascii"): state for state in PairState if state is not PairState.BROKEN}


def read_state(frames: Sequence[Frame]) -> PairState | None:
    """The state a pair link message tells (None: not a pair state message: dropped and counted by the caller)."""
    if len(frames) != 2 or bytes(frames[0]) != PAIR_HEADER:
        return None
    return _STATES.get(bytes(frames[1]))


class Pair:
    """The pair machine of one broker: ``role`` as configured, heartbeats every ``heartbeat`` seconds, started at
    ``now``. Feed it :meth:`heard` (the peer's state) and :meth:`admit` (a peer's message); send
    :meth:`beat`'s frames when :meth:`due`. :attr:`serving` says whether this broker serves now.

    >>> primary, backup = Pair(PairRole.PRIMARY, 1.0, 0.0), Pair(PairRole.BACKUP, 1.0, 0.0)
    >>> primary.heard(backup.state, 0.5); backup.heard(primary.state, 0.5)
    >>> primary.state, backup.state
    (<PairState.ACTIVE: 'active'>, <PairState.PASSIVE: 'passive'>)
    >>> backup.admit(1.0), backup.admit(3.0)  # refused while the active is live; after its silence, failover
    (False, True)
    """

    __slots__ = ("changes", "expiry", "heard_at", "heartbeat", "last_heard", "next_beat", "role", "state")

    def __init__(self, role: PairRole, heartbeat: float, now: float) -> None:
        self.role = role
        self.heartbeat = heartbeat
        self.state = PairState.PRIMARY if role is PairRole.PRIMARY else PairState.BACKUP
        self.expiry = now + EXPIRY * heartbeat  # when the peer has expired unless heard before
        self.heard_at: float | None = None  # when the peer was last heard (None: never)
        self.last_heard: PairState | None = None  # what it said then
        self.next_beat = now
        self.changes = 0  # state changes so far

    @property
    def serving(self) -> bool:
        """Whether this broker serves its peers now."""
        return self.state is PairState.ACTIVE

    def expired(self, now: float) -> bool:
        """Whether the peer broker has been silent for :data:`EXPIRY` heartbeats (or never spoke since the
        start)."""
        return now >= self.expiry

    def heard(self, peer: PairState, now: float) -> None:
        """The peer broker says it is in ``peer``."""
        self.heard_at, self.last_heard = now, peer
        self.expiry = now + EXPIRY * self.heartbeat
        if peer is not PairState.BROKEN:
            self._move(_PEER_EVENT[peer])

    def admit(self, now: float) -> bool:
        """A client's request or a worker's READY came (:data:`Visit.SERVE`): whether to serve it (the failover
        happens here)."""
        if self.state is PairState.ACTIVE:
            return True
        self._move(PairEvent.REQUEST_PEER_EXPIRED if self.expired(now) else PairEvent.REQUEST)
        return self.serving

    def due(self, now: float) -> bool:
        """Whether this broker's state is due to the peer."""
        return now >= self.next_beat

    def beat(self, now: float) -> list[bytes]:
        """The state message to send now (and the next one is due a heartbeat later)."""
        self.next_beat = now + self.heartbeat
        return state_message(self.state)

    def _move(self, event: PairEvent) -> None:
        after = PAIR.apply(self.state, event)
        if after is not self.state:
            self.state = after
            self.changes += 1

"""Timing and limits, with their defaults in one place.

This module owns the numbers both sides of the protocol must agree on (heartbeat interval, liveness) and the
limits the broker enforces. The broker, the peers, the bridge and the CLI take their defaults from here.
It knows nothing of sockets or clocks.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from generaldomo.sansio.checked import check_fields, checked

__all__ = [
    "DEFAULT_MAX_FRAMES",
    "DEFAULT_MAX_MESSAGE",
    "HEARTBEAT_INTERVAL",
    "LIVENESS",
    "MAX_ATTEMPTS",
    "MIB",
    "PeerSettings",
    "Settings",
]

HEARTBEAT_INTERVAL = 2.5
LIVENESS = 3
MAX_ATTEMPTS = 3
MIB = 1024 * 1024
DEFAULT_MAX_MESSAGE = 64 * MIB
DEFAULT_MAX_FRAMES = 1024


@dataclasses.dataclass(frozen=True, slots=True)
class PeerSettings:
    """Heartbeats as a peer (client, worker, bridge) keeps them; use the broker's values on every side."""

    heartbeat_interval: float = HEARTBEAT_INTERVAL
    liveness: int = LIVENESS  # heartbeat intervals of silence after which the other side is presumed gone

    @property
    def expiry(self) -> float:
        """Seconds of silence after which the other side is presumed gone."""
        return self.heartbeat_interval * self.liveness


def _share(name: str, value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 0.5:
        raise ValueError(f"{name} must be a number above 0 and at most 0.5")
    return value


@dataclasses.dataclass(frozen=True, slots=True)
class Settings:
    """Timing and limits the broker core enforces.

    Args:
        heartbeat_interval: seconds between heartbeats to workers (peers should use the same).
        liveness: heartbeat intervals of silence after which a worker is presumed dead.
        max_attempts: workers a task may be lost with before its client gets ``503``.
        queue_timeout: seconds a request may wait for a worker (``504`` beyond); None: forever.
        anonymous_queue_timeout: the same for a request without a request id (every MDP request: nobody can
            re-ask for it or be heard to wait for it); None: as ``queue_timeout``.
        max_message: bytes a request or result may carry (``413`` beyond); None: no limit.
        max_frames: frames a message may have; the links drop longer ones while reading.
        queue_bytes: bytes of requests the broker holds, queued or running (``429`` beyond); None: no limit.
        service_queue_bytes: the same, per service.
        keep_answers: seconds a final answer is kept for re-asks and fetches.
        keep_bytes: bytes of kept answers, the oldest evicted first.
        dead_letters: tasks that finally failed kept per service (its dead letters), the oldest evicted first;
            0: none kept.
        dead_bytes: bytes of dead letters, all services together (one service's at most half of them), the oldest
            evicted first.
        dead_seconds: seconds a dead letter is kept.
        service_idle: seconds after which a service with nothing in it is forgotten; None: never.
        served_memory: seconds a service that had workers counts as known (``404`` to a request that asks to
            fail fast only beyond).
        client_expiry: silence after which a client's queued requests are dropped (None: :attr:`client_silence`).
        max_workers: registered workers, all services together; more are told to DISCONNECT.
        held_bytes: bytes the broker holds on peers' behalf in all (the ledger); None: no limit.
        connection_bytes: the same, per connection.
        connection_requests: queued and running requests of one connection (``429`` beyond).
        connection_services: services (and flow entries) one connection's messages may make.
        connection_worker_share: the share of ``max_workers`` one connection may register.
        connection_queue_share: the share of ``queue_bytes`` one connection's requests may hold.
        recovery: seconds a broker restarted on a state directory holds dispatch back, for the workers of the
            previous instance to claim their tasks (None: :attr:`recovery_window`'s default).
        deadline_estimate_after: answered tasks of a service after which its service-time estimate (see
            :mod:`generaldomo.sansio.broker.services.stats`) answers ``504`` at once a task whose time left is
            less than it, rather than dispatch it; None: off.

    Example:
        >>> from generaldomo import Settings
        >>> settings = Settings(heartbeat_interval=1.0, liveness=3, queue_timeout=30.0)
        >>> settings.expiry, settings.client_silence
        (3.0, 10.0)
    """

    heartbeat_interval: float = HEARTBEAT_INTERVAL
    liveness: int = LIVENESS
    max_attempts: int = MAX_ATTEMPTS
    queue_timeout: float | None = None  # seconds a request may wait for a worker; None: forever
    anonymous_queue_timeout: float | None = 60.0  # the same for requests without an id (MDP); None: queue_timeout
    max_message: int | None = DEFAULT_MAX_MESSAGE  # bytes a request or result may carry (413 beyond); None: no limit
    max_frames: int = DEFAULT_MAX_FRAMES  # frames a message may have; the links drop longer ones while reading
    queue_bytes: int | None = 64 * MIB  # bytes of requests the broker holds (queued or running), 429 beyond
    service_queue_bytes: int | None = 32 * MIB  # the same, per service
    keep_answers: float = 60.0  # seconds a final answer to a generaldomo client is kept for its re-asks
    keep_bytes: int = 64 * MIB  # bytes of kept answers, oldest evicted first
    dead_letters: int = 100  # tasks that finally failed kept per service, oldest evicted first; 0: none
    dead_bytes: int = 16 * MIB  # bytes of dead letters, all services together, oldest evicted first
    dead_seconds: float = 7 * 24 * 3600.0  # seconds a dead letter is kept
    service_idle: float | None = 60.0  # seconds after which a service with nothing in it is forgotten
    served_memory: float = 600.0  # seconds a service that had workers is known (see known_service_grace)
    client_expiry: float | None = None  # silence after which a client's queued requests go; None: see below
    max_workers: int | None = 100_000  # registered workers, all services together; more are told to DISCONNECT
    recovery: float | None = None  # seconds a restarted hand-over broker holds dispatch; None: see below
    # answered tasks of a service before its service-time estimate turns away a task that cannot make its deadline
    # (504 at once, not dispatched); None: off (every task is dispatched while its deadline has not passed)
    deadline_estimate_after: int | None = 8
    # The ledger (generaldomo.sansio.broker.accounts.ledger): bytes held on peers' behalf, in all and per connection.
    held_bytes: int | None = 256 * MIB
    connection_bytes: int | None = 64 * MIB
    connection_requests: int | None = 10_000  # queued and running requests of one connection; 429 beyond
    connection_services: int | None = 1_000  # services (and flow entries) one connection's messages made
    connection_worker_share: float = checked(_share, default=0.25)
    connection_queue_share: float = checked(_share, default=0.5)

    def __post_init__(self) -> None:
        check_fields(self)

    @property
    def expiry(self) -> float:
        """Seconds of silence after which a worker is presumed dead."""
        return self.heartbeat_interval * self.liveness

    @property
    def connection_queue_bytes(self) -> int | None:
        """Bytes of requests one connection may hold: ``connection_queue_share`` of ``queue_bytes`` (None when
        the queue has no budget)."""
        if self.queue_bytes is None:
            return None
        return math.floor(self.queue_bytes * self.connection_queue_share)

    @property
    def known_service_grace(self) -> float:
        """Seconds after the broker starts during which it does not answer "no such service" (``404`` to a
        request that asks to fail fast): twice the liveness expiry, time for the workers of a broker that
        restarted to notice it and register again."""
        return 2 * self.expiry

    @property
    def recovery_window(self) -> float:
        """Seconds a broker that restarts on a state directory holds dispatch back (requests queue), so that
        workers still running tasks of the previous instance register again and claim them before the clients'
        resends could start them a second time: ``recovery``, or twice the heartbeat interval (a busy worker
        heartbeats once per interval, and its first heartbeat to the new instance tells it to register)."""
        return 2 * self.heartbeat_interval if self.recovery is None else self.recovery

    @property
    def connection_workers(self) -> int | None:
        """Workers one connection may register: ``connection_worker_share`` of ``max_workers`` (at least one;
        None when the worker table has no limit)."""
        if self.max_workers is None:
            return None
        return max(1, math.floor(self.max_workers * self.connection_worker_share))

    @property
    def client_silence(self) -> float:
        """Seconds a generaldomo client with queued requests may stay silent before they are dropped:
        ``client_expiry``, or twice the liveness expiry but at least 10 s, so that a client on a loaded
        machine, or one that heartbeats less often than the broker, is not dropped by accident."""
        if self.client_expiry is not None:
            return self.client_expiry
        return max(2 * self.expiry, 10.0)

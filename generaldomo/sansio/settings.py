"""Timing and limits, with their defaults in one place.

This module owns the numbers both sides of the protocol must agree on (heartbeat interval, liveness) and the
limits the broker enforces. The broker, the peers, the bridge and the CLI take their defaults from here.
It knows nothing of sockets or clocks.
"""

from __future__ import annotations

import attrs

HEARTBEAT_INTERVAL = 2.5
LIVENESS = 3
MAX_ATTEMPTS = 3
DEFAULT_MAX_MESSAGE = 64 * 1024 * 1024
DEFAULT_MAX_FRAMES = 1024


@attrs.frozen
class PeerSettings:
    """Heartbeats as a peer (client, worker, bridge) keeps them; use the broker's values on every side."""

    heartbeat_interval: float = HEARTBEAT_INTERVAL
    liveness: int = LIVENESS  # heartbeat intervals of silence after which the other side is presumed gone

    @property
    def expiry(self) -> float:
        """Seconds of silence after which the other side is presumed gone."""
        return self.heartbeat_interval * self.liveness


@attrs.frozen
class Settings:
    """Timing and limits the broker core enforces."""

    heartbeat_interval: float = HEARTBEAT_INTERVAL
    liveness: int = LIVENESS
    max_attempts: int = MAX_ATTEMPTS
    queue_timeout: float | None = None  # seconds a request may wait for a worker; None: forever
    max_message: int | None = DEFAULT_MAX_MESSAGE  # bytes a request or result may carry (413 beyond); None: no limit
    max_frames: int = DEFAULT_MAX_FRAMES  # frames a message may have; the links drop longer ones while reading

    @property
    def expiry(self) -> float:
        """Seconds of silence after which a worker is presumed dead."""
        return self.heartbeat_interval * self.liveness

"""The broker pair's replication link: the active broker's journal records, streamed to the passive.

This module owns the sockets that carry :mod:`generaldomo.sansio.broker.replication`'s messages (which decides what
they mean). Each broker of a pair binds a ROUTER socket at its *replication endpoint* and connects a DEALER socket
to its peer's; the endpoint is the pair endpoint's (``--ha-bind``, ``--ha-peer``) with the next port for ``tcp://``
and ``.replication`` added to the path or name for ``ipc://`` and ``inproc://`` (:func:`replication_endpoint`).
The passive speaks first, on its DEALER, once per pair heartbeat (what it applied, or a request for a snapshot);
the active answers on its ROUTER, to the DEALER that last spoke a passive's word: the records of each turn as it
makes them, its beat, and the snapshots asked for. When the roles swap, so do the sockets used. The link is input
like any other:

- *Authenticated* as the pair link (:mod:`generaldomo.io.hub.pair`): with CURVE, the DEALER pins the peer's public
  key as the server key and the ROUTER admits, through the ZAP handler and a domain of its own
  (:data:`REPLICATION_DOMAIN`), the peer's key and no other; without CURVE, only when the pair link is allowed
  plaintext.
- *Bounded.* At most :data:`QUEUED` messages are queued each way; the active never blocks on its peer: a message
  that finds the queue full is dropped and counted (``replication_dropped``), and the passive finds the gap. A
  frame is at most ``frame_bytes`` (libzmq drops a larger message and the connection), the broker's largest
  request and the envelope's slack: every record of an accepted request fits. A turn reads at most :data:`READ`
  messages.
- *Counted.* A handshake refused for another key (``replication_refused``), and a message that is not a
  replication message (``replication_malformed``, the sans-IO layer's count) are counted and dropped.

It knows nothing of the broker core; the broker process (:mod:`generaldomo.io.broker`) polls :attr:`sockets`.
"""

from __future__ import annotations

import logging
from typing import Any, Final

import zmq

from generaldomo.io.auth import BrokerSecurity, ZapHandler
from generaldomo.io.hub.pair import PairConfig, Pinned, pin
from generaldomo.io.transport import bind

__all__ = ["QUEUED", "READ", "REPLICATION_DOMAIN", "ReplicationLink", "replication_endpoint"]

log = logging.getLogger(__name__)

REPLICATION_DOMAIN: Final = "generaldomo-replication"  # the ZAP domain of the replication link's ROUTER side
QUEUED: Final = 1024  # messages queued each way, at most
READ: Final = 256  # messages read in one turn, at most
_SUFFIX: Final = ".replication"
_FRAMES: Final = 6  # frames of a message kept while it is read (a routing id and five at most)


def replication_endpoint(endpoint: str) -> str:
    """The replication endpoint beside the pair endpoint ``endpoint`` (the module docstring)."""
    if endpoint.startswith("tcp://"):
        host, _, port = endpoint.rpartition(":")
        if port == "*":
            return endpoint  # (any free port: a peer cannot find it by the pair endpoint; the pair's neither)
        return f"{host}:{int(port) + 1}"
    return endpoint + _SUFFIX


def _receive(socket: zmq.Socket[Any]) -> list[bytes] | None:
    """The next message of ``socket`` (None: none waits), of which at most :data:`_FRAMES` frames are kept (a
    longer one is no replication message: the sans-IO layer counts it)."""
    try:
        frames = [socket.recv(zmq.NOBLOCK)]
    except zmq.Again:
        return None
    while socket.getsockopt(zmq.RCVMORE):
        frame = socket.recv()
        if len(frames) <= _FRAMES:
            frames.append(frame)
    return frames


class ReplicationLink:
    """The replication link of one broker of a pair (see the module docstring), its messages at most
    ``frame_bytes``: :meth:`to_passive` and :meth:`to_active` send, :meth:`from_passive` and :meth:`from_active`
    receive; :attr:`sockets` are the ones to poll."""

    def __init__(
        self,
        context: zmq.Context[Any],
        config: PairConfig,
        frame_bytes: int,
        security: BrokerSecurity | None = None,
        zap: ZapHandler | None = None,
    ) -> None:
        self.bind_endpoint = replication_endpoint(config.bind)
        self.peer_endpoint = replication_endpoint(config.peer)
        self._pinned: Pinned | None = None
        self._passive: bytes | None = None  # the routing id of the passive's DEALER, once it spoke
        self.dropped = 0  # messages to the peer that found its queue full
        self.router: zmq.Socket[Any] = context.socket(zmq.ROUTER)
        self.dealer: zmq.Socket[Any] = context.socket(zmq.DEALER)
        try:
            for one in (self.router, self.dealer):
                one.setsockopt(zmq.LINGER, 0)
                one.setsockopt(zmq.SNDHWM, QUEUED)
                one.setsockopt(zmq.RCVHWM, QUEUED)
                one.setsockopt(zmq.MAXMSGSIZE, frame_bytes)
            self.router.setsockopt(zmq.ROUTER_MANDATORY, 1)
            self.dealer.setsockopt(zmq.IMMEDIATE, 1)
            if security is not None:
                self._pinned = pin(self.router, self.dealer, security, config.peer_key, zap, REPLICATION_DOMAIN)
            elif not config.plaintext:
                raise ValueError("a broker pair without CURVE must be allowed plaintext explicitly (--ha-plaintext)")
            bind(self.router, "replication", self.bind_endpoint)
            self.dealer.connect(self.peer_endpoint)
        except BaseException:
            self.close()
            raise

    @property
    def sockets(self) -> tuple[zmq.Socket[Any], zmq.Socket[Any]]:
        """The sockets to poll: the ROUTER (the passive speaks to this broker as the active) and the DEALER."""
        return self.router, self.dealer

    @property
    def refused(self) -> int:
        """Handshakes refused for a key that is not the peer's."""
        return 0 if self._pinned is None else self._pinned.refused

    @property
    def connected(self) -> bool:
        """Whether a passive has spoken to this broker (the records have somewhere to go: :meth:`answer_to`)."""
        return self._passive is not None

    def to_passive(self, messages: list[list[bytes]]) -> None:
        """Send ``messages`` to the passive that last spoke, without blocking (dropped and counted when its queue
        is full, or when no passive has spoken)."""
        passive = self._passive
        if passive is None:
            self.dropped += len(messages)
            return
        router = self.router
        for n, frames in enumerate(messages):
            try:
                router.send_multipart([passive, *frames], zmq.NOBLOCK)
            except zmq.Again:
                self.dropped += len(messages) - n  # (the rest would find the queue as full)
                return
            except zmq.ZMQError as error:
                if error.errno != zmq.EHOSTUNREACH:
                    raise
                self._passive = None  # gone: until it speaks again
                self.dropped += len(messages) - n
                return

    def to_active(self, frames: list[bytes]) -> None:
        """Send ``frames`` to the active peer without blocking (dropped when the queue is full or not connected:
        the next heartbeat repeats it)."""
        try:
            self.dealer.send_multipart(frames, zmq.NOBLOCK)
        except zmq.Again:
            pass

    def from_passive(self) -> list[tuple[bytes, list[bytes]]]:
        """The messages sent to this broker as the active since the last call (at most :data:`READ`), each with
        the routing id of its sender (:meth:`answer_to` it once it proved a passive's word)."""
        out = []
        for _ in range(READ):
            message = _receive(self.router)
            if message is None:
                break
            out.append((message[0], message[1:]))
        return out

    def answer_to(self, passive: bytes) -> None:
        """Send the records from now on to the sender ``passive`` (its message was a passive's word)."""
        self._passive = passive

    def from_active(self) -> list[list[bytes]]:
        """The messages the active sent to this broker since the last call (at most :data:`READ`)."""
        out = []
        for _ in range(READ):
            message = _receive(self.dealer)
            if message is None:
                break
            out.append(message)
        return out

    def close(self) -> None:
        """Close both sockets."""
        self.router.close(0)
        self.dealer.close(0)

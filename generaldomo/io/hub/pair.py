"""The broker pair's own link: the two brokers' states, once per pair heartbeat, each way.

This module owns the sockets between the two brokers of a pair (:mod:`generaldomo.sansio.broker.pair` decides
what they mean): each broker binds a PUB socket at its own pair endpoint and connects a SUB socket to its peer's,
as in the Guide's Binary Star. The link is input like any other:

- *Authenticated.* When the brokers run CURVE, the link does too, with both keys pinned: the SUB side connects
  with the peer's public key as the server key (a broker that cannot prove it holds that key completes no
  handshake), and the PUB side admits, through the context's ZAP handler and a domain of its own
  (:data:`PAIR_DOMAIN`), the peer's public key and no other. Without CURVE the link is plaintext only when the
  operator says so (``plaintext``), and a warning says so at start.
- *Bounded.* A few messages are queued each way (:data:`QUEUED`, dropped beyond: a state is sent again a
  heartbeat later, and the sender never blocks on its peer), a frame is at most :data:`FRAME_BYTES` (libzmq cuts
  a larger one off), and a turn reads at most :data:`READ` messages of at most three frames kept.
- *Counted.* A handshake refused for a key that is not the peer's, and a message that is not a pair state, are
  counted (:attr:`PairLink.refused`, the status report's ``pair_refused``).

It knows nothing of the broker core; the broker process (:mod:`generaldomo.io.broker`) polls :attr:`PairLink.socket`.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from typing import Any, Final

import zmq

from generaldomo.io.auth import BrokerSecurity, ZapHandler
from generaldomo.io.endpoints import check as check_endpoint
from generaldomo.io.transport import bind
from generaldomo.sansio.broker.pair import Pair, PairRole, PairState, read_state

__all__ = ["FRAME_BYTES", "PAIR_DOMAIN", "QUEUED", "READ", "PairConfig", "PairLink", "Pinned", "pin"]

log = logging.getLogger(__name__)

PAIR_DOMAIN: Final = "generaldomo-pair"  # the ZAP domain of the pair link's PUB side
QUEUED: Final = 16  # messages queued each way, at most
FRAME_BYTES: Final = 1024  # bytes of one frame on the pair link, at most
READ: Final = 64  # messages read in one turn, at most
_FRAMES: Final = 3  # frames of a message kept while it is read (a state message has two)


@dataclasses.dataclass(frozen=True, slots=True)
class PairConfig:
    """One broker of a pair: its ``role``, the endpoint its pair link binds (``bind``), the peer's (``peer``), the
    pair heartbeat in seconds, and the peer's CURVE public key (Z85; needed when the broker runs CURVE) or
    ``plaintext`` (needed when it does not)."""

    role: PairRole
    bind: str
    peer: str
    heartbeat: float = 1.0
    peer_key: bytes | None = None
    plaintext: bool = False

    def __post_init__(self) -> None:
        check_endpoint(self.bind, bind=True)
        check_endpoint(self.peer, bind=False)
        if not 0.01 <= self.heartbeat <= 3600:
            raise ValueError(f"the pair heartbeat must be within 0.01 and 3600 seconds, not {self.heartbeat}")
        if self.peer_key is not None and len(self.peer_key) != 40:
            raise ValueError("the pair peer's key must be a Z85 CURVE public key (40 characters)")


class Pinned:
    """The ZAP credentials provider of a pair link's ``domain``: the peer's key, and nothing else (refusals
    counted)."""

    def __init__(self, key: bytes, domain: str = PAIR_DOMAIN) -> None:
        self.key = key
        self.domain = domain
        self.refused = 0
        self._lock = threading.Lock()

    def callback(self, domain: str, key: bytes) -> bool:
        if domain == self.domain and key == self.key:
            return True
        with self._lock:
            self.refused += 1
        return False


def pin(
    server: zmq.Socket[Any],
    client: zmq.Socket[Any],
    security: BrokerSecurity,
    peer_key: bytes | None,
    zap: ZapHandler | None,
    domain: str,
) -> Pinned:
    """Make ``server`` a CURVE server that admits, through the ZAP handler ``zap`` and its own ``domain``, the peer
    broker's key ``peer_key`` and no other, and ``client`` a CURVE client that pins it as its server's key; the
    provider that counts the refusals."""
    if peer_key is None or zap is None:
        raise ValueError("a CURVE link between the brokers of a pair needs the peer broker's key and the ZAP handler")
    pinned = Pinned(peer_key, domain)
    zap.authenticator.configure_curve_callback(domain, credentials_provider=pinned)
    server.setsockopt(zmq.ZAP_DOMAIN, domain.encode())
    server.setsockopt(zmq.CURVE_SERVER, 1)
    server.setsockopt(zmq.CURVE_SECRETKEY, security.secret_key)
    client.setsockopt(zmq.CURVE_SERVERKEY, peer_key)
    client.setsockopt(zmq.CURVE_PUBLICKEY, security.public_key)
    client.setsockopt(zmq.CURVE_SECRETKEY, security.secret_key)
    return pinned


class PairLink:
    """The pair link of one broker (see the module docstring): :meth:`send` its state, :meth:`receive` the
    peer's; :attr:`socket` is the one to poll."""

    def __init__(
        self,
        context: zmq.Context[Any],
        config: PairConfig,
        security: BrokerSecurity | None = None,
        zap: ZapHandler | None = None,
    ) -> None:
        if security is not None and config.peer_key is None:
            raise ValueError("a broker pair running CURVE needs the peer broker's public key (--ha-peer-key)")
        if security is None and not config.plaintext:
            raise ValueError(
                "a broker pair without CURVE must be allowed plaintext explicitly (--ha-plaintext): anyone who "
                "reaches the pair endpoints could read the brokers' states"
            )
        if security is None:
            log.warning("the broker pair's link to %s is plaintext: not authenticated, not encrypted", config.peer)
        self.config = config
        self._pinned: Pinned | None = None
        self._malformed = 0
        self.publisher: zmq.Socket[Any] = context.socket(zmq.PUB)
        self.socket: zmq.Socket[Any] = context.socket(zmq.SUB)
        try:
            for one in (self.publisher, self.socket):
                one.setsockopt(zmq.LINGER, 0)
                one.setsockopt(zmq.MAXMSGSIZE, FRAME_BYTES)
            self.publisher.setsockopt(zmq.SNDHWM, QUEUED)
            self.socket.setsockopt(zmq.RCVHWM, QUEUED)
            self.socket.setsockopt(zmq.SUBSCRIBE, b"")
            if security is not None:
                self._pinned = pin(self.publisher, self.socket, security, config.peer_key, zap, PAIR_DOMAIN)
            bind(self.publisher, "pair", config.bind)
            self.socket.connect(config.peer)
        except BaseException:
            self.close()
            raise

    @property
    def endpoint(self) -> str:
        """The endpoint the pair link is bound to (a ``*`` port received)."""
        endpoint = self.publisher.getsockopt(zmq.LAST_ENDPOINT)
        return endpoint.decode() if isinstance(endpoint, bytes) else str(endpoint)

    @property
    def refused(self) -> int:
        """Handshakes refused for a key that is not the peer's, and messages that are not a pair state."""
        return self._malformed + (0 if self._pinned is None else self._pinned.refused)

    def send(self, frames: list[bytes]) -> None:
        """Send ``frames`` to the peer without blocking (dropped when the queue is full: the next beat repeats
        them)."""
        try:
            self.publisher.send_multipart(frames, zmq.NOBLOCK)
        except zmq.Again:
            pass

    def receive(self) -> list[PairState]:
        """The states the peer sent since the last call (at most :data:`READ`), in order."""
        heard: list[PairState] = []
        socket = self.socket
        for _ in range(READ):
            try:
                frames = [socket.recv(zmq.NOBLOCK)]
            except zmq.Again:
                break
            while socket.getsockopt(zmq.RCVMORE):  # the rest of the message, kept up to _FRAMES
                frame = socket.recv()
                if len(frames) <= _FRAMES:
                    frames.append(frame)
            state = read_state(frames)
            if state is None:
                self._malformed += 1
            else:
                heard.append(state)
        return heard

    def beat(self, pair: Pair, now: float) -> None:
        """Feed ``pair`` what the peer said and send this broker's state when it is due."""
        for state in self.receive():
            pair.heard(state, now)
        if pair.due(now):
            self.send(pair.beat(now))

    def close(self) -> None:
        """Close both sockets."""
        self.publisher.close(0)
        self.socket.close(0)

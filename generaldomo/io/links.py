"""Links: the only broker code that touches sockets.

A link owns one bound socket and turns what arrives on it into ``(address, frames)`` and back. ``RouterLink``
uses a ROUTER socket: the address is the peer's identity frame and frames pass as they are, so Majordomo peers
work unchanged. ``ServerLink`` uses a SERVER socket (draft API): the address is the peer's routing id and the
frames travel packed in one message part by :mod:`generaldomo.sansio.codec`; its ``inproc://`` endpoints are carried
by :mod:`generaldomo.io.inproc`. Links know nothing of the protocol.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable, Sequence
from typing import ClassVar

import zmq
from zmq.utils.monitor import recv_monitor_message

from generaldomo.io import inproc
from generaldomo.io.transport import Transport, require_draft
from generaldomo.sansio import codec

log = logging.getLogger(__name__)

NO_LIMIT = -1
_NOBLOCK = int(zmq.NOBLOCK)
_MORE = int(zmq.SNDMORE) | _NOBLOCK
_RCVMORE = int(zmq.RCVMORE)
_REFUSAL_NAMES = {
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "handshake failed (not a ZeroMQ peer, or it hung up)",
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "handshake failed: ZMTP protocol error",
    zmq.EVENT_HANDSHAKE_FAILED_AUTH: "handshake failed: authentication",
}
_REFUSALS = sum(_REFUSAL_NAMES)
_monitors = itertools.count()


class Link:
    """A bound socket of one transport; subclasses say how addresses and frames travel."""

    transport: ClassVar[Transport]
    socket_type: ClassVar[int]

    def __init__(self, context: zmq.Context, endpoints: Iterable[str], max_message: int = NO_LIMIT) -> None:
        """Bind to ``endpoints``; libzmq drops the connection of a peer that sends more than ``max_message``."""
        self.socket: zmq.Socket = context.socket(self.socket_type)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.MAXMSGSIZE, max_message)
        self.endpoints: list[str] = []
        # libzmq turns away peers that do not speak ZMTP (port scans, garbage) without telling the
        # application; its monitor does, so that each refusal gets a log line.
        address = f"inproc://generaldomo-monitor-{next(_monitors)}"  # pyzmq's own naming fails on SERVER sockets
        self.socket.monitor(address, _REFUSALS)
        self.monitor: zmq.Socket = context.socket(zmq.PAIR)
        self.monitor.connect(address)
        try:
            for endpoint in endpoints:
                self.bind(endpoint)
        except Exception:
            self.close(0)
            raise

    def bind(self, endpoint: str) -> str:
        """Bind to ``endpoint``; return the concrete endpoint (with the port a ``*`` got)."""
        self.socket.bind(endpoint)
        concrete = self.socket.getsockopt(zmq.LAST_ENDPOINT).decode()
        self.endpoints.append(concrete)
        return concrete

    def recv(self) -> tuple[bytes | int, list[bytes]] | None:
        """The next message as ``(address, frames)`` without blocking; None when there is none."""
        raise NotImplementedError

    def send(self, address: bytes | int, frames: Sequence[bytes]) -> None:
        """Send ``frames`` to ``address``; a peer that has gone is dropped silently."""
        raise NotImplementedError

    def log_refusals(self) -> int:
        """Log a line for each connection libzmq refused since the last call; return how many."""
        refused = 0
        while True:
            try:
                event = recv_monitor_message(self.monitor, zmq.NOBLOCK)
            except zmq.Again:
                return refused
            refused += 1
            name = _REFUSAL_NAMES.get(event["event"], "handshake failed")
            log.warning("%s link refused a connection on %s: %s", self.transport, event["endpoint"].decode(), name)

    def close(self, linger_ms: int = 200) -> None:
        """Close the socket, giving queued messages (e.g. DISCONNECTs) ``linger_ms`` to leave."""
        self.socket.disable_monitor()
        self.monitor.close(linger=0)
        self.socket.close(linger=linger_ms)


class RouterLink(Link):
    """MDP-compatible: a ROUTER socket, frames as they are."""

    transport = Transport.ROUTER
    socket_type = zmq.ROUTER

    # Frame by frame with plain int flags: pyzmq's multipart helpers cost several microseconds more per
    # message in flag and type handling (measured in bench/README.md), and this is the broker's hot path.

    def recv(self) -> tuple[bytes | int, list[bytes]] | None:
        socket = self.socket
        try:
            address = socket.recv(_NOBLOCK)
        except zmq.Again:
            return None
        frames = []
        while socket.getsockopt(_RCVMORE):
            frames.append(socket.recv(_NOBLOCK))
        return address, frames

    def send(self, address: bytes | int, frames: Sequence[bytes]) -> None:
        # A ROUTER never blocks: a message to a peer whose queue is full, or that is gone, is dropped.
        # The broker never sends a message without frames.
        send = self.socket.send
        send(address, _MORE)  # type: ignore[arg-type]
        for frame in frames[:-1]:
            send(frame, _MORE)
        send(frames[-1], _NOBLOCK)


class ServerLink(Link):
    """Thread-safe peers: a SERVER socket; frames packed into one part."""

    transport = Transport.SERVER
    socket_type = getattr(zmq, "SERVER", -1)

    def __init__(self, context: zmq.Context, endpoints: Iterable[str], max_message: int = NO_LIMIT) -> None:
        require_draft()
        self._aliases: list[str] = []
        super().__init__(context, endpoints, max_message)

    def bind(self, endpoint: str) -> str:
        """Bind to ``endpoint``; an ``inproc://`` endpoint is carried over a private ipc socket (see
        :mod:`generaldomo.io.inproc`) and reported under its inproc name."""
        if not endpoint.startswith("inproc://"):
            return super().bind(endpoint)
        stand_in = inproc.claim(endpoint)
        try:
            self.socket.bind(stand_in)
        except zmq.ZMQError:
            inproc.release(endpoint)
            raise
        self._aliases.append(endpoint)
        self.endpoints.append(endpoint)
        return endpoint

    def close(self, linger_ms: int = 200) -> None:
        super().close(linger_ms)
        for endpoint in self._aliases:
            inproc.release(endpoint)

    def recv(self) -> tuple[bytes | int, list[bytes]] | None:
        while True:
            try:
                message = self.socket.recv(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return None
            try:
                return message.routing_id, codec.decode(message.bytes)
            except codec.CodecError as error:
                log.warning("dropped a message from %s that does not unpack: %s", message.routing_id, error)

    def send(self, address: bytes | int, frames: Sequence[bytes]) -> None:
        message = zmq.Frame(codec.encode(frames))
        message.routing_id = address
        try:
            self.socket.send(message, zmq.NOBLOCK)
        except zmq.Again:
            log.warning("dropped a message to %s: its queue is full", address)
        except zmq.ZMQError as error:  # EHOSTUNREACH: the peer is gone
            log.info("dropped a message to %s: %s", address, error)


LINKS: dict[Transport, type[Link]] = {Transport.ROUTER: RouterLink, Transport.SERVER: ServerLink}

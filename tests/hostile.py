"""Raw peers and a raw broker for the hostile-input tests: one socket each, frames as the test writes them."""

from __future__ import annotations

from typing import Any

import zmq

from generaldomo.sansio.wire import codec, protocol

WAIT_MS = 30_000  # a reply the test waits for comes within this long, on a loaded machine


class RawPeer:
    """A DEALER (router transport) or CLIENT (server transport) connected to a broker: no session, no retries."""

    def __init__(self, transport: str, endpoint: str, context: zmq.Context[Any] | None = None) -> None:
        self.server = transport == "server"
        self.socket = (context or zmq.Context.instance()).socket(zmq.CLIENT if self.server else zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.connect(endpoint)

    def send(self, frames: list[bytes]) -> None:
        if self.server:
            self.socket.send(codec.encode(frames))
        else:
            self.socket.send_multipart(frames)

    def recv(self, timeout_ms: int = WAIT_MS) -> list[bytes] | None:
        """The next message, or None if none comes within ``timeout_ms``."""
        if not self.socket.poll(timeout_ms):
            return None
        return codec.decode(self.socket.recv()) if self.server else self.socket.recv_multipart()

    def close(self) -> None:
        self.socket.close(linger=0)

    def __enter__(self) -> RawPeer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def statuses_of_answers(peer: RawPeer, quiet_ms: int = 3000) -> dict[bytes, int]:
    """How many answers of each status ``peer`` gets until none comes for ``quiet_ms``."""
    statuses: dict[bytes, int] = {}
    while (frames := peer.recv(quiet_ms)) is not None:
        reply = protocol.parse_client_reply(frames)
        assert reply is not None and reply[1] is not None
        statuses[reply[1]] = statuses.get(reply[1], 0) + 1
    return statuses


def ask(peer: RawPeer, count: int, service: bytes = b"nobody") -> None:
    """Send ``count`` GDP requests to ``service``, numbered from 0 (ids and bodies alike)."""
    for n in range(count):
        peer.send(protocol.gdp_request(b"%d" % n, service, [b"%d" % n]))


class RawBroker:
    """A ROUTER (router transport) or SERVER (server transport) bound to a loopback port: a hostile broker that
    a test drives message by message."""

    def __init__(self, transport: str, context: zmq.Context[Any] | None = None) -> None:
        self.server = transport == "server"
        self.socket = (context or zmq.Context.instance()).socket(zmq.SERVER if self.server else zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.bind("tcp://127.0.0.1:*")
        self.endpoint = self.socket.getsockopt_string(zmq.LAST_ENDPOINT)

    def recv(self, timeout_ms: int = WAIT_MS) -> tuple[Any, list[bytes]]:
        """``(peer, frames)`` of the next message; fails the test if none comes in time."""
        assert self.socket.poll(timeout_ms), "no message reached the raw broker in time"
        if self.server:
            message = self.socket.recv(copy=False)
            return message.routing_id, codec.decode(message.bytes)
        peer, *frames = self.socket.recv_multipart()
        return peer, frames

    def recv_until(self, wanted: Any, timeout_ms: int = WAIT_MS) -> tuple[Any, list[bytes]]:
        """The next message for which ``wanted(frames)`` is true (heartbeats and others skipped)."""
        for _ in range(1000):
            peer, frames = self.recv(timeout_ms)
            if wanted(frames):
                return peer, frames
        raise AssertionError("the wanted message never came")

    def send(self, peer: Any, frames: list[bytes]) -> None:
        if self.server:
            message = zmq.Frame(codec.encode(frames))
            message.routing_id = peer
            self.socket.send(message)
        else:
            self.socket.send_multipart([peer, *frames])

    def close(self) -> None:
        self.socket.close(linger=0)

    def __enter__(self) -> RawBroker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

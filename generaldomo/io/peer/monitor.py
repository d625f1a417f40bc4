"""The socket monitor of a peer's connection: libzmq's handshake events, read without blocking.

This module owns the monitor of one peer socket (a PAIR socket that libzmq writes the events of
``zmq_socket_monitor`` to) and feeds what it reads to a
:class:`~generaldomo.sansio.peer.handshake.HandshakeWatch`, which names the cause of a failed handshake. Only the
peer's IO thread reads it. It knows nothing of the protocol or of what a client or worker does about a failure.
"""

from __future__ import annotations

import os
import struct
from typing import Any

import zmq

from generaldomo.sansio.peer.handshake import WATCHED, HandshakeWatch

__all__ = ["Monitor", "attach"]

_EVENT = struct.Struct("=Hi")
_BURST = 64  # events read per look, at most (a reconnecting socket makes a few per attempt)


class Monitor:
    """Handshake events of ``socket`` (attached before it connects), as a :class:`HandshakeWatch`."""

    def __init__(self, socket: zmq.Socket[Any], endpoint: str, transport: str, curve: bool) -> None:
        self.watch = HandshakeWatch(endpoint, transport, curve)
        address = f"inproc://generaldomo-monitor-{os.urandom(8).hex()}"
        socket.monitor(address, WATCHED)
        self.socket: zmq.Socket[Any] = socket.context.socket(zmq.PAIR)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.connect(address)
        self._watched = socket

    def read(self) -> bool:
        """Feed the watch the events waiting now; True if there were any."""
        any_read = False
        for _ in range(_BURST):
            try:
                frames = self.socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            any_read = True
            if len(frames) == 2 and len(frames[0]) == _EVENT.size:
                self.watch.feed(*_EVENT.unpack(frames[0]))
        return any_read

    def close(self) -> None:
        """Stop monitoring and close the monitor's socket (before the watched socket closes)."""
        try:
            self._watched.disable_monitor()
        except zmq.ZMQError:
            pass  # the context is terminated: nothing is monitored any more
        self.socket.close(0)


def attach(socket: zmq.Socket[Any], endpoint: str, transport: str, curve: bool) -> Monitor | None:
    """A monitor for a peer socket about to connect to ``endpoint``; None for ``inproc://`` (no handshake)."""
    if endpoint.startswith("inproc://"):
        return None
    return Monitor(socket, endpoint, transport, curve)

"""A peer's connection to the broker that any thread may send on.

This module owns the client and worker side of the transports. Each connection is read by exactly one IO
thread, which polls :attr:`Connection.poll_items`, and may be written by any thread through
:meth:`Connection.send`:

- ``server`` transport: a CLIENT socket (draft API). It is thread-safe, so ``send`` writes to it directly
  from the calling thread, frames packed by :mod:`generaldomo.sansio.codec`.
- ``router`` transport: a DEALER socket, which must stay on one thread. ``send`` from the IO thread writes
  directly; from any other thread it queues the frames and wakes the IO thread through a pipe.

Sends never block the caller. A message the socket cannot take now (its queue is full, or over inproc the
broker is gone) waits in an outbox that the IO thread writes out in :meth:`Connection.flush`, in order; the
IO thread polls again soon while the outbox is not empty (:attr:`Connection.backlogged`). It knows nothing
of the protocol carried.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Sequence
from typing import ClassVar

import zmq

from generaldomo.io.transport import Transport, connect_target, require_draft
from generaldomo.sansio import codec


class Connection:
    """One socket connected to a broker endpoint; see the module docstring."""

    transport: ClassVar[Transport]
    thread_safe_socket = False

    def __init__(self, context: zmq.Context, endpoint: str, socket_type: int) -> None:
        self.endpoint = endpoint
        self.context = context
        self.socket: zmq.Socket = context.socket(socket_type)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.connect(connect_target(self.transport, endpoint))
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        os.set_blocking(self._wake_write, False)
        self.poll_items: list[zmq.Socket | int] = [self.socket, self._wake_read]
        self._outbox: deque[Sequence[bytes]] = deque()
        self._owner: int | None = None
        self._lock = threading.Lock()
        self._closed = False

    def adopt(self) -> zmq.Poller:
        """Make the calling thread this connection's IO thread; return a poller over what that thread watches."""
        self._owner = threading.get_ident()
        poller = zmq.Poller()
        for item in self.poll_items:
            poller.register(item, zmq.POLLIN)
        return poller

    def reopen(self) -> Connection:
        """Close this connection and return a new one, on a new socket, to the same endpoint (IO thread only).

        The caller adopts the new one; what the old one had queued is dropped."""
        fresh = type(self)(self.context, self.endpoint)
        self.close()
        return fresh

    def wake(self) -> None:
        """Make the IO thread's poll return; callable from any thread."""
        with self._lock:
            if self._closed:
                return
            try:
                os.write(self._wake_write, b"\0")
            except BlockingIOError:
                pass  # the pipe is full of wake-ups already

    @property
    def backlogged(self) -> bool:
        """True while messages wait for the socket to take them."""
        return bool(self._outbox)

    def send(self, frames: Sequence[bytes]) -> None:
        """Send ``frames`` to the broker, or queue them; callable from any thread. Dropped once closed."""
        own = threading.get_ident() == self._owner
        if self._put(frames, direct=own or self.thread_safe_socket) and not own:
            self.wake()  # the IO thread writes what was queued

    def write(self, frames: Sequence[bytes]) -> None:
        """Send ``frames`` from the thread that has the socket to itself right now: the IO thread, or a thread
        the IO thread lent the socket to across a lock. Queued if the socket cannot take them now."""
        self._put(frames, direct=True)

    def _put(self, frames: Sequence[bytes], direct: bool) -> bool:
        """Write ``frames`` now if ``direct`` and nothing waits before them, else queue them; True if queued."""
        with self._lock:
            if self._closed:
                return False
            if direct and not self._outbox and self._write(frames):
                return False
            self._outbox.append(frames)
            return True

    def _write(self, frames: Sequence[bytes]) -> bool:
        """Hand ``frames`` to the socket without blocking; False if it cannot take them now."""
        raise NotImplementedError

    def recv(self) -> list[bytes] | None:
        """The next message without blocking, or None (IO thread only)."""
        raise NotImplementedError

    def flush(self) -> None:
        """Consume wake-ups and write queued messages in order, as far as the socket takes them (IO thread)."""
        try:
            os.read(self._wake_read, 4096)
        except BlockingIOError:
            pass
        outbox = self._outbox
        while outbox and self._write(outbox[0]):
            outbox.popleft()

    def close(self, linger_ms: int = 0) -> None:
        """Write what the socket takes of the outbox, then close; later sends are dropped (IO thread only)."""
        self.flush()
        with self._lock:
            self._closed = True
            self.socket.close(linger=linger_ms)
            os.close(self._wake_read)
            os.close(self._wake_write)


class ClientSocketConnection(Connection):
    """``server`` transport: a thread-safe CLIENT socket."""

    transport = Transport.SERVER
    thread_safe_socket = True

    def __init__(self, context: zmq.Context, endpoint: str) -> None:
        require_draft()
        super().__init__(context, endpoint, zmq.CLIENT)

    def _write(self, frames: Sequence[bytes]) -> bool:
        try:
            self.socket.send(codec.encode(frames), zmq.NOBLOCK)
        except zmq.Again:
            return False
        return True

    def recv(self) -> list[bytes] | None:
        while True:
            try:
                data = self.socket.recv(zmq.NOBLOCK)
            except zmq.Again:
                return None
            try:
                return codec.decode(data)
            except codec.CodecError:
                continue  # the broker never sends this; skip rather than stop the IO thread


class DealerConnection(Connection):
    """``router`` transport: a DEALER socket owned by the IO thread."""

    transport = Transport.ROUTER

    def __init__(self, context: zmq.Context, endpoint: str) -> None:
        super().__init__(context, endpoint, zmq.DEALER)

    def _write(self, frames: Sequence[bytes]) -> bool:
        try:
            self.socket.send_multipart(frames, zmq.NOBLOCK)
        except zmq.Again:
            return False
        return True

    def recv(self) -> list[bytes] | None:
        try:
            return self.socket.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            return None


CONNECTIONS: dict[Transport, type[ClientSocketConnection | DealerConnection]] = {
    Transport.SERVER: ClientSocketConnection,
    Transport.ROUTER: DealerConnection,
}


def connect(endpoint: str, transport: str | Transport, context: zmq.Context | None = None) -> Connection:
    """Connect to a broker's ``endpoint`` over ``transport`` (``router`` or ``server``)."""
    return CONNECTIONS[Transport.of(transport)](context or zmq.Context.instance(), endpoint)

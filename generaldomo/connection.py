"""A peer's connection to the broker that any thread may send on.

This module owns the client and worker side of the transports. Each connection is read by exactly one IO
thread, which polls :attr:`Connection.poll_items`, and may be written by any thread through
:meth:`Connection.send`:

- ``server`` transport: a CLIENT socket (draft API). It is thread-safe, so ``send`` writes to it directly
  from the calling thread, frames packed by :mod:`generaldomo.codec`.
- ``router`` transport: a DEALER socket, which must stay on one thread. ``send`` from the IO thread writes
  directly; from any other thread it queues the frames and wakes the IO thread through a pipe, and the IO
  thread writes them in :meth:`Connection.flush`.

It knows nothing of the protocol carried.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Sequence

import zmq

from generaldomo import codec
from generaldomo.links import require_draft

class Connection:
    """One socket connected to a broker endpoint; see the module docstring."""

    def __init__(self, context: zmq.Context, endpoint: str, socket_type: int) -> None:
        self.endpoint = endpoint
        self.socket: zmq.Socket = context.socket(socket_type)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.connect(endpoint)
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        os.set_blocking(self._wake_write, False)
        self.poll_items: list[zmq.Socket | int] = [self.socket, self._wake_read]
        self._owner: int | None = None
        self._pipe_lock = threading.Lock()
        self._closed = False

    def bind_thread(self) -> None:
        """Declare the calling thread the IO thread."""
        self._owner = threading.get_ident()

    def wake(self) -> None:
        """Make the IO thread's poll return; callable from any thread."""
        with self._pipe_lock:
            if self._closed:
                return
            try:
                os.write(self._wake_write, b"\0")
            except BlockingIOError:
                pass  # the pipe is full of wake-ups already

    def send(self, frames: Sequence[bytes]) -> None:
        """Send ``frames`` to the broker; callable from any thread."""
        raise NotImplementedError

    def recv(self) -> list[bytes] | None:
        """The next message without blocking, or None (IO thread only)."""
        raise NotImplementedError

    def flush(self) -> None:
        """Consume wake-ups and write what other threads queued (IO thread only)."""
        try:
            os.read(self._wake_read, 4096)
        except BlockingIOError:
            pass

    def close(self, linger_ms: int = 0) -> None:
        """Close the socket (IO thread only)."""
        self.socket.close(linger=linger_ms)
        with self._pipe_lock:
            self._closed = True
            os.close(self._wake_read)
            os.close(self._wake_write)


class ClientSocketConnection(Connection):
    """``server`` transport: a thread-safe CLIENT socket."""

    def __init__(self, context: zmq.Context, endpoint: str) -> None:
        require_draft()
        super().__init__(context, endpoint, zmq.CLIENT)

    def send(self, frames: Sequence[bytes]) -> None:
        self.socket.send(codec.encode(frames))

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
    """``router`` transport: a DEALER socket owned by the IO thread, fed by other threads through a queue."""

    def __init__(self, context: zmq.Context, endpoint: str) -> None:
        super().__init__(context, endpoint, zmq.DEALER)
        self._outbox: deque[Sequence[bytes]] = deque()

    def send(self, frames: Sequence[bytes]) -> None:
        if threading.get_ident() == self._owner:
            self.socket.send_multipart(frames)
            return
        self._outbox.append(frames)
        self.wake()

    def recv(self) -> list[bytes] | None:
        try:
            return self.socket.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            return None

    def flush(self) -> None:
        super().flush()
        outbox = self._outbox
        while outbox:
            self.socket.send_multipart(outbox.popleft())

    def close(self, linger_ms: int = 0) -> None:
        self.flush()
        super().close(linger_ms)


def connect(endpoint: str, transport: str, context: zmq.Context | None = None) -> Connection:
    """Connect to a broker's ``endpoint`` over ``transport`` (``router`` or ``server``)."""
    context = context or zmq.Context.instance()
    if transport == "server":
        return ClientSocketConnection(context, endpoint)
    if transport == "router":
        return DealerConnection(context, endpoint)
    raise ValueError(f"unknown transport {transport!r}; choose router or server")

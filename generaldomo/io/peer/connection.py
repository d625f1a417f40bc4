"""A peer's connection to the broker that any thread may send on, and the channel a peer's IO thread drives.

This module owns the client and worker side of the transports, and is the one place a peer's socket lives:
a :class:`BrokerChannel` holds the :class:`Connection` (replaced when the session says Reconnect) and carries
out the session's ToBroker and Reconnect actions. Each connection is read by exactly one IO thread, which polls
:attr:`Connection.poll_items`, and may be written by any thread through :meth:`Connection.send`:

- ``server`` transport: a CLIENT socket (draft API). It is thread-safe, so ``send`` writes to it directly
  from the calling thread, frames packed by :mod:`generaldomo.sansio.wire.codec`.
- ``router`` transport: a DEALER socket, which is not thread-safe but may be used by any thread that holds
  the connection's lock (a lock is a full memory barrier, which is what libzmq asks of a socket that changes
  threads). Every use of it is under that lock, so ``send`` writes directly from the calling thread too; the
  IO thread polls the socket's ``ZMQ_FD`` instead of the socket, checks ``ZMQ_EVENTS`` before it blocks, and
  a sender that finds a message waiting after its write kicks the reader, since its write may have taken the
  signal the reader waits for (the FD is edge-triggered). No thread hand-off per request.

Reading may be lent: a thread that holds the peer's reader role (the IO thread, or a caller waiting for its
reply, see :mod:`generaldomo.peers.client_io`) waits with :meth:`Connection.wait_readable` and reads with
:meth:`Connection.recv_batch`; kicks come through a pipe of their own (:meth:`Connection.consume_kicks`), so
the IO thread's wake-ups (:meth:`Connection.wake`) are never taken by a lent reader.

Sends never block the caller. A message the socket cannot take now (its queue is full, or over inproc the
broker is gone) waits in an outbox that the IO thread writes out in :meth:`Connection.flush`, in order; the
IO thread polls again soon while the outbox is not empty (:attr:`Connection.backlogged`). With CURVE
(:class:`Curve`) the socket authenticates the broker by its public key and encrypts. With the C accelerator
(:mod:`generaldomo.io.speedups`) a batch of messages is read, and a message written, in one call each; the
pure-Python path does the same frame by frame. It knows nothing of the protocol carried.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar

import attrs
import zmq

import generaldomo.errors as errors
from generaldomo.io import endpoints, speedups
from generaldomo.io.peer import monitor
from generaldomo.io.peer.locator import Locator, Target, Where
from generaldomo.io.transport import Transport, connect_target, require_draft
from generaldomo.io.waiter import waiter
from generaldomo.sansio.peer.handshake import HandshakeWatch
from generaldomo.sansio.peer.session import Action, Reconnect, ToBroker
from generaldomo.sansio.wire import codec

__all__ = [
    "CONNECTIONS",
    "CURVE_KEY_SIZES",
    "BrokerChannel",
    "ClientSocketConnection",
    "Connection",
    "Curve",
    "DealerConnection",
    "connect",
    "curve_key",
]

log = logging.getLogger(__name__)
_NOBLOCK = int(zmq.NOBLOCK)
_MORE = int(zmq.SNDMORE) | _NOBLOCK
_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)
_send = zmq.backend.Socket.send  # called unbound: no Python wrapper per frame
_NO_LIMIT = sys.maxsize  # the accelerator's batch reads: no frame or byte limit on what the broker sends
_BATCH_BYTES = 1 << 20  # a batch read stops once it holds this many bytes
_get = zmq.backend.Socket.get  # called unbound: no enum member per call
CURVE_KEY_SIZES = (32, 40)  # raw bytes, or Z85 text
_FAREWELL_LINGER_MS = 200  # how long a closing socket keeps trying to send its farewell (a worker's DISCONNECT)


def curve_key(key: str | bytes) -> bytes:
    """A CURVE key as libzmq takes it: 32 raw bytes or 40 characters of Z85 text; ``ValueError`` otherwise."""
    raw = key.encode("ascii") if isinstance(key, str) else bytes(key)
    if len(raw) not in CURVE_KEY_SIZES:
        raise ValueError(f"a CURVE key is 32 raw bytes or 40 characters of Z85 text, not {len(raw)} bytes")
    return raw


@attrs.frozen
class Curve:
    """CURVE settings of a peer socket: the broker's public key and this peer's key pair."""

    server_key: bytes = attrs.field(converter=curve_key)
    public_key: bytes = attrs.field(converter=curve_key)
    secret_key: bytes = attrs.field(converter=curve_key, repr=False)

    @classmethod
    def of(cls, server_key: str | bytes | None, keys: tuple[str | bytes, str | bytes] | None) -> Curve | None:
        """CURVE for ``server_key`` (None: no CURVE), with ``keys`` ``(public, secret)`` or a fresh pair."""
        if server_key is None:
            if keys is not None:
                raise ValueError("keys without server_key: CURVE needs the broker's public key")
            return None
        if not zmq.has("curve"):
            raise RuntimeError(f"this libzmq ({zmq.zmq_version()}) was built without CURVE")
        public, secret = keys if keys is not None else zmq.curve_keypair()
        return cls(server_key, public, secret)

    def apply(self, socket: zmq.Socket[Any]) -> None:
        """Set the socket's CURVE options (before it connects)."""
        socket.setsockopt(zmq.CURVE_SERVERKEY, self.server_key)
        socket.setsockopt(zmq.CURVE_PUBLICKEY, self.public_key)
        socket.setsockopt(zmq.CURVE_SECRETKEY, self.secret_key)


class Connection:
    """One socket connected to a broker endpoint; see the module docstring."""

    transport: ClassVar[Transport]
    thread_safe_socket = False

    def __init__(self, context: zmq.Context[Any], endpoint: str, socket_type: int, curve: Curve | None) -> None:
        self.endpoint = endpoints.check(endpoint, bind=False)
        self.context = context
        self.curve = curve
        self.socket: zmq.Socket[Any] = context.socket(socket_type)
        self.socket.setsockopt(zmq.LINGER, 0)
        if curve is not None:
            curve.apply(self.socket)
        self.monitor = monitor.attach(self.socket, endpoint, self.transport.value, curve is not None)
        self.socket.connect(connect_target(self.transport, endpoint))
        self._native = speedups.native  # a message in one call each way (None: frame by frame in Python)
        self._handle: int = self.socket.underlying
        self._wake_read, self._wake_write = _pipe()
        self._kick_read, self._kick_write = _pipe()  # wakes whoever waits for the socket (the reader)
        self.readable_item: zmq.Socket[Any] | int = self.socket
        self.kick_item, self.wake_item = self._kick_read, self._wake_read  # as the poll reports them
        self.poll_items: list[zmq.Socket[Any] | int] = [self.socket, self._kick_read, self._wake_read]
        self._outbox: deque[Sequence[bytes]] = deque()
        self._owner: int | None = None
        # reentrant: a signal handler (Worker.stop) may wake the IO thread while that thread holds the lock
        self._lock = threading.RLock()
        self._closed = False
        self._polling = 0  # threads (about to be) blocked polling the socket: the reader, or the IO thread
        self._reader_poller: zmq.Poller | None = None
        # what a reader waits on when it is file descriptors alone (readable, kick), which the accelerator polls:
        # no socket handle that could outlive its socket
        self._reader_fds: tuple[int, int] | None = None

    def adopt(self) -> zmq.Poller:
        """Make the calling thread this connection's IO thread; return a poller over what that thread watches."""
        self._owner = threading.get_ident()
        poller = zmq.Poller()
        for item in self.poll_items:
            poller.register(item, zmq.POLLIN)
        return poller

    def reopen(self, endpoint: str, curve: Curve | None, linger_ms: int = 0) -> Connection:
        """Close this connection and return a new one, on a new socket, to ``endpoint`` with ``curve`` (IO thread
        only). The caller adopts the new one; what the old one had queued is dropped after ``linger_ms``."""
        fresh = CONNECTIONS[self.transport](self.context, endpoint, curve)
        self.close(linger_ms)
        return fresh

    def begin_wait(self) -> bool:
        """A thread is about to poll the socket (:attr:`poll_items`): True if it must not block (a message may
        be waiting that the poll would not show); otherwise it is counted as blocked until :meth:`end_wait`,
        which only a False answer calls for (an unmatched call would hide the next blocked poll from senders)."""
        return False

    def end_wait(self) -> None:
        """That poll returned."""

    def wait_readable(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a message, or a kick (the reader role's holder, any thread);
        True if kicked (then :meth:`consume_kicks`)."""
        waited = self._reader_fds
        if waited is not None and self._native is not None:  # the accelerator's poll: a bit mask, no lists
            if self.begin_wait():
                return False
            try:
                return bool(self._native.poll((), waited, math.ceil(max(0.0, timeout) * 1000)) & 2)
            finally:
                self.end_wait()
        if self._reader_poller is None:
            self._reader_poller = zmq.Poller()
            self._reader_poller.register(self.readable_item, zmq.POLLIN)
            self._reader_poller.register(self._kick_read, zmq.POLLIN)
        if self.begin_wait():
            return False
        try:
            events = self._reader_poller.poll(math.ceil(max(0.0, timeout) * 1000))
        finally:
            self.end_wait()
        for item, _ in events:
            if item == self.kick_item:
                return True
        return False

    def kick(self) -> None:
        """Make the reader's wait return (lock held, or any thread)."""
        if not self._closed:
            with contextlib.suppress(BlockingIOError):  # kicked already
                os.write(self._kick_write, b"\0")

    def consume_kicks(self) -> None:
        """Empty the kick pipe (the reader, before it reads)."""
        with self._lock:
            if not self._closed:
                with contextlib.suppress(BlockingIOError):
                    os.read(self._kick_read, 4096)

    def wake(self) -> None:
        """Make the IO thread's poll return; callable from any thread and from a signal handler."""
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

    def recv_batch(self, limit: int) -> list[list[bytes]]:
        """Up to ``limit`` messages waiting now (the reader)."""
        batch: list[list[bytes]] = []
        while len(batch) < limit and (frames := self.recv()) is not None:
            batch.append(frames)
        return batch

    def flush(self, woken: bool = True) -> None:
        """Consume wake-ups (if ``woken``: the wake-up pipe was readable) and write queued messages in order, as
        far as the socket takes them (IO thread)."""
        with self._lock:
            if woken:
                self._consume_wakeups()
        self._write_outbox()

    def _consume_wakeups(self) -> None:
        """Empty the wake-up pipe (lock held)."""
        if self._closed:
            return
        try:
            os.read(self._wake_read, 4096)
        except BlockingIOError:
            pass

    def _write_outbox(self) -> None:
        outbox = self._outbox
        while outbox and self._write(outbox[0]):
            outbox.popleft()

    def close(self, linger_ms: int = 0) -> None:
        """Write what the socket takes of the outbox, then close; later sends are dropped (IO thread only)."""
        with contextlib.suppress(zmq.ZMQError):  # a terminated context takes nothing more
            self.flush()
        with self._lock:
            self._closed = True
            if self.monitor is not None:
                self.monitor.close()
            self.socket.close(linger=linger_ms)
            for fd in (self._wake_read, self._wake_write, self._kick_read, self._kick_write):
                os.close(fd)


def _sent(code: int) -> bool:
    """Whether the accelerator's send took the message: False when the queue is full, an error otherwise."""
    if code and code != zmq.EAGAIN:
        raise zmq.ZMQError(code)
    return not code


def _pipe() -> tuple[int, int]:
    """A non-blocking pipe: (read end, write end)."""
    read, write = os.pipe()
    os.set_blocking(read, False)
    os.set_blocking(write, False)
    return read, write


class ClientSocketConnection(Connection):
    """``server`` transport: a thread-safe CLIENT socket."""

    transport = Transport.SERVER
    thread_safe_socket = True

    def __init__(self, context: zmq.Context[Any], endpoint: str, curve: Curve | None = None) -> None:
        require_draft()
        super().__init__(context, endpoint, zmq.CLIENT, curve)
        if not speedups.native_draft:
            self._native = None

    def _write(self, frames: Sequence[bytes]) -> bool:
        if self._native is not None:
            return _sent(self._native.server_send(self._handle, 0, frames))  # 0: no routing id (a CLIENT)
        try:
            _send(self.socket, codec.encode(frames), _NOBLOCK)
        except zmq.Again:
            return False
        return True

    def recv(self) -> list[bytes] | None:
        batch = self.recv_batch(1)
        return batch[0] if batch else None

    def recv_batch(self, limit: int) -> list[list[bytes]]:
        if self._native is not None:  # parts that do not unpack are skipped, as below
            got = self._native.server_recv(self._handle, limit, _NO_LIMIT, _BATCH_BYTES)
            return [frames for _, frames in got if type(frames) is list]
        batch: list[list[bytes]] = []
        recv = self.socket.recv
        for _ in range(limit):
            try:
                data = recv(_NOBLOCK)
            except zmq.Again:
                break
            try:
                batch.append(codec.decode(data))
            except errors.CodecError:
                continue  # the broker never sends this; skip rather than stop the IO thread
            if len(batch) == limit or (len(batch) == 1 and not int(_get(self.socket, _EVENTS)) & _POLLIN):
                break  # one message per wake-up (sync): EVENTS costs less than the EAGAIN that ends a drain
        return batch


class DealerConnection(Connection):
    """``router`` transport: a DEALER socket, used only under the connection's lock (see the module docstring)."""

    transport = Transport.ROUTER
    thread_safe_socket = True  # through the lock

    def __init__(self, context: zmq.Context[Any], endpoint: str, curve: Curve | None = None) -> None:
        super().__init__(context, endpoint, zmq.DEALER, curve)
        self.readable_item = int(self.socket.getsockopt(zmq.FD))
        self.poll_items = [self.readable_item, self._kick_read, self._wake_read]
        self._reader_fds = (self.readable_item, self._kick_read)

    def send(self, frames: Sequence[bytes]) -> None:
        if threading.get_ident() == self._owner:
            self._put(frames, direct=True)
            return
        with self._lock:
            if self._closed:
                return
            written = not self._outbox and self._write(frames)
            if not written:
                self._outbox.append(frames)
            if written and self._polling and self._readable():
                self.kick()  # the reader reads what our write took the signal of
        if not written:
            self.wake()  # the IO thread writes the queue

    def begin_wait(self) -> bool:
        with self._lock:
            if self._closed or self._readable():
                return True
            self._polling += 1  # from now on a sender checks for what its write may have signalled
            return False

    def end_wait(self) -> None:
        with self._lock:
            self._polling -= 1

    def _readable(self) -> bool:
        """A message is waiting (lock held, socket open)."""
        if self._native is not None:  # one C call; pyzmq's EVENTS is an enum member made per call
            return bool(self._native.readable(self._handle))
        return bool(int(_get(self.socket, _EVENTS)) & _POLLIN)

    def flush(self, woken: bool = True) -> None:
        with self._lock:
            if woken:
                self._consume_wakeups()
            if not self._closed and self._outbox:
                self._write_outbox()  # under the lock: the socket is used only under it
                if self._polling and self._readable():
                    self.kick()  # a lent reader polls: these writes may have taken its signal

    # Frame by frame with int flags, the backend's ``send`` called unbound, zero-copy frames carrying ``more``:
    # the ROUTER link's tricks (bench/README.md), fewer Python calls per frame than pyzmq's multipart helpers.

    def _write(self, frames: Sequence[bytes]) -> bool:
        if self._native is not None:  # (_sent inlined: the hot path)
            code = self._native.send_multipart(self._handle, frames)
            if code and code != zmq.EAGAIN:
                raise zmq.ZMQError(code)
            return not code
        socket, last = self.socket, len(frames) - 1
        try:
            _send(socket, frames[0], _MORE if last else _NOBLOCK)
        except zmq.Again:
            return False
        for index in range(1, last + 1):  # the rest of a message whose first frame went: never EAGAIN
            _send(socket, frames[index], _MORE if index < last else _NOBLOCK)
        return True

    def recv(self) -> list[bytes] | None:
        batch = self.recv_batch(1)
        return batch[0] if batch else None

    def recv_batch(self, limit: int) -> list[list[bytes]]:
        batch: list[list[bytes]] = []
        with self._lock:
            if self._closed:
                return batch
            if self._native is not None:  # without limits a batch holds messages only
                got: list[list[bytes]] = self._native.router_recv(
                    self._handle, limit, _NO_LIMIT, _NO_LIMIT, _BATCH_BYTES
                )
                return got  # (annotated, not cast(): a call and two generic aliases less per read)
            recv = self.socket.recv
            while len(batch) < limit:
                try:
                    frame = recv(_NOBLOCK, copy=False)
                except zmq.Again:
                    break
                frames = [frame.bytes]
                while frame.more:  # the rest of a message that has begun is there
                    frame = recv(_NOBLOCK, copy=False)
                    frames.append(frame.bytes)
                batch.append(frames)
                if len(batch) == limit or (len(batch) == 1 and not self._readable()):
                    break  # one message per wake-up (sync): EVENTS costs less than the EAGAIN that ends a drain
        return batch


CONNECTIONS: dict[Transport, type[ClientSocketConnection | DealerConnection]] = {
    Transport.SERVER: ClientSocketConnection,
    Transport.ROUTER: DealerConnection,
}


def connect(
    endpoint: str, transport: str | Transport, context: zmq.Context[Any] | None = None, curve: Curve | None = None
) -> Connection:
    """Connect to a broker's ``endpoint`` over ``transport`` (``router`` or ``server``)."""
    return CONNECTIONS[Transport.of(transport)](context or zmq.Context.instance(), endpoint, curve)


class BrokerChannel:
    """A Client's or Worker's connection to its broker, as the thread that has the socket drives it.

    That thread (the IO thread, or one it lent the socket to across a lock) waits on the channel, reads it and
    carries out the session's actions through :meth:`perform`; any thread may :meth:`send` and :meth:`wake`.
    """

    def __init__(
        self, where: str | Sequence[str] | Where | Locator | None, transport: str | Transport,
        context: zmq.Context[Any], curve: Curve | None,
    ) -> None:  # fmt: skip
        """``where``: an endpoint, several (tried in turn on silence), a :class:`~generaldomo.io.peer.locator.Where`
        (an address file, a beacon), a live Locator, or None (as :meth:`Where.of` says); ``curve``: the peer's
        CURVE settings (a broker key that comes with a target, under ``trust_announced_key``, replaces their
        server key)."""
        self.transport = Transport.of(transport)
        self.locator = where if isinstance(where, Locator) else Locator(Where.of(where), self.transport)
        self._curve = curve  # the peer's own
        target = self.locator.target
        self.connection = connect(target.endpoint, self.transport, context, self._curve_for(target))
        self.reconnects = 0
        # what the IO thread waits on when it reads, and when it lent the reader role: functions of a timeout that
        # give the ready ones as bits (broker.waiter: the accelerator's poll, or pyzmq's); the bits that matter
        self._wait: Callable[[int], int] | None = None
        self._wait_lent: Callable[[int], int] | None = None
        self._bits: tuple[int, int, int] = (0, 0, 0)  # (kick, wake, monitor)
        self._bits_lent: tuple[int, int, int] = (0, 0, 0)  # (no kick pipe polled, wake, monitor)
        self._monitored = False  # the last wait saw monitor events

    @property
    def endpoint(self) -> str:
        """The endpoint the channel is connected (or connecting) to now."""
        return self.connection.endpoint

    def _curve_for(self, target: Target) -> Curve | None:
        """CURVE for ``target``: the peer's own settings, with the broker key the target came with if any."""
        if target.server_key is None:
            return self._curve
        if self._curve is None:
            return Curve.of(target.server_key, None)  # a fresh key pair for a broker announced as CURVE
        return attrs.evolve(self._curve, server_key=target.server_key)

    @property
    def next_look(self) -> float | None:
        """When :meth:`moved` next looks at where the broker is (None: never)."""
        return self.locator.next_look

    def moved(self, now: float) -> bool:
        """True when the broker's address file says it is elsewhere now: the peer's session then reconnects (see
        :meth:`perform`), which goes to the new place."""
        return self.locator.moved(now)

    def adopt(self) -> None:
        """Make the calling thread the IO thread."""
        connection = self.connection
        connection.adopt()  # (its poller is for simpler users: cli.probe)
        watched = connection.monitor
        monitors: list[zmq.Socket[Any]] = [] if watched is None else [watched.socket]
        items = connection.poll_items
        sockets = [item for item in items if isinstance(item, zmq.Socket)] + monitors
        fds = tuple(item for item in items if isinstance(item, int))
        order: list[object] = [*sockets, *fds]
        self._wait = waiter(sockets, fds)
        self._wait_lent = waiter(monitors, (connection.wake_item,))
        kick, wake = 1 << order.index(connection.kick_item), 1 << order.index(connection.wake_item)
        self._bits = (kick, wake, 1 << (len(sockets) - 1) if watched is not None else 0)
        self._bits_lent = (0, 1 << len(monitors), 1 if watched is not None else 0)

    @property
    def handshake(self) -> HandshakeWatch | None:
        """What the socket monitor says of the current connection (None: not monitored, e.g. inproc)."""
        watched = self.connection.monitor
        return None if watched is None else watched.watch

    def handshake_news(self) -> HandshakeWatch | None:
        """The :attr:`handshake` watch if the last :meth:`wait` brought monitor events (read now), else None."""
        watched = self.connection.monitor
        if not self._monitored or watched is None:
            return None
        self._monitored = False
        return watched.watch if watched.read() else None

    @property
    def backlogged(self) -> bool:
        """True while messages wait for the socket to take them."""
        return self.connection.backlogged

    def wait(self, deadline: float | None, now: float, reading: bool = True, kicks: bool = True) -> None:
        """Poll until a message comes (if ``reading``: the IO thread holds the reader role), a wake-up, or
        ``deadline`` (None: no deadline); then flush, and empty the kick pipe if ``kicks`` (IO thread)."""
        assert self._wait is not None and self._wait_lent is not None, "adopt() first"
        if self.connection.backlogged:
            timeout = 10
        else:
            timeout = -1 if deadline is None else math.ceil(max(0.0, deadline - now) * 1000)
        connection = self.connection
        if not reading:
            ready = self._wait_lent(timeout)
            kick, wake, monitor = self._bits_lent
        else:
            kick, wake, monitor = self._bits
            if connection.begin_wait():  # a message waits: look without blocking (and without end_wait)
                ready = self._wait(0)
            else:
                try:
                    ready = self._wait(timeout)
                finally:
                    connection.end_wait()
        self._monitored = bool(ready & monitor)
        if kicks and ready & kick:
            connection.consume_kicks()
        connection.flush(bool(ready & wake))

    def wait_readable(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a message or a kick (the reader role's holder, any thread); True
        if kicked."""
        return self.connection.wait_readable(timeout)

    def consume_kicks(self) -> None:
        """Empty the kick pipe (the reader role's holder, before it reads)."""
        self.connection.consume_kicks()

    def recv(self) -> list[bytes] | None:
        """The next message without blocking, or None (IO thread)."""
        return self.connection.recv()

    def recv_batch(self, limit: int) -> list[list[bytes]]:
        """Up to ``limit`` messages waiting now (the reader role's holder)."""
        return self.connection.recv_batch(limit)

    def send(self, frames: Sequence[bytes]) -> None:
        """Send from any thread (see :meth:`Connection.send`)."""
        self.connection.send(frames)

    def wake(self) -> None:
        """Make the IO thread's wait return; callable from any thread."""
        self.connection.wake()

    def perform(self, actions: Iterable[Action[Any]]) -> list[Action[Any]]:
        """Carry out ToBroker and Reconnect in order (from the thread that has the socket); return the others."""
        rest: list[Action[Any]] = []
        for action in actions:
            if isinstance(action, ToBroker):
                self.connection.write(action.frames)
            elif isinstance(action, Reconnect):
                watch = self.handshake  # a broker never reached is the callers' to report, not one line per peer
                level = logging.INFO if watch is not None and not watch.ever_succeeded else logging.WARNING
                proven = watch is None or watch.ever_succeeded  # (inproc is not monitored: nothing to prove)
                if action.silent:
                    target = self.locator.advance(proven)
                else:
                    self.locator.left(proven)
                    target = self.locator.target
                log.log(level, "%s; reconnecting to %s", action.reason, target.endpoint)
                self.reconnects += 1
                if action.farewell:  # on the old socket, for a broker that may still hear it
                    self.connection.write(action.farewell)
                linger = _FAREWELL_LINGER_MS if action.farewell else 0
                self.connection = self.connection.reopen(target.endpoint, self._curve_for(target), linger)
                self.adopt()
            else:
                rest.append(action)
        return rest

    def close(self, linger_ms: int = 0) -> None:
        """Close the socket (IO thread), and stop following the broker."""
        self.connection.close(linger_ms)
        self.locator.close()

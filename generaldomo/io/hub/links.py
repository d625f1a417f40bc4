"""Links: the only broker code that touches sockets.

A link owns one bound socket and turns what arrives on it into ``(address, frames, credential)`` and back.
``RouterLink`` uses a ROUTER socket: the address is the peer's identity frame, or the whole envelope of a peer
behind ROUTER/DEALER proxies (:mod:`generaldomo.sansio.wire.envelope`), and frames pass as they are, so Majordomo
peers work unchanged. ``ServerLink`` uses a SERVER socket (draft API): the address is the peer's routing id and
the frames travel packed in one message part by :mod:`generaldomo.sansio.wire.codec`; its ``inproc://`` endpoints
are carried by :mod:`generaldomo.io.inproc`. Links know nothing of the protocol beyond the envelope rule.

Rules: a link never blocks and never lets one peer cost more than one bounded message's work. While reading it
enforces a frame-count limit and a byte limit across frames (the rest of a message beyond either is drained
without being kept, and dropped); a send to a peer whose queue is full is dropped, and so is one to a peer
that has not read too many bytes sent before (:mod:`generaldomo.io.hub.backlog`, shared by a broker's links,
which tells the links when a message must go out marked). Every drop is counted in
:attr:`Link.counters` (the broker hands them to the core's status report) and logged at most a few lines per
interval (:mod:`generaldomo.sansio.lograte`). With CURVE (:mod:`generaldomo.io.auth`) each message carries the
credential of the key that sent it, read from the message's ``User-Id`` metadata (by either path below; one
rule, :meth:`Link.credential`, maps it to the credential, and a message without one is dropped and counted).

Each link has two paths that behave alike: the C accelerator's (:mod:`generaldomo.io.speedups`: a batch of
whole messages per call, with each one's ``User-Id`` on a CURVE link) when it is built, and pure Python
otherwise. On the
accelerator's path a frame of 64 KiB or more (``KEEP``) is not copied: it arrives as a read-only memoryview of the
message libzmq received and is sent on by reference (over ROUTER; a SERVER part is one buffer, so its frames are
copied into it), so a large payload crosses the broker without a copy; ``speedups.native.traffic()`` counts the
bytes both ways.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import itertools
import logging
import os
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

import zmq
from zmq.utils.monitor import recv_monitor_message

import generaldomo.errors as errors
from generaldomo.io import inproc, speedups
from generaldomo.io.auth import BrokerSecurity
from generaldomo.io.endpoints import check as check_endpoint
from generaldomo.io.hub.backlog import MARK, SEND, Backlog, Tracker
from generaldomo.io.transport import BindError, Transport, bind, require_draft
from generaldomo.sansio.broker.access import Credential
from generaldomo.sansio.config.settings import DEFAULT_MAX_FRAMES
from generaldomo.sansio.labels import PeerLabels
from generaldomo.sansio.lograte import LogLimiter
from generaldomo.sansio.wire import codec, envelope
from generaldomo.sansio.wire.events import Frame

__all__ = [
    "BATCH_BYTES",
    "KEEP",
    "LINKS",
    "NO_LIMIT",
    "Address",
    "Link",
    "Received",
    "RouterLink",
    "ServerLink",
    "seed_routing_ids",
]

log = logging.getLogger(__name__)

NO_LIMIT = -1
_NOBLOCK = int(zmq.NOBLOCK)
_MORE = int(zmq.SNDMORE) | _NOBLOCK
_RCVMORE = int(zmq.RCVMORE)
_REFUSAL_NAMES: dict[int, str] = {
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "handshake failed (not a ZeroMQ peer, or it hung up)",
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "handshake failed: ZMTP protocol error",
    zmq.EVENT_HANDSHAKE_FAILED_AUTH: "handshake failed: authentication",
}
_REFUSALS = sum(_REFUSAL_NAMES)
_SKIPS = 64  # dropped messages one recv() call may read past before it returns None
BATCH_BYTES = 1 << 20  # a batch read stops once it holds this many bytes (plus at most one message)
KEEP = speedups.native.KEEP_MIN if speedups.native is not None else 0  # frames this large pass by reference
_TRIM_AFTER = 65536  # frames drained after which freed memory is handed back to the system
_monitors = itertools.count()
_seeded = False
_libc = ctypes.CDLL(ctypes.util.find_library("c") or None)

Address = bytes | int | tuple[bytes, ...]
Received = tuple[Address, Sequence[Frame], Credential | None]
_TOO_MANY_FRAMES = 1  # why the accelerator dropped a ROUTER message (else: too large; see _speedups.c)
_UNPACK_TOO_MANY = 1  # why a SERVER part did not unpack (else: malformed)


def seed_routing_ids() -> None:
    """Seed libc's ``rand()`` unpredictably, once per process, before the first ROUTER socket.

    libzmq starts each ROUTER's generated peer ids (``0x00`` + a 4-byte counter) at ``rand()``'s value and never
    seeds it, so every process would hand out the same ids; a peer that picks the next one as its own id makes
    an unpatched libzmq abort when that id is generated (see docs/explanation/threat-model.rst)."""
    global _seeded
    if _seeded:
        return
    _libc.srand(ctypes.c_uint(int.from_bytes(os.urandom(4), "big")))
    _seeded = True


def _native_drain() -> Any:
    """libzmq's ``zmq_generaldomo_drain`` (added by the project's libzmq build), or None with a stock libzmq."""
    try:
        from zmq.backend.cython import _zmq  # pyzmq >= 26: libzmq is linked into this extension

        drain = ctypes.CDLL(_zmq.__file__).zmq_generaldomo_drain
    except (ImportError, OSError, AttributeError):
        return None
    drain.argtypes, drain.restype = [ctypes.c_void_p], ctypes.c_long
    return drain


_NATIVE_DRAIN = _native_drain()
# The backend socket's ``send``, called unbound: the same call without the sugar layer's Python wrapper.
_send = zmq.backend.Socket.send
_poll = zmq.backend.zmq_poll  # a zero-timeout poll of one socket: whether a batch read goes on (see recv_batch)
_LOOK_EVERY = 8  # batches of one message in a row, of which one looks for more (pure path: see recv_batch)


def _user_id(frame: zmq.Frame) -> str | None:
    """The ``User-Id`` metadata of a received frame (the pure path's read; None if it has none)."""
    try:
        user = frame.get("User-Id")
    except zmq.ZMQError:
        return None
    return user if isinstance(user, str) else None


def _give_back_memory() -> None:
    """Return freed heap to the system (glibc keeps what a huge message's frames took otherwise)."""
    trim = getattr(_libc, "malloc_trim", None)
    if trim is not None:
        trim(0)


class Link:
    """A bound socket of one transport; subclasses say how addresses and frames travel."""

    transport: ClassVar[Transport]
    socket_type: ClassVar[int]
    needs_draft: ClassVar[bool] = False  # the socket type is libzmq's draft API (the accelerator's draft part too)
    frame_bytes: ClassVar[int] = 0  # bytes a frame holds in the socket beyond its own (a packed part's length)

    def __init__(
        self,
        context: zmq.Context[Any],
        endpoints: Iterable[str],
        max_message: int = NO_LIMIT,
        *,
        max_frames: int = DEFAULT_MAX_FRAMES,
        security: BrokerSecurity | None = None,
        accelerate: bool = True,
    ) -> None:
        """Bind to ``endpoints``. A message of more than ``max_frames`` frames or ``max_message`` bytes (all frames
        together) is dropped while it is read; with ``security``, only CURVE peers whose keys it lists get in.
        ``accelerate=False`` keeps this link on the pure-Python path even where the C accelerator is built."""
        if self.needs_draft:
            require_draft()
        seed_routing_ids()
        self.max_frames = max_frames
        self.max_bytes = sys.maxsize if max_message == NO_LIMIT else max_message
        self.security = security
        self.counters: Counter[str] = Counter()
        self.backlog: Backlog | None = None  # the broker's, shared by its links (None: sends are not tracked)
        self.index = 0  # this link's place among the broker's, which names its connections in the backlog
        self.labels = PeerLabels(os.urandom(16))  # how its log lines name peers: the broker gives its core's
        self.limiter = LogLimiter(log)  # one line per kind of drop per interval, then a count
        self.refusals = LogLimiter(log, burst=5)  # refused connections: a few lines, as a scan has a few
        self.socket: zmq.Socket[bytes] = context.socket(self.socket_type)
        self._poll_items = [(self.socket, int(zmq.POLLIN))]
        self._lone = 0  # batches of one message in a row (pure path: see recv_batch)
        usable = accelerate and (speedups.native_draft or not self.needs_draft)
        self._native = speedups.native if usable else None
        self._handle: int = self.socket.underlying
        try:  # a socket left open would keep the context's termination waiting for ever
            self.socket.setsockopt(zmq.LINGER, 0)
            self.socket.setsockopt(zmq.MAXMSGSIZE, max_message)  # per frame; the reading loop bounds the sum
            if security is not None:
                security.apply(self.socket)
            self.prepare()
        except BaseException:
            self.socket.close(0)
            raise
        self.endpoints: list[str] = []
        # libzmq turns away peers that do not speak ZMTP (port scans, garbage) without telling the
        # application; its monitor does, so that each refusal gets a log line.
        address = f"inproc://generaldomo-monitor-{next(_monitors)}"  # pyzmq's own naming fails on SERVER sockets
        self.socket.monitor(address, _REFUSALS)
        self.monitor: zmq.Socket[bytes] = context.socket(zmq.PAIR)
        self.monitor.connect(address)
        try:
            for endpoint in endpoints:
                self.bind(endpoint)
        except Exception:
            self.close(0)
            raise

    def bind(self, endpoint: str) -> str:
        """Bind to ``endpoint``; return the concrete endpoint (with the port a ``*`` got)."""
        bind(self.socket, self.transport, check_endpoint(endpoint, bind=True))
        concrete = self.socket.getsockopt_string(zmq.LAST_ENDPOINT)
        self.endpoints.append(concrete)
        return concrete

    def prepare(self) -> None:
        """Set the options of this kind of socket, before it binds."""

    def recv(self) -> Received | None:
        """The next acceptable message as ``(address, frames, credential)`` without blocking; None when there is
        none (or after reading past a bounded number of dropped ones)."""
        raise NotImplementedError

    def recv_batch(self, limit: int) -> list[Received]:
        """The acceptable messages waiting, up to ``limit`` (fewer once about :data:`BATCH_BYTES` were read),
        without blocking; dropped ones are counted and not returned.

        The pure-Python path reads while a zero-timeout poll of the socket says a message waits: pyzmq's
        ``EAGAIN`` (a ``zmq.Again`` raised and caught, which would end the batch otherwise) costs about 28,000
        instructions, the poll about 3,500 and two system calls, ``ZMQ_EVENTS`` through pyzmq about 10,000
        (bench/README.md). While batches hold one message each (one request at a time), only one batch in
        :data:`_LOOK_EVERY` looks: the others end after their first message, and the broker loop's next wait
        (which it makes anyway) finds any more; a look that finds more makes every batch look again."""
        if self._native is not None:
            return self._recv_native(self._accelerator(), limit)
        batch: list[Received] = []
        message = self.recv()
        if message is None:
            return batch
        batch.append(message)
        lone = self._lone
        if lone % _LOOK_EVERY:  # one message per batch lately: no look (the loop's next wait is one)
            self._lone = lone + 1
            return batch
        recv, items = self.recv, self._poll_items
        for _ in range(limit - 1):
            if not _poll(items, 0):
                break
            message = recv()
            if message is None:
                break
            batch.append(message)
        self._lone = lone + 1 if len(batch) == 1 else 0
        return batch

    def _recv_native(self, native: Any, limit: int) -> list[Received]:
        """:meth:`recv_batch` on the accelerator: a batch of whole messages in one call."""
        raise NotImplementedError

    def send(self, address: Address, frames: Sequence[Frame]) -> None:
        """Send ``frames`` to ``address``; a peer that has gone, whose queue is full, or (with a :attr:`backlog`)
        that has not read what was sent to it before, beyond its budget, is dropped (counted)."""
        backlog = self.backlog
        if backlog is None:
            self._send(address, frames)
            return
        where: tuple[int, bytes | int]
        if isinstance(address, tuple):
            where, size = (self.index, address[0]), self.size(address, frames)  # ledger.connection, inlined
        else:  # a direct peer, the common case: self.size inlined
            where, size = (self.index, address), sum(map(len, frames)) + self.frame_bytes * len(frames)
        step = backlog.route(where, size)
        if step == SEND:
            self._send(address, frames)
        elif step == MARK:
            mark = self._send_marked(address, frames)
            if mark is not None:
                backlog.marked(where, size, mark)
        else:
            unread = backlog.unread(where)
            self.drop(
                "sends_dropped_unread",
                "dropped a message to %s: %d bytes sent before unread",
                self.label(address),
                unread,
            )

    def size(self, address: Address, frames: Sequence[Frame]) -> int:
        """Bytes a message of ``frames`` to ``address`` holds in the socket: its frames' and its envelope's, and
        :attr:`frame_bytes` per frame."""
        hops = sum(map(len, address[1:])) if isinstance(address, tuple) else 0
        return hops + sum(map(len, frames)) + self.frame_bytes * len(frames)

    def _send(self, address: Address, frames: Sequence[Frame]) -> bool:
        """Send ``frames`` to ``address``; False (counted) if the socket refused them."""
        raise NotImplementedError

    def _send_marked(self, address: Address, frames: Sequence[Frame]) -> Tracker | None:
        """Send ``frames`` to ``address`` with the last frame (part) shared with libzmq and tracked: the tracker,
        done once libzmq has written it out (see :mod:`generaldomo.io.hub.backlog`); None (counted) if refused."""
        raise NotImplementedError

    def _marked(self, sent: Tracker | int, address: Address) -> Tracker | None:
        """What the accelerator's marked send gave: its tracker, or None (counted) for the errno that refused it."""
        if isinstance(sent, int):
            self.send_failed(sent, address)
            return None
        return sent

    def send_failed(self, code: int, address: Address) -> None:
        """Count (and log, rate-limited) a message to ``address`` that the socket refused with errno ``code``."""
        if code == zmq.EAGAIN:
            self.drop("sends_dropped_full", "dropped a message to %s: its queue is full", self.label(address))
        else:  # EHOSTUNREACH: the peer is gone
            self.counters["sends_dropped_gone"] += 1

    def _accelerator(self) -> Any:
        """The C accelerator if this link uses it; ENOTSOCK once the socket is closed (its handle would dangle)."""
        if self._native is not None and self.socket.closed:
            raise zmq.ZMQError(zmq.ENOTSOCK)
        return self._native

    @property
    def accelerated(self) -> bool:
        """Whether this link reads and writes through the C accelerator."""
        return self._native is not None

    def label(self, address: object) -> str:
        """The name of the peer at ``address`` in log lines: the one the core's lines and reports give it."""
        return self.labels(self.index, address)

    def take_counts(self) -> Counter[str]:
        """The drops and refusals counted since the last call."""
        counts, self.counters = self.counters, Counter()
        return counts

    def drop(self, counter: str, message: str, *args: object, limiter: LogLimiter | None = None) -> None:
        """Count a drop and log it, rate-limited for each kind (``counter``)."""
        self.counters[counter] += 1
        chosen = self.limiter if limiter is None else limiter  # (not `or`: a limiter with no windows is empty)
        chosen.line(counter, time.monotonic(), f"{self.transport} link {message}", *args)

    def credential(self, user: str | None, peer: object) -> Credential | None:
        """The credential of the key whose ``User-Id`` a message from ``peer`` carried (None, counted, if it has
        none we know): the one rule of both paths (the accelerator's reads return each message's User-Id)."""
        assert self.security is not None
        found = self.security.credential(user) if isinstance(user, str) else None
        if found is None:
            self.drop(
                "dropped_unauthenticated", "dropped a message from %s without a known CURVE key", self.label(peer)
            )
        return found

    def log_refusals(self) -> int:
        """Log (rate-limited) each connection libzmq refused since the last call; return how many."""
        refused = 0
        while True:
            try:
                event = recv_monitor_message(self.monitor, zmq.NOBLOCK)
            except zmq.Again:
                return refused
            refused += 1
            name = _REFUSAL_NAMES.get(int(event["event"]), "handshake failed")
            endpoint = bytes(event["endpoint"]).decode(errors="replace")
            self.drop("connections_refused", "refused a connection on %s: %s", endpoint, name, limiter=self.refusals)

    def close(self, linger_ms: int = 200) -> None:
        """Close the socket, giving queued messages (e.g. DISCONNECTs) ``linger_ms`` to leave."""
        self.socket.disable_monitor()
        self.monitor.close(linger=0)
        self.socket.close(linger=linger_ms)


class RouterLink(Link):
    """MDP-compatible: a ROUTER socket, frames as they are, envelopes kept as addresses."""

    transport = Transport.ROUTER
    socket_type = zmq.ROUTER

    # Frame by frame with plain int flags: pyzmq's multipart helpers cost microseconds more per frame, and so
    # does ``get(RCVMORE)`` (pyzmq 27 builds an enum member per call); a zero-copy frame carries ``more``
    # already. Sends go through the backend's ``send`` (the sugar layer adds a Python call per frame). This is
    # the hot path: see bench/README.md for the figures.

    def prepare(self) -> None:
        self.socket.setsockopt(zmq.ROUTER_MANDATORY, 1)  # so that a full or gone peer is an error we can count

    def _recv_native(self, native: Any, limit: int) -> list[Received]:
        if self.security is not None:
            return self._recv_native_secured(native, limit)
        batch: list[Received] = []
        append, split = batch.append, envelope.split
        for message in native.router_recv(self._handle, limit, self.max_frames, self.max_bytes, BATCH_BYTES, KEEP):
            if type(message) is tuple:
                self._dropped_native(*message)
                continue
            address = message[0]
            if address[0] == 0 and len(address) != 5:
                self._dropped_reserved(address)
                continue
            del message[0]
            peer, frames = split(address, message)
            append((peer, frames, None))
        return batch

    def _recv_native_secured(self, native: Any, limit: int) -> list[Received]:
        """:meth:`_recv_native` on a CURVE link: each message comes with its User-Id (last in the list; fourth in
        a dropped one's tuple), taken in the pure path's order: its credential, then the limits, then the id."""
        batch: list[Received] = []
        append, split, credential = batch.append, envelope.split, self.credential
        messages = native.router_recv(self._handle, limit, self.max_frames, self.max_bytes, BATCH_BYTES, KEEP, True)
        for message in messages:
            if type(message) is tuple:
                kind, count, address, user = message
                credential(user, address)  # (counted if it has none, as the pure path counts it first)
                self._dropped_native(kind, count, address)
                continue
            user = message.pop()
            address = message[0]
            if len(message) == 1:  # no frame after the identity, so no User-Id: the pure path skips it too
                continue
            found = credential(user, address)
            if found is None:
                continue
            if address[0] == 0 and len(address) != 5:
                self._dropped_reserved(address)
                continue
            del message[0]
            peer, frames = split(address, message)
            append((peer, frames, found))
        return batch

    def _dropped_native(self, kind: int, count: int, address: bytes) -> None:
        if kind == _TOO_MANY_FRAMES:
            self.drop("dropped_too_many_frames", "dropped a message of %d frames from %s", count, self.label(address))
            if count > _TRIM_AFTER:
                _give_back_memory()
        else:
            _give_back_memory()
            self.drop(
                "dropped_too_large",
                "dropped a message of more than %d bytes from %s",
                self.max_bytes,
                self.label(address),
            )

    def _dropped_reserved(self, address: bytes) -> None:
        self.drop(
            "dropped_reserved_id", "dropped a message from %s: ids starting with 0 are libzmq's", self.label(address)
        )

    def recv(self) -> Received | None:
        recv = self.socket.recv
        for _ in range(_SKIPS):
            try:
                head = recv(_NOBLOCK, copy=False)
            except zmq.Again:
                return None
            address = head.bytes
            frames: list[Frame] = []
            credential, more = None, head.more
            if self.security is not None and more:
                # libzmq 4.3.4 attaches the metadata to the frames the peer sent, not to the identity frame
                first = recv(_NOBLOCK, copy=False)
                credential = self.credential(_user_id(first), address)
                frames.append(first.bytes)
                more = first.more
            # the rest of the message, within the limits (inline: this loop is the pure path's hot spot)
            append = frames.append
            left = self.max_frames - len(frames)
            room = self.max_bytes - len(frames[0]) if frames else self.max_bytes
            while more and room >= 0 and left > 0:
                frame = recv(_NOBLOCK, copy=False)
                data = frame.bytes
                room -= len(data)
                append(data)
                more = frame.more
                left -= 1
            if room < 0 or more:
                self._refused(address, frames, room < 0)
                continue
            if credential is None and self.security is not None:
                continue
            if address[0] == 0 and len(address) != 5:
                self._dropped_reserved(address)
                continue
            peer, message = envelope.split(address, frames)
            return peer, message, credential
        return None

    def _refused(self, address: bytes, frames: list[Frame], too_large: bool) -> None:
        """Drop the message being read, which broke the byte limit (``too_large``) or the frame limit: drain
        its rest without keeping it, count and log it."""
        if too_large:
            frames.clear()
            self._drain()
            _give_back_memory()
            self.drop(
                "dropped_too_large",
                "dropped a message of more than %d bytes from %s",
                self.max_bytes,
                self.label(address),
            )
        else:
            count = self.max_frames + self._drain()
            self.drop("dropped_too_many_frames", "dropped a message of %d frames from %s", count, self.label(address))

    def _drain(self) -> int:
        """Read and discard the rest of the current message without copying it; return the frames read."""
        if _NATIVE_DRAIN is not None:
            count = int(_NATIVE_DRAIN(self.socket.underlying))
        else:  # the cheapest drain measured from Python: zero-copy frames and their ``more`` (bench/README.md)
            recv = self.socket.recv
            count = 0
            more = bool(self.socket.get(_RCVMORE))
            while more:
                more = recv(_NOBLOCK, copy=False).more
                count += 1
        if count > _TRIM_AFTER:
            _give_back_memory()
        return count

    def _send(self, address: Address, frames: Sequence[Frame]) -> bool:
        # The broker never sends a message without frames.
        native = self._native
        if native is not None:
            if self.socket.closed:  # (the deep check: the accelerator would use a dangling handle)
                raise zmq.ZMQError(zmq.ENOTSOCK)
            code = native.router_send(self._handle, address, frames)  # a tuple address is its route
            if code:
                self.send_failed(code, address)
            return not code
        # pure Python: pyzmq's send raises ENOTSOCK itself for a socket closed (ctx.destroy() included)
        socket, send = self.socket, _send
        if type(address) is bytes:  # a direct peer (_route inlined: the common case)
            try:
                send(socket, address, _MORE)
            except zmq.ZMQError as error:
                self._unsent(error, address)
                return False
        elif not self._route(address):
            return False
        for frame in frames[:-1]:
            send(socket, frame, _MORE)
        send(socket, frames[-1], _NOBLOCK)
        return True

    def _route(self, address: Address) -> bool:
        """Send the frames that route a message to ``address``; False (counted) if the peer is gone or full."""
        socket, send = self.socket, _send
        try:
            if type(address) is bytes:
                send(socket, address, _MORE)
            else:
                route = envelope.join(address)  # type: ignore[arg-type]
                send(socket, route[0], _MORE)
                for hop in route[1:]:
                    send(socket, hop, _MORE)
        except zmq.ZMQError as error:
            self._unsent(error, address)
            return False
        return True

    def _unsent(self, error: zmq.ZMQError, address: Address) -> None:
        """Count a message the socket refused to route to ``address``; a closed socket's error goes through."""
        if error.errno == zmq.ENOTSOCK:
            raise error
        self.send_failed(error.errno or 0, address)

    def _send_marked(self, address: Address, frames: Sequence[Frame]) -> Tracker | None:
        if self.socket.closed:
            raise zmq.ZMQError(zmq.ENOTSOCK)
        if self._native is not None:  # the accelerator's marks: kept frames still go by reference
            return self._marked(self._native.router_send_marked(self._handle, address, frames), address)
        if not self._route(address):
            return None
        socket = self.socket
        for frame in frames[:-1]:
            _send(socket, frame, _MORE)
        last = zmq.Frame(frames[-1], track=True, copy=False)
        tracker: Tracker = socket.send(last, _NOBLOCK, copy=False, track=True)
        return tracker


class ServerLink(Link):
    """Thread-safe peers: a SERVER socket; frames packed into one part."""

    transport = Transport.SERVER
    socket_type = getattr(zmq, "SERVER", -1)
    needs_draft = True
    frame_bytes = 1  # about what the packing takes

    def prepare(self) -> None:
        self._aliases: list[str] = []  # inproc endpoints carried over ipc (before any bind)

    def bind(self, endpoint: str) -> str:
        """Bind to ``endpoint``; an ``inproc://`` endpoint that this libzmq or CURVE cannot have on a real inproc
        pipe is carried over a private ipc socket (see :mod:`generaldomo.io.inproc`), reported under its name."""
        if not endpoint.startswith("inproc://") or not inproc.carried(self.security is not None):
            return super().bind(endpoint)
        stand_in = inproc.claim(endpoint)
        try:
            bind(self.socket, self.transport, stand_in)
        except BindError:
            inproc.release(endpoint)
            raise
        self._aliases.append(endpoint)
        self.endpoints.append(endpoint)
        return endpoint

    def close(self, linger_ms: int = 200) -> None:
        super().close(linger_ms)
        for endpoint in self._aliases:
            inproc.release(endpoint)

    def _recv_native(self, native: Any, limit: int) -> list[Received]:
        if self.security is not None:
            return self._recv_native_secured(native, limit)
        batch: list[Received] = []
        for peer, frames in native.server_recv(self._handle, limit, self.max_frames, BATCH_BYTES, KEEP):
            if type(frames) is list:
                batch.append((peer, frames, None))
            else:
                self._undecodable(peer, frames)
        return batch

    def _recv_native_secured(self, native: Any, limit: int) -> list[Received]:
        """:meth:`_recv_native` on a CURVE link: each part comes with its User-Id, whose credential is taken (as on
        the pure path) once the part has unpacked."""
        batch: list[Received] = []
        credential = self.credential
        for peer, frames, user in native.server_recv(self._handle, limit, self.max_frames, BATCH_BYTES, KEEP, True):
            if type(frames) is list:
                found = credential(user, peer)
                if found is not None:
                    batch.append((peer, frames, found))
            else:
                self._undecodable(peer, frames)
        return batch

    def _undecodable(self, peer: int, problem: int) -> None:
        """Count a part the accelerator could not unpack (``problem``: too many frames, else malformed)."""
        if problem == _UNPACK_TOO_MANY:
            self._dropped_too_many(peer)
        else:
            self.drop("dropped_undecodable", "dropped a message from %s that does not unpack", self.label(peer))

    def _dropped_too_many(self, peer: int) -> None:
        self.drop(
            "dropped_too_many_frames", "dropped a message of %d+ frames from %s", self.max_frames, self.label(peer)
        )

    def recv(self) -> Received | None:
        for _ in range(_SKIPS):
            try:
                message = self.socket.recv(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return None
            peer = message.routing_id
            try:
                frames = codec.decode(message.buffer, self.max_frames)
            except errors.TooManyFrames:
                self._dropped_too_many(peer)
                continue
            except errors.CodecError as error:
                self.drop(
                    "dropped_undecodable", "dropped a message from %s that does not unpack: %s", self.label(peer), error
                )
                continue
            if self.security is None:
                return peer, frames, None
            credential = self.credential(_user_id(message), peer)
            if credential is not None:
                return peer, frames, credential
        return None

    def _send(self, address: Address, frames: Sequence[Frame]) -> bool:
        assert isinstance(address, int)
        if self.socket.closed:
            raise zmq.ZMQError(zmq.ENOTSOCK)
        if self._native is not None:
            code = self._native.server_send(self._handle, address, frames)
            if code:
                self.send_failed(code, address)
            return not code
        message = zmq.Frame(codec.encode(frames), copy=True)  # a zero-copy frame (64 KiB+) costs a GC hand-off
        message.routing_id = address
        try:
            _send(self.socket, message, _NOBLOCK)
        except zmq.ZMQError as error:
            self.send_failed(error.errno or 0, address)
            return False
        return True

    def _send_marked(self, address: Address, frames: Sequence[Frame]) -> Tracker | None:
        assert isinstance(address, int)
        if self.socket.closed:
            raise zmq.ZMQError(zmq.ENOTSOCK)
        if self._native is not None:
            return self._marked(self._native.server_send_marked(self._handle, address, frames), address)
        message = zmq.Frame(codec.encode(frames), track=True, copy=False)
        message.routing_id = address
        try:
            tracker: Tracker = self.socket.send(message, _NOBLOCK, copy=False, track=True)
        except zmq.ZMQError as error:
            self.send_failed(error.errno or 0, address)
            return None
        return tracker


LINKS: dict[Transport, type[Link]] = {Transport.ROUTER: RouterLink, Transport.SERVER: ServerLink}

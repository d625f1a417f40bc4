"""The bridge: thread-safe generaldomo CLIENT peers in front of any standard Majordomo (MDP/0.1) broker.

This module owns the translation device of the design notes' "option 2". It accepts generaldomo clients on
a SERVER socket and forwards each request as an MDP/0.1 client request to a ROUTER broker. MDP carries no
request id and a broker may answer out of order, so every request in flight gets a DEALER of its own, taken
from a pool of idle ones: the reply that comes back on that DEALER is the answer to that request, mapped
back to the client's routing id and request id. A DEALER whose reply came back returns to the pool; one idle
for ``idle_timeout`` is closed. A client that stops heartbeating for ``liveness`` intervals is forgotten and
the DEALERs of its requests closed (a late reply on them could not be delivered). The bridge answers client
HEARTBEATs itself, naming its own instance, so clients resend when the bridge restarts, and the request ids a
client asks about that it has not in flight (it forgot them, or never got them), so that the client sends those
again; a CANCEL closes the request's DEALER (a late reply is not delivered).

Bounds: at most ``max_in_flight`` requests are in flight at once (so at most that many DEALERs are open), and at
most a share of them (:data:`CLIENT_SHARE`, at least one) for one client connection, so that one client (a
multi-threaded application's shared CLIENT socket may have many) cannot take every place. A request beyond
either waits in its connection's queue, in order, until a place frees; the places that free go to the
connections with waiting requests in turn (round robin). A connection's queue holds at most ``connection_queue_bytes``
bytes of requests (charged to it, freed when they leave the queue), and all queues together at most
:data:`TOTAL_QUEUE_BYTES` (or ``connection_queue_bytes``, if more); a request beyond that, or one for which no
DEALER can be opened (the process ran out of sockets or files), gets FINAL ``429`` with the reason and a
``retry_after`` (:data:`RETRY_AFTER`) at once, which a generaldomo :class:`~generaldomo.Client` takes as
backpressure (it waits and sends the request again), and the bridge serves on. A queued request is withdrawn by
its CANCEL and forgotten with its silent client, as one in flight is.

With ``security`` the SERVER side speaks CURVE only and admits the keys it lists (a ZAP handler on a context of
the bridge's own); only keys with the client role may send requests (others get ``403``). With ``upstream``
(a :class:`~generaldomo.io.peer.connection.Curve`) the DEALERs authenticate to a CURVE broker with the bridge's key.
A CURVE upstream with plaintext clients would let any keyless peer use the CURVE broker with the bridge's key
(an open relay): the bridge refuses to start so unless ``allow_plaintext`` (and then warns).

Each message is handled inside a barrier (:mod:`generaldomo.sansio.barrier`: an unexpected error drops it,
counted in :attr:`Bridge.internal_errors`), warnings are rate-limited per kind and client, and a loop that stops
because of an error fails fast as the broker's does (:mod:`generaldomo.io.failfast`: ``on_failure``,
:meth:`Bridge.join`, :meth:`Bridge.check` and :meth:`Bridge.stop` raise :class:`BridgeFailed`).

It speaks MDP/0.1 upstream only; it knows nothing of the upstream broker's internals.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import zmq

import generaldomo.errors as errors
from generaldomo.compat import moved_names
from generaldomo.io.auth import BrokerSecurity, ZapHandler
from generaldomo.io.endpoints import FORMS
from generaldomo.io.endpoints import check as check_endpoint
from generaldomo.io.failfast import Failure, OnFailure, ServingLoop
from generaldomo.io.hub.links import Address, ServerLink
from generaldomo.io.peer.connection import Curve
from generaldomo.sansio.barrier import Barrier
from generaldomo.sansio.broker.access import Credential, Role
from generaldomo.sansio.config.settings import HEARTBEAT_INTERVAL, LIVENESS
from generaldomo.sansio.lograte import LogLimiter
from generaldomo.sansio.wire import protocol
from generaldomo.sansio.wire.events import ClientCancel, ClientHeartbeat, ClientRequest, Dialect, Frame

# the errors' old paths here: the same classes, with a DeprecationWarning (they live in generaldomo.errors)
__getattr__ = moved_names(__name__, "generaldomo", ["BridgeFailed"])

__all__ = ["Bridge"]

log = logging.getLogger(__name__)

IDLE_TIMEOUT = 30.0  # seconds after which an idle DEALER is closed
MAX_IN_FLIGHT = 512  # requests in flight at once (one DEALER each); libzmq's default allows 1023 sockets
CLIENT_SHARE = 0.875  # of max_in_flight, what one client connection may have in flight (the rest: the others')
QUEUE_BYTES = 16 << 20  # bytes of requests one connection may have waiting for a place (429 beyond)
RETRY_AFTER = 0.25  # seconds a 429 of the bridge asks the client to wait before sending the request again
TOTAL_QUEUE_BYTES = 128 << 20  # bytes of requests all connections together may have waiting (429 beyond)
QUEUED_OVERHEAD = 64  # bytes a waiting request is charged beyond its description and payload
_DRAIN = 256  # client messages read before looking at the broker's replies


class _InFlight(NamedTuple):
    client: Address
    request_id: bytes
    description: bytes


class Bridge(ServingLoop):
    """SERVER endpoints for generaldomo clients, forwarding to the MDP/0.1 broker at ``broker``. It runs in the
    calling thread (:meth:`run`) or a daemon thread (:meth:`start`), and fails fast as a broker does
    (:meth:`join`, :meth:`check`, :attr:`failure`, :attr:`serving` raise or tell :class:`BridgeFailed`).

    Args:
        server: the SERVER endpoints to bind for generaldomo clients.
        broker: the MDP/0.1 broker's endpoint.
        context: the ZeroMQ context.
        heartbeat_interval: seconds between heartbeats (use the clients').
        liveness: heartbeat intervals of silence after which a client is presumed gone.
        idle_timeout: seconds after which an idle upstream connection is closed.
        security: CURVE for the bridge's own clients (as a broker's, :class:`~generaldomo.io.auth.BrokerSecurity`).
        upstream: CURVE towards the upstream broker (None: plaintext).
        allow_plaintext: relay plaintext clients to a CURVE upstream with the bridge's key (refused otherwise).
        max_in_flight: requests relayed at once; those beyond, and a connection's beyond :data:`CLIENT_SHARE` of
            them, wait in the connection's queue.
        connection_queue_bytes: bytes of requests one connection may have waiting; those beyond are answered
            ``429`` with a ``retry_after``.
        on_failure: called with the error, from the loop's thread, if the loop stops because of one (the bridge
            then serves nothing: :class:`BridgeFailed`).

    Example::

        bridge = Bridge(["tcp://127.0.0.1:5557"], "tcp://127.0.0.1:5555").start()
        with Client("tcp://127.0.0.1:5557", "server") as client:
            client.request("echo", b"hello", timeout=10)
        bridge.stop()
    """

    def __init__(
        self,
        server: Iterable[str],
        broker: str,
        *,
        context: zmq.Context[zmq.Socket[bytes]] | None = None,
        heartbeat_interval: float = HEARTBEAT_INTERVAL,
        liveness: int = LIVENESS,
        idle_timeout: float = IDLE_TIMEOUT,
        security: BrokerSecurity | None = None,
        upstream: Curve | None = None,
        allow_plaintext: bool = False,
        max_in_flight: int = MAX_IN_FLIGHT,
        connection_queue_bytes: int = QUEUE_BYTES,
        on_failure: OnFailure | None = None,
    ) -> None:
        if upstream is not None and security is None:
            if not allow_plaintext:
                raise ValueError(
                    "the upstream broker is CURVE-secured but the bridge's clients would be plaintext: any peer "
                    "could use the broker with the bridge's key; give the bridge a CURVE secret and allowlists "
                    "(--curve-secret, --clients), or allow_plaintext=True (--allow-plaintext) to relay them anyway"
                )
            log.warning("bridge: relaying plaintext clients to a CURVE broker with the bridge's key (allow_plaintext)")
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1, not {max_in_flight}")
        if connection_queue_bytes < 0:
            raise ValueError(f"connection_queue_bytes must be at least 0, not {connection_queue_bytes}")
        self._own_context = security is not None and context is None  # one ZAP handler per context
        self.context = context or (zmq.Context() if security is not None else zmq.Context.instance())
        self.upstream = upstream
        self.broker = broker
        self.heartbeat_interval = heartbeat_interval
        self.expiry = heartbeat_interval * liveness
        self.idle_timeout = idle_timeout
        self.max_in_flight = max_in_flight
        self.max_per_client = max(1, int(max_in_flight * CLIENT_SHARE))  # 448 of 512, 14 of 16
        self.instance = os.urandom(4)
        self.forwarded = 0
        self.connection_queue_bytes = connection_queue_bytes
        self.refused_in_flight = 0  # requests answered 429: a full queue, or no DEALER could be opened
        self.queued_total = 0  # requests that waited in a queue for a place
        self.total_queue_bytes = max(TOTAL_QUEUE_BYTES, connection_queue_bytes)
        # each connection's waiting requests by id, in order, with their charge (a CANCEL finds its own at once)
        self._queues: dict[Address, OrderedDict[bytes, tuple[ClientRequest, int]]] = {}
        self._queued_bytes: dict[Address, int] = {}  # bytes charged to each connection with waiting requests
        self._queued_all = 0  # bytes charged to all of them
        self._queued_ids: set[tuple[Address, bytes]] = set()
        self._turns: deque[Address] = deque()  # connections with waiting requests, in the order places go to them
        self._idle: list[tuple[zmq.Socket[bytes], float]] = []  # DEALERs with nothing in flight, and since when
        self._in_flight: dict[zmq.Socket[bytes], _InFlight] = {}
        self._by_request: dict[tuple[Address, bytes], zmq.Socket[bytes]] = {}
        self._per_client: dict[Address, int] = {}  # requests in flight per client (none: not listed)
        self._last_heard: dict[Address, float] = {}
        self._warnings = LogLimiter(log)
        self._barrier = Barrier(log, "the bridge")
        self._failure = Failure(log, "bridge", errors.BridgeFailed, on_failure)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._running = False
        self._zap = None if security is None else ZapHandler(self.context, security).start()
        self._poller = zmq.Poller()
        try:
            self._connect_upstream()
            self.link = ServerLink(self.context, server, security=security)
        except BaseException:
            self._close()
            raise
        self._poller.register(self.link.socket, zmq.POLLIN)
        self._poller.register(self.link.monitor, zmq.POLLIN)  # refused connections: counted and logged

    def _connect_upstream(self) -> None:
        """Open the first DEALER now (idle, for the first request), so that an endpoint that cannot be connected
        to is a ValueError at start rather than at the first request."""
        check_endpoint(self.broker, bind=False)
        try:
            self._idle.append((self._new_dealer(), time.monotonic()))
        except zmq.ZMQError as error:
            raise ValueError(
                f"cannot connect to the upstream broker {self.broker!r}: {zmq.strerror(error.errno or 0)}; "
                f"expected {FORMS[False]}"
            ) from None

    @property
    def endpoints(self) -> list[str]:
        """Every bound SERVER endpoint, with the ports that ``*`` binds received."""
        return self.link.endpoints

    @property
    def dealers(self) -> int:
        """DEALER sockets open towards the broker (in flight or idle)."""
        return len(self._in_flight) + len(self._idle)

    @property
    def queued(self) -> int:
        """Requests waiting in the connections' queues for a place in flight."""
        return len(self._queued_ids)

    @property
    def internal_errors(self) -> int:
        """Messages whose handling raised an unexpected error: dropped, counted, logged."""
        return self._barrier.count

    # start, join, check, failure and serving: ServingLoop's (generaldomo.io.failfast), raising BridgeFailed
    _thread_name = "generaldomo-bridge"

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving and close the sockets, waiting up to ``timeout`` seconds for the thread; raises
        :class:`BridgeFailed` if the loop had stopped because of an error.

        Args:
            timeout: seconds to wait.
        """
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        elif not self._running:
            self._close()
        self.check()

    def run(self) -> None:
        """Forward until :meth:`stop`; an error that stops the loop fails the bridge (module docstring)."""
        self._serve_until_done(self._loop, self._close)

    def _loop(self) -> None:
        clock = time.monotonic
        next_sweep = clock() + self.heartbeat_interval
        while not self._stop.is_set():
            for socket, _ in self._poller.poll(math.ceil(min(100.0, max(0.0, next_sweep - clock()) * 1000))):
                if socket is self.link.socket:
                    self._guarded("client messages", self._from_clients, clock())
                elif socket is self.link.monitor:
                    self._guarded("the refusals", self.link.log_refusals)
                else:
                    self._guarded("a reply from the broker", self._from_broker, socket, clock())
            if clock() >= next_sweep:
                self._guarded("the sweep", self._sweep, clock())
                next_sweep = clock() + self.heartbeat_interval

    def _close(self) -> None:
        for socket in [*self._in_flight, *(s for s, _ in self._idle)]:
            socket.close(linger=0)
        self._in_flight.clear()
        self._by_request.clear()
        self._per_client.clear()
        self._idle.clear()
        for client in list(self._queues):
            self._drop_queue(client)
        link = getattr(self, "link", None)  # none if binding it failed
        if link is not None:
            with contextlib.suppress(zmq.ZMQError):
                link.close()
        self._close_context()

    def _close_context(self) -> None:
        if self._zap is not None:
            self._zap.stop()
            self._zap = None
        if self._own_context:
            self._own_context = False
            self.context.term()

    def _warn(self, kind: str, peer: Address | None, now: float, message: str, *args: object) -> None:
        """Log a warning about a client (``peer``; None: the upstream broker), rate-limited per kind and peer."""
        who = (lambda: self.link.label(peer)) if peer is not None else (lambda: f"upstream {self.broker}")
        self._warnings.warn(kind, peer, who, now, f"bridge {message}", *args)

    def _from_clients(self, now: float) -> None:
        for _ in range(_DRAIN):
            message = self.link.recv()
            if message is None:
                return
            client, frames, credential = message  # a credential only with CURVE
            try:
                self._from_client(client, frames, credential, now)
            except zmq.ZMQError:
                raise
            except Exception:
                self._barrier.caught("a client message", now)

    def _from_client(self, client: Address, frames: Sequence[Frame], credential: Credential | None, now: float) -> None:
        self._last_heard[client] = now
        event = protocol.parse(frames)
        if isinstance(event, ClientRequest) and not _may_ask(credential):
            self._refuse(client, event, protocol.FORBIDDEN, "forbidden: this key may not send requests", now)
        elif isinstance(event, ClientHeartbeat):  # asked-about ids not in flight here: the client resends them
            held = self._by_request.keys() | self._queued_ids
            unknown = [rid for rid in event.request_ids if (client, rid) not in held]
            self.link.send(client, protocol.gdp_client_heartbeat(self.instance, unknown))
        elif isinstance(event, ClientRequest) and event.dialect is Dialect.GDP and event.request_id is not None:
            self._forward(client, event, now)
        elif isinstance(event, ClientCancel):
            self._withdraw(client, event.request_id, now)
        else:
            self._warn("dropped", client, now, "dropped a message that is not a generaldomo client request")

    def _forward(self, client: Address, event: ClientRequest, now: float) -> None:
        assert event.request_id is not None
        key = (client, event.request_id)
        if key in self._by_request or key in self._queued_ids:
            return  # a retry of a request in flight, or waiting
        if client not in self._queues and self._has_place(client):
            self._start(client, event, now)
            return
        charge = QUEUED_OVERHEAD + len(event.description) + sum(len(frame) for frame in event.body)
        held = self._queued_bytes.get(client, 0)
        if held + charge > self.connection_queue_bytes or self._queued_all + charge > self.total_queue_bytes:
            reason = (
                f"this connection has {self._per_client.get(client, 0)} requests in flight and {held} bytes of "
                f"requests waiting, and the bridge {self._queued_all} (its bounds: connection_queue_bytes, and the "
                "total)"
            )
            self._refuse(client, event, protocol.OVER_BUDGET, reason, now)
            return
        if client not in self._queues:
            self._queues[client] = OrderedDict()
            self._turns.append(client)
        self._queues[client][event.request_id] = (event, charge)
        self._queued_bytes[client] = held + charge
        self._queued_all += charge
        self._queued_ids.add(key)
        self.queued_total += 1

    def _has_place(self, client: Address) -> bool:
        """True when one more request of ``client`` may be in flight now."""
        return len(self._in_flight) < self.max_in_flight and self._per_client.get(client, 0) < self.max_per_client

    def _pump(self, now: float) -> None:
        """Give the places in flight that freed to the waiting requests, one connection after the other."""
        passed = 0  # connections looked at since one last got a place
        while self._turns and len(self._in_flight) < self.max_in_flight and passed < len(self._turns):
            client = self._turns[0]
            self._turns.rotate(-1)
            if self._per_client.get(client, 0) >= self.max_per_client:
                passed += 1
                continue
            passed = 0
            event, charge = self._queues[client].popitem(last=False)[1]
            self._unqueue(client, event, charge)
            self._start(client, event, now)

    def _unqueue(self, client: Address, event: ClientRequest, charge: int) -> None:
        """``event`` left ``client``'s queue: its charge is freed (the queue goes when it is empty)."""
        assert event.request_id is not None
        self._queued_ids.discard((client, event.request_id))
        self._queued_all -= charge
        left = self._queued_bytes[client] - charge
        if self._queues[client]:
            self._queued_bytes[client] = left
        else:
            self._drop_queue(client)

    def _drop_queue(self, client: Address) -> None:
        """Forget ``client``'s queue and what it holds."""
        for request_id, (_, charge) in self._queues.pop(client, OrderedDict()).items():
            self._queued_ids.discard((client, request_id))
            self._queued_all -= charge
        self._queued_bytes.pop(client, None)
        with contextlib.suppress(ValueError):
            self._turns.remove(client)

    def _start(self, client: Address, event: ClientRequest, now: float) -> None:
        """Send ``event`` upstream on a DEALER of its own (429 if none can be opened)."""
        assert event.request_id is not None
        try:
            dealer = self._idle.pop()[0] if self._idle else self._new_dealer()
        except zmq.ZMQError as error:  # out of sockets or files: this request is refused, the bridge serves on
            reason = f"the bridge could not open a connection to the broker: {zmq.strerror(error.errno or 0)}"
            self._refuse(client, event, protocol.OVER_BUDGET, reason, now)
            return
        self._track(dealer, _InFlight(client, event.request_id, event.description))
        dealer.send_multipart(protocol.mdp_client_request(event.description, event.body))
        self.forwarded += 1
        log.debug("bridge forwarded request %s of client %s", event.request_id.hex(), self.link.label(client))

    def _refuse(self, client: Address, event: ClientRequest, status: bytes, reason: str, now: float) -> None:
        if status == protocol.OVER_BUDGET:
            self.refused_in_flight += 1
        self._warn(f"refused {status.decode()}", client, now, "refused a request: %s", reason)
        if event.request_id is not None:
            body = [reason.encode()]
            if status == protocol.OVER_BUDGET:  # room comes as requests in flight end: try again shortly
                body.append(protocol.retry_after_frame(RETRY_AFTER))
            reply = protocol.client_reply(Dialect.GDP, event.request_id, event.description, status, body, True)
            assert reply is not None  # a final GDP reply always has frames
            self.link.send(client, reply)

    def _track(self, dealer: zmq.Socket[bytes], request: _InFlight) -> None:
        """``request`` is in flight on ``dealer`` (its client's count too)."""
        self._in_flight[dealer] = request
        self._by_request[request.client, request.request_id] = dealer
        self._per_client[request.client] = self._per_client.get(request.client, 0) + 1

    def _untrack(self, dealer: zmq.Socket[bytes]) -> _InFlight | None:
        """The request in flight on ``dealer``, no longer in flight (None if there was none)."""
        request = self._in_flight.pop(dealer, None)
        if request is not None:
            del self._by_request[request.client, request.request_id]
            left = self._per_client[request.client] - 1
            if left:
                self._per_client[request.client] = left
            else:
                del self._per_client[request.client]
        return request

    def _withdraw(self, client: Address, request_id: bytes, now: float) -> None:
        dealer = self._by_request.get((client, request_id))
        if dealer is not None:
            self._untrack(dealer)
            self._close_dealer(dealer)
            log.debug("bridge withdrew request %s of client %s", request_id.hex(), self.link.label(client))
            self._pump(now)
        elif (client, request_id) in self._queued_ids:
            self._unqueue(client, *self._queues[client].pop(request_id))

    def _new_dealer(self) -> zmq.Socket[bytes]:
        dealer = self.context.socket(zmq.DEALER)
        try:
            dealer.setsockopt(zmq.LINGER, 0)
            if self.upstream is not None:
                self.upstream.apply(dealer)
            dealer.connect(self.broker)
        except BaseException:
            dealer.close(linger=0)
            raise
        self._poller.register(dealer, zmq.POLLIN)
        return dealer

    def _from_broker(self, dealer: zmq.Socket[bytes], now: float) -> None:
        frames = dealer.recv_multipart()
        request = self._untrack(dealer)
        if request is None:
            self._warn("stray reply", None, now, "dropped a reply for no request in flight")
            return
        self._idle.append((dealer, now))
        self._pump(now)
        parsed = protocol.parse_mdp_client_reply(frames)
        body: Sequence[bytes]
        if parsed is None or parsed[0] != request.description:
            self._warn("malformed reply", None, now, "got a malformed MDP reply; answering %s",
                       protocol.BAD_GATEWAY.decode())  # fmt: skip
            body, status = [b"malformed reply from the upstream broker"], protocol.BAD_GATEWAY
        else:
            body, status = parsed[1], protocol.OK
            log.debug("bridge got the reply to request %s of client %s", request.request_id.hex(), request.client)
        reply = protocol.client_reply(Dialect.GDP, request.request_id, request.description, status, body, True)
        assert reply is not None
        self.link.send(request.client, reply)

    def _sweep(self, now: float) -> None:
        for client in [c for c, heard in self._last_heard.items() if now - heard > self.expiry]:
            del self._last_heard[client]
            for dealer, request in list(self._in_flight.items()):
                if request.client == client:
                    log.info("bridge forgot silent client %s and its request %s", self.link.label(client),
                             request.request_id.hex())  # fmt: skip
                    self._untrack(dealer)
                    self._close_dealer(dealer)
            self._drop_queue(client)
        self._pump(now)
        keep = []
        for dealer, idle_since in self._idle:
            if now - idle_since > self.idle_timeout:
                self._close_dealer(dealer)
            else:
                keep.append((dealer, idle_since))
        self._idle = keep
        self._warnings.flush(now)
        self._barrier.flush(now)

    def _close_dealer(self, dealer: zmq.Socket[bytes]) -> None:
        self._poller.unregister(dealer)
        dealer.close(linger=0)


def _may_ask(credential: Credential | None) -> bool:
    """True when a peer may send requests: anyone without CURVE, a key with the client role with it."""
    return credential is None or credential.may(Role.CLIENT)

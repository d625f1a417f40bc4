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

With ``security`` the SERVER side speaks CURVE only and admits the keys it lists (a ZAP handler on a context of
the bridge's own); only keys with the client role may send requests (others get ``403``). With ``upstream``
(a :class:`~generaldomo.io.connection.Curve`) the DEALERs authenticate to a CURVE broker with the bridge's key.

It speaks MDP/0.1 upstream only; it knows nothing of the upstream broker's internals.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import zmq

from generaldomo.io.auth import BrokerSecurity, ZapHandler
from generaldomo.io.connection import Curve
from generaldomo.io.links import Address, ServerLink
from generaldomo.sansio import protocol
from generaldomo.sansio.access import Credential, Role
from generaldomo.sansio.events import ClientCancel, ClientHeartbeat, ClientRequest, Dialect
from generaldomo.sansio.settings import HEARTBEAT_INTERVAL, LIVENESS

__all__ = ["Bridge"]

log = logging.getLogger(__name__)

IDLE_TIMEOUT = 30.0  # seconds after which an idle DEALER is closed


class _InFlight(NamedTuple):
    client: Address
    request_id: bytes
    description: bytes


class Bridge:
    """SERVER endpoints for generaldomo clients, forwarding to the MDP/0.1 broker at ``broker``.

    Args:
        server: the SERVER endpoints to bind for generaldomo clients.
        broker: the MDP/0.1 broker's endpoint.
        context: the ZeroMQ context.
        heartbeat_interval: seconds between heartbeats (use the clients').
        liveness: heartbeat intervals of silence after which a client is presumed gone.
        idle_timeout: seconds after which an idle upstream connection is closed.
        security: CURVE for the bridge's own clients (as a broker's, :class:`~generaldomo.io.auth.BrokerSecurity`).
        upstream: CURVE towards the upstream broker (None: plaintext).

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
    ) -> None:
        self._own_context = security is not None and context is None  # one ZAP handler per context
        self.context = context or (zmq.Context() if security is not None else zmq.Context.instance())
        self._zap = None if security is None else ZapHandler(self.context, security).start()
        self.upstream = upstream
        self.broker = broker
        self.heartbeat_interval = heartbeat_interval
        self.expiry = heartbeat_interval * liveness
        self.idle_timeout = idle_timeout
        self.instance = os.urandom(4)
        self.link = ServerLink(self.context, server, security=security)
        self.forwarded = 0
        self._idle: list[tuple[zmq.Socket[bytes], float]] = []  # DEALERs with nothing in flight, and since when
        self._in_flight: dict[zmq.Socket[bytes], _InFlight] = {}
        self._by_request: dict[tuple[Address, bytes], zmq.Socket[bytes]] = {}
        self._last_heard: dict[Address, float] = {}
        self._poller = zmq.Poller()
        self._poller.register(self.link.socket, zmq.POLLIN)
        self._poller.register(self.link.monitor, zmq.POLLIN)  # refused connections: counted and logged
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def endpoints(self) -> list[str]:
        """Every bound SERVER endpoint, with the ports that ``*`` binds received."""
        return self.link.endpoints

    @property
    def dealers(self) -> int:
        """DEALER sockets open towards the broker (in flight or idle)."""
        return len(self._in_flight) + len(self._idle)

    def start(self) -> Bridge:
        """Serve in a daemon thread of this process; return self."""
        self._thread = threading.Thread(target=self.run, name="generaldomo-bridge", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving and close the sockets, waiting up to ``timeout`` seconds for the thread.

        Args:
            timeout: seconds to wait.
        """
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def run(self) -> None:
        """Forward until :meth:`stop`."""
        clock = time.monotonic
        next_sweep = clock() + self.heartbeat_interval
        try:
            while not self._stop.is_set():
                for socket, _ in self._poller.poll(math.ceil(min(100.0, max(0.0, next_sweep - clock()) * 1000))):
                    if socket is self.link.socket:
                        self._from_clients(clock())
                    elif socket is self.link.monitor:
                        self.link.log_refusals()
                    else:
                        self._from_broker(socket, clock())
                if clock() >= next_sweep:
                    self._sweep(clock())
                    next_sweep = clock() + self.heartbeat_interval
        finally:
            for socket in [*self._in_flight, *(s for s, _ in self._idle)]:
                socket.close(linger=0)
            self.link.close()
            if self._zap is not None:
                self._zap.stop()
            if self._own_context:
                self.context.term()

    def _from_clients(self, now: float) -> None:
        while (message := self.link.recv()) is not None:
            client, frames, credential = message  # a credential only with CURVE
            self._last_heard[client] = now
            event = protocol.parse(frames)
            if isinstance(event, ClientRequest) and not _may_ask(credential):
                self._refuse(client, event)
            elif isinstance(event, ClientHeartbeat):  # asked-about ids not in flight here: the client resends them
                unknown = [rid for rid in event.request_ids if (client, rid) not in self._by_request]
                self.link.send(client, protocol.gdp_client_heartbeat(self.instance, unknown))
            elif isinstance(event, ClientRequest) and event.dialect is Dialect.GDP and event.request_id is not None:
                self._forward(client, event)
            elif isinstance(event, ClientCancel):
                self._withdraw(client, event.request_id)
            else:
                log.warning("bridge dropped a message from %s that is not a generaldomo client request", client)

    def _forward(self, client: Address, event: ClientRequest) -> None:
        assert event.request_id is not None
        if (client, event.request_id) in self._by_request:
            return  # a retry of a request in flight
        dealer = self._idle.pop()[0] if self._idle else self._new_dealer()
        self._in_flight[dealer] = _InFlight(client, event.request_id, event.description)
        self._by_request[client, event.request_id] = dealer
        dealer.send_multipart(protocol.mdp_client_request(event.description, event.body))
        self.forwarded += 1
        log.debug("bridge forwarded request %s of client %s", event.request_id.hex(), client)

    def _refuse(self, client: Address, event: ClientRequest) -> None:
        log.warning("bridge refused a request from %s: its key lacks the client role", client)
        if event.request_id is not None:
            reason = [b"forbidden: this key may not send requests"]
            status = protocol.FORBIDDEN
            reply = protocol.client_reply(Dialect.GDP, event.request_id, event.description, status, reason, True)
            assert reply is not None  # a final GDP reply always has frames
            self.link.send(client, reply)

    def _withdraw(self, client: Address, request_id: bytes) -> None:
        dealer = self._by_request.pop((client, request_id), None)
        if dealer is not None:
            del self._in_flight[dealer]
            self._close(dealer)
            log.debug("bridge withdrew request %s of client %s", request_id.hex(), client)

    def _new_dealer(self) -> zmq.Socket[bytes]:
        dealer = self.context.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        if self.upstream is not None:
            self.upstream.apply(dealer)
        dealer.connect(self.broker)
        self._poller.register(dealer, zmq.POLLIN)
        return dealer

    def _from_broker(self, dealer: zmq.Socket[bytes], now: float) -> None:
        frames = dealer.recv_multipart()
        request = self._in_flight.pop(dealer, None)
        if request is None:
            log.warning("bridge dropped a reply for no request in flight")
            return
        del self._by_request[request.client, request.request_id]
        self._idle.append((dealer, now))
        parsed = protocol.parse_mdp_client_reply(frames)
        body: Sequence[bytes]
        if parsed is None or parsed[0] != request.description:
            log.warning(
                "bridge got a malformed MDP reply from %s; answering %s", self.broker, protocol.BAD_GATEWAY.decode()
            )
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
                    log.info("bridge forgot silent client %s and its request %s", client, request.request_id.hex())
                    del self._in_flight[dealer]
                    del self._by_request[request.client, request.request_id]
                    self._close(dealer)
        keep = []
        for dealer, idle_since in self._idle:
            if now - idle_since > self.idle_timeout:
                self._close(dealer)
            else:
                keep.append((dealer, idle_since))
        self._idle = keep

    def _close(self, dealer: zmq.Socket[bytes]) -> None:
        self._poller.unregister(dealer)
        dealer.close(linger=0)


def _may_ask(credential: Credential | None) -> bool:
    """True when a peer may send requests: anyone without CURVE, a key with the client role with it."""
    return credential is None or credential.may(Role.CLIENT)

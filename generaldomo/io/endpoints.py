"""Endpoints checked before libzmq sees them, so that a mistake is told with the form expected.

This module owns what a well-formed endpoint is for binding (the broker's links, the bridge) and for connecting
(the peers): ``tcp://IP:PORT`` and ``tcp://IP:*`` (bind: an IP address, ``*`` for every interface, or a
network interface's name; connect: a host name too, and no ``*``), ``ipc://PATH`` (at most
:data:`MAX_IPC_PATH` bytes, libzmq's limit from ``sockaddr_un``), ``inproc://NAME``. Other libzmq transports
(``pgm://``, ``tipc://``...) are left to libzmq. :func:`check` raises ``ValueError`` naming the endpoint, what
is wrong and the forms expected; libzmq's own errors ("No such device", "Invalid argument") never reach a user
for these cases. An endpoint a broker *announces* (its beacon, its address file) is input from whoever can send
a UDP datagram or write that file: :func:`announced` keeps only the well-formed ``tcp://`` and ``ipc://`` ones
that a peer can connect to, so that what a peer adopts on the word of a beacon or file is always one it can use.
It knows nothing of sockets or of the protocol.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
import struct
import threading
import time
from typing import Any, Final

import zmq.utils.z85

from generaldomo.sansio.lograte import LogLimiter

__all__ = [
    "ANNOUNCED",
    "FORMS",
    "MAX_IPC_PATH",
    "REFUSED",
    "Refused",
    "announced",
    "announced_key",
    "announced_problem",
    "check",
]

log = logging.getLogger(__name__)

MAX_IPC_PATH: Final = 107  # bytes of an ipc:// path (sun_path less its terminating zero)
FORMS: Final = {
    True: "tcp://IP:PORT, tcp://IP:* (any free port), tcp://*:PORT (every interface), ipc://PATH or inproc://NAME",
    False: "tcp://HOST:PORT, ipc://PATH or inproc://NAME",
}
ANNOUNCED: Final = ("tcp://", "ipc://")  # the transports a beacon or an address file may name
_LEFT_TO_LIBZMQ = ("pgm://", "epgm://", "tipc://", "vmci://", "udp://", "ws://", "wss://")


def check(endpoint: str, bind: bool) -> str:
    """``endpoint`` if it is well formed for binding (``bind``) or connecting; ``ValueError`` otherwise."""
    problem = _problem(endpoint, bind)
    if problem is not None:
        verb = "bind to" if bind else "connect to"
        raise ValueError(f"cannot {verb} {endpoint!r}: {problem}; expected {FORMS[bind]}")
    return endpoint


def announced_problem(endpoint: object) -> str | None:
    """What is wrong with ``endpoint`` as an announced one (None: nothing): a well-formed ``tcp://HOST:PORT`` or
    ``ipc://PATH`` to connect to; anything else (another transport, a malformed text, not text) is refused."""
    if not isinstance(endpoint, str) or not endpoint.startswith(ANNOUNCED):
        return f"not a tcp:// or ipc:// endpoint: {str(endpoint)[:80]!r}"
    return _problem(endpoint, bind=False)


class Refused:
    """The announced endpoints refused in this process: counted (:attr:`count`), and logged at most once per
    interval for each source (a flood of spoofed beacons is one line every ten seconds, with its count)."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()
        self._lines = LogLimiter(log, max_keys=64)

    def add(self, source: str, problem: str) -> None:
        with self._lock:
            self.count += 1
            self._lines.line(
                source, time.monotonic(), "ignored an endpoint from %s: %s (%d ignored in all)", source, problem,
                self.count,
            )  # fmt: skip


REFUSED: Final = Refused()


def announced(pairs: Any, source: str) -> tuple[tuple[str, str], ...]:
    """The usable ``(transport, endpoint)`` pairs of an announcement's ``endpoints`` (JSON: a list of
    ``{"transport": ..., "endpoint": ...}``); the others are refused (:data:`REFUSED`: counted, logged rate
    limited, naming ``source``). ValueError if ``pairs`` is not such a list at all."""
    if not isinstance(pairs, list):
        raise ValueError(f"endpoints must be a list, not {type(pairs).__name__}")
    kept = []
    for pair in pairs:
        transport = pair.get("transport") if isinstance(pair, dict) else None
        endpoint = pair.get("endpoint") if isinstance(pair, dict) else pair
        problem = announced_problem(endpoint)
        if problem is None and not isinstance(transport, str):
            problem = f"no transport named for {endpoint!r}"
        if problem is None:
            kept.append((str(transport), str(endpoint)))
        else:
            REFUSED.add(source, problem)
    return tuple(kept)


def announced_key(key: Any, source: str) -> str | None:
    """An announcement's ``public_key`` if it is one (40 characters of Z85 text: a CURVE public key), else None;
    anything else is refused as an endpoint is (counted, logged), and the announcement counts as keyless."""
    if key is None:
        return None
    try:
        if isinstance(key, str) and len(key) == 40 and len(zmq.utils.z85.decode(key.encode("ascii"))) == 32:
            return key
    except (ValueError, UnicodeError, struct.error):
        pass
    REFUSED.add(source, f"not a CURVE public key: {str(key)[:80]!r}")
    return None


def _problem(endpoint: str, bind: bool) -> str | None:
    if not isinstance(endpoint, str):
        return f"an endpoint is text, not {type(endpoint).__name__}"
    scheme, sep, rest = endpoint.partition("://")
    if not sep:
        return "no transport (tcp://, ipc:// or inproc://)"
    if endpoint.startswith(_LEFT_TO_LIBZMQ):
        return None
    if scheme == "inproc":
        return None if rest else "an inproc:// endpoint needs a name"
    if scheme == "ipc":
        if not rest:
            return "an ipc:// endpoint needs a path"
        size = len(os.fsencode(rest))
        return None if size <= MAX_IPC_PATH else f"its path is {size} bytes, more than libzmq's {MAX_IPC_PATH}"
    if scheme == "tcp":
        return _tcp(rest, bind)
    return f"unknown transport {scheme!r}"


def _tcp(rest: str, bind: bool) -> str | None:
    host, sep, port = rest.rpartition(":")
    if not sep or not host:
        return "a tcp:// endpoint needs a host and a port"
    if ";" in host:  # tcp://SOURCE;HOST:PORT (a source address for connect)
        host = host.rpartition(";")[2]
    if port == "*":
        if not bind:
            return "a peer connects to a port number, not *"
    elif not port.isdigit() or not 0 < int(port) < 65536:
        return f"the port {port!r} is not a number from 1 to 65535 (or * when binding)"
    if host == "*":
        return None if bind else "a peer connects to a host, not *"
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    if not bind:
        return None  # a host name, resolved when connecting
    interfaces = {name for _, name in socket.if_nameindex()}
    if host in interfaces:
        return None
    return f"{host!r} is neither an IP address nor a network interface of this host (bind to an IP: 127.0.0.1, *)"

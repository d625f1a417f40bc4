"""Endpoints checked before libzmq sees them, so that a mistake is told with the form expected.

This module owns what a well-formed endpoint is for binding (the broker's links, the bridge) and for connecting
(the peers): ``tcp://IP:PORT`` and ``tcp://IP:*`` (bind: an IP address, ``*`` for every interface, or a
network interface's name; connect: a host name too, and no ``*``), ``ipc://PATH`` (at most
:data:`MAX_IPC_PATH` bytes, libzmq's limit from ``sockaddr_un``), ``inproc://NAME``. Other libzmq transports
(``pgm://``, ``tipc://``...) are left to libzmq. :func:`check` raises ``ValueError`` naming the endpoint, what
is wrong and the forms expected; libzmq's own errors ("No such device", "Invalid argument") never reach a user
for these cases. It knows nothing of sockets or of the protocol.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from typing import Final

MAX_IPC_PATH: Final = 107  # bytes of an ipc:// path (sun_path less its terminating zero)
FORMS: Final = {
    True: "tcp://IP:PORT, tcp://IP:* (any free port), tcp://*:PORT (every interface), ipc://PATH or inproc://NAME",
    False: "tcp://HOST:PORT, ipc://PATH or inproc://NAME",
}
_LEFT_TO_LIBZMQ = ("pgm://", "epgm://", "tipc://", "vmci://", "udp://", "ws://", "wss://")


def check(endpoint: str, bind: bool) -> str:
    """``endpoint`` if it is well formed for binding (``bind``) or connecting; ``ValueError`` otherwise."""
    problem = _problem(endpoint, bind)
    if problem is not None:
        verb = "bind to" if bind else "connect to"
        raise ValueError(f"cannot {verb} {endpoint!r}: {problem}; expected {FORMS[bind]}")
    return endpoint


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

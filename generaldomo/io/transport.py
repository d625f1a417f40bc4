"""Transport facts shared by the broker's links and the peers' connections.

This module owns what a transport is: the names (:class:`Transport`), whether this pyzmq can make the draft
sockets the ``server`` transport needs, and where a peer's socket connects to reach an endpoint (server
transport ``inproc://`` endpoints may be carried over private ipc, see :mod:`generaldomo.io.inproc`), and how
an endpoint that cannot be bound is told (:class:`BindError`). It knows nothing of the protocol carried.
"""

from __future__ import annotations

import enum
import errno
import shlex
import sys
from typing import Any

import zmq

import generaldomo.errors as errors
from generaldomo.compat import moved_names
from generaldomo.errors import GeneraldomoError
from generaldomo.io import inproc
from generaldomo.io.endpoints import FORMS

# the errors' old paths here: the same classes, with a DeprecationWarning (they live in generaldomo.errors)
__getattr__ = moved_names(__name__, "generaldomo", ["DraftUnavailable"])

__all__ = ["BindError", "Transport", "bind", "connect_target", "draft_available", "install_command", "require_draft"]


class Transport(enum.StrEnum):
    """The socket pair a link and its peers use; the values are the CLI's ``--transport`` names.

    Example:
        >>> from generaldomo import Transport
        >>> Transport.of("server") is Transport.SERVER, str(Transport.ROUTER)
        (True, 'router')
    """

    ROUTER = "router"  # ROUTER in the broker, DEALER/REQ in the peers: Majordomo-compatible
    SERVER = "server"  # SERVER in the broker, thread-safe CLIENT in the peers (draft API)

    @classmethod
    def of(cls, name: str | Transport) -> Transport:
        """The transport called ``name``; ``ValueError`` naming the choices otherwise."""
        try:
            return cls(name)
        except ValueError:
            raise ValueError(f"unknown transport {name!r}; choose one of {', '.join(cls)}") from None


def draft_available() -> bool:
    """True when this pyzmq can make CLIENT and SERVER sockets."""
    return bool(zmq.has("draft")) and hasattr(zmq, "SERVER")


def install_command() -> str:
    """The command that installs draft sockets into this interpreter's environment (:mod:`generaldomo.draft`)."""
    return f"{shlex.quote(sys.executable)} -m generaldomo.draft ensure"


def require_draft() -> None:
    """Raise :class:`DraftUnavailable`, naming the fix, unless draft sockets are available."""
    if not draft_available():
        raise errors.DraftUnavailable(
            f"the server transport needs pyzmq built with the libzmq draft API, but pyzmq {zmq.pyzmq_version()} "
            f"(libzmq {zmq.zmq_version()}) has none; install one with: {install_command()}"
        )


def connect_target(transport: Transport, endpoint: str) -> str:
    """Where a peer's socket of ``transport`` connects to reach the broker's ``endpoint``."""
    return inproc.resolve(endpoint) if transport is Transport.SERVER else endpoint


_MALFORMED = frozenset({errno.EINVAL, zmq.EPROTONOSUPPORT, zmq.ENOCOMPATPROTO})


class BindError(GeneraldomoError, zmq.ZMQError):
    """An endpoint that could not be bound; the message names it, says why and gives the form endpoints take.
    ``malformed``: the endpoint itself is wrong (a usage error), rather than taken or not allowed. A
    ``zmq.ZMQError`` too (its ``errno`` is pyzmq's), so code written for pyzmq catches it as one.

    Args:
        transport: the transport of the socket (``router``, ``server``).
        endpoint: the endpoint that could not be bound (``.endpoint``).
        error: pyzmq's error.

    Example::

        try:
            Broker("router", ["tcp://127.0.0.1:5555"]).start()  # another program listens there
        except BindError as error:
            print(error)  # cannot bind the router endpoint 'tcp://127.0.0.1:5555': Address already in use; ...
    """

    def __init__(self, transport: str, endpoint: str, error: zmq.ZMQError) -> None:
        self.endpoint = endpoint
        self.malformed = error.errno in _MALFORMED
        reason = zmq.strerror(error.errno) if error.errno else str(error)
        text = f"cannot bind the {transport} endpoint {endpoint!r}: {reason}; expected {FORMS[True]}"
        super().__init__(error.errno, text)


def bind(socket: zmq.Socket[Any], transport: str, endpoint: str) -> None:
    """Bind ``socket`` to ``endpoint``; :class:`BindError` if it cannot be."""
    try:
        socket.bind(endpoint)
    except zmq.ZMQError as error:
        raise BindError(transport, endpoint, error) from error

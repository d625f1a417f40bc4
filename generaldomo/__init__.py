"""generaldomo: a Majordomo-style task broker on ZeroMQ with pluggable service resolvers.

The public API: :class:`Broker` (embeddable, over ROUTER and/or SERVER links), :class:`Client` (shared by any
number of threads) and :class:`Worker`; :class:`BrokerCore` is the sans-IO state machine underneath.

Layout: :mod:`generaldomo.sansio` holds the IO-free state machines, :mod:`generaldomo.io` the sockets, threads
and clocks around them, :mod:`generaldomo.peers` the client and worker, :mod:`generaldomo.cli` the command.
"""

import sys as _sys
from typing import TYPE_CHECKING as _TYPE_CHECKING

__version__ = "0.1.0"

from generaldomo import compat as _compat
from generaldomo.errors import (
    AppImportError,
    AppSpecError,
    ClientClosed,
    ContentTypeError,
    DecodeError,
    DiscoveryError,
    DraftUnavailable,
    GeneraldomoError,
    HandshakeFailed,
    KeyFileError,
    NotFound,
    RequestExpired,
    RequestFailed,
    RequestRejected,
    RequestTimeout,
    ResolveError,
    ServiceUnavailable,
    SettingsError,
    StateError,
    WorkerError,
    WorkerStopped,
)
from generaldomo.io.broker import Broker
from generaldomo.io.locator import Where
from generaldomo.io.transport import Transport
from generaldomo.peers.aio import AsyncClient
from generaldomo.peers.app import App
from generaldomo.peers.client import Client, Reply
from generaldomo.peers.reject import Reject
from generaldomo.peers.typed import TypedClient
from generaldomo.peers.worker import Worker
from generaldomo.sansio.core import BrokerCore, Peer, Send, Settings
from generaldomo.sansio.resolver import NameResolver, Resolver
from generaldomo.sansio.service import Service

# The module paths of releases before the layers (generaldomo.core, generaldomo.client...): lazy, deprecated.
if not any(isinstance(finder, _compat.MovedFinder) for finder in _sys.meta_path):
    _sys.meta_path.insert(0, _compat.MovedFinder())
if not _TYPE_CHECKING:  # (type checkers see only the names below, not the deprecated ones)
    __getattr__ = _compat.moved_attribute

__all__ = [
    "App",
    "AppImportError",
    "AppSpecError",
    "AsyncClient",
    "Broker",
    "BrokerCore",
    "Client",
    "ClientClosed",
    "ContentTypeError",
    "DecodeError",
    "DiscoveryError",
    "DraftUnavailable",
    "GeneraldomoError",
    "HandshakeFailed",
    "KeyFileError",
    "NameResolver",
    "NotFound",
    "Peer",
    "Reject",
    "Reply",
    "RequestExpired",
    "RequestFailed",
    "RequestRejected",
    "RequestTimeout",
    "ResolveError",
    "Resolver",
    "Send",
    "Service",
    "ServiceUnavailable",
    "Settings",
    "SettingsError",
    "StateError",
    "Transport",
    "TypedClient",
    "Where",
    "Worker",
    "WorkerError",
    "WorkerStopped",
    "__version__",
]

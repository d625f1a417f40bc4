"""generaldomo: a Majordomo-style task broker on ZeroMQ with pluggable service resolvers.

The public API: :class:`Broker` (embeddable, over ROUTER and/or SERVER links), :class:`Client` (shared by any
number of threads) and :class:`Worker`; :class:`BrokerCore` is the sans-IO state machine underneath.

Layout: :mod:`generaldomo.sansio` holds the IO-free state machines, :mod:`generaldomo.io` the sockets, threads
and clocks around them, :mod:`generaldomo.peers` the client and worker, :mod:`generaldomo.cli` the command.
"""

import importlib as _importlib
import sys as _sys

__version__ = "0.1.0"

from generaldomo.errors import (
    AppImportError,
    ClientClosed,
    ContentTypeError,
    DecodeError,
    DiscoveryError,
    DraftUnavailable,
    GeneraldomoError,
    HandshakeFailed,
    KeyFileError,
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

# Module paths of releases before the package was split into layers; they keep working.
_MOVED = {
    **{name: f"generaldomo.sansio.{name}" for name in "events codec protocol core service flow stats mmi".split()},
    "resolver": "generaldomo.sansio.resolver",
    "resolvers": "generaldomo.sansio.resolvers",
    **{
        f"resolvers.{name}": f"generaldomo.sansio.resolvers.{name}"
        for name in ("attributes", "balanced", "descriptions")
    },
    **{name: f"generaldomo.io.{name}" for name in "links broker connection inproc beacon metrics bridge".split()},
    "client": "generaldomo.peers.client",
    "worker": "generaldomo.peers.worker",
    "status_view": "generaldomo.cli.status_view",
}
for _old, _new in _MOVED.items():
    _module = _sys.modules[f"{__name__}.{_old}"] = _importlib.import_module(_new)
    if "." not in _old:
        globals()[_old] = _module

__all__ = [
    "App",
    "AppImportError",
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
    "Worker",
    "WorkerError",
    "WorkerStopped",
    "__version__",
]

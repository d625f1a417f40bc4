"""generaldomo: a Majordomo-style task broker on ZeroMQ with pluggable service resolvers.

The public API: :class:`Broker` (embeddable, over ROUTER and/or SERVER links), :class:`Client` (shared by any
number of threads) and :class:`Worker`; :class:`BrokerCore` is the sans-IO state machine underneath.

Layout: :mod:`generaldomo.sansio` holds the IO-free state machines, :mod:`generaldomo.io` the sockets, threads
and clocks around them, :mod:`generaldomo.peers` the client and worker, :mod:`generaldomo.cli` the command.
"""

import importlib as _importlib
import sys as _sys
from typing import TYPE_CHECKING as _TYPE_CHECKING

__version__ = "0.1.0"

from generaldomo import compat as _compat
from generaldomo import compiled as _compiled
from generaldomo import errors as _errors
from generaldomo.errors import *  # noqa: F403  (the error family: every name of errors.__all__)

if _TYPE_CHECKING:
    from generaldomo.io.broker import Broker
    from generaldomo.io.peer.locator import Where
    from generaldomo.io.transport import BindError, Transport
    from generaldomo.peers.aio import AsyncClient
    from generaldomo.peers.app import App
    from generaldomo.peers.client import Client, Reply
    from generaldomo.peers.reject import Reject
    from generaldomo.peers.typed import TypedClient
    from generaldomo.peers.worker import Worker
    from generaldomo.sansio.broker.core import BrokerCore, Peer, Send, Settings
    from generaldomo.sansio.broker.services.resolver import NameResolver, Resolver
    from generaldomo.sansio.broker.services.service import Service
    from generaldomo.sansio.wire.tracecontext import TraceContext

# The public names below are imported when first used, so that ``import generaldomo.cli`` (every command, even
# ``--version``) does not load the broker, the dashboard and the rest that one command does not need.
_LAZY: dict[str, str] = {
    "Broker": "generaldomo.io.broker",
    "Where": "generaldomo.io.peer.locator",
    "Transport": "generaldomo.io.transport",
    "BindError": "generaldomo.io.transport",
    "AsyncClient": "generaldomo.peers.aio",
    "App": "generaldomo.peers.app",
    "Client": "generaldomo.peers.client",
    "Reply": "generaldomo.peers.client",
    "Reject": "generaldomo.peers.reject",
    "TypedClient": "generaldomo.peers.typed",
    "Worker": "generaldomo.peers.worker",
    "BrokerCore": "generaldomo.sansio.broker.core",
    "Peer": "generaldomo.sansio.broker.core",
    "Send": "generaldomo.sansio.broker.core",
    "Settings": "generaldomo.sansio.broker.core",
    "NameResolver": "generaldomo.sansio.broker.services.resolver",
    "Resolver": "generaldomo.sansio.broker.services.resolver",
    "Service": "generaldomo.sansio.broker.services.service",
    "TraceContext": "generaldomo.sansio.wire.tracecontext",
}

# The compiled sans-IO core, when it is built and in use (generaldomo.compiled): found before the .py modules.
_compiled.install()

# The module paths of releases before the layers (generaldomo.core, generaldomo.client...): lazy, deprecated.
if not any(isinstance(finder, _compat.MovedFinder) for finder in _sys.meta_path):
    _sys.meta_path.insert(0, _compat.MovedFinder())
if not _TYPE_CHECKING:  # (type checkers see only the names below, not the deprecated ones)

    def __getattr__(name: str) -> object:
        """A public name, imported at its first use; else a moved module (deprecated)."""
        home = _LAZY.get(name)
        if home is None:
            return _compat.moved_attribute(name)
        value = getattr(_importlib.import_module(home), name)
        globals()[name] = value  # later uses find it without this function
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *_LAZY})


__all__ = [
    "App",
    "AsyncClient",
    "BindError",
    "Broker",
    "BrokerCore",
    "Client",
    "NameResolver",
    "Peer",
    "Reject",
    "Reply",
    "Resolver",
    "Send",
    "Service",
    "Settings",
    "TraceContext",
    "Transport",
    "TypedClient",
    "Where",
    "Worker",
    "__version__",
]
__all__ += _errors.__all__  # the error family, declared once in errors.py

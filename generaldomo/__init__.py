"""generaldomo: a Majordomo-style task broker on ZeroMQ with pluggable service resolvers.

The public API: :class:`Broker` (embeddable, over ROUTER and/or SERVER links), :class:`Client` (shared by any
number of threads) and :class:`Worker`; :class:`BrokerCore` is the sans-IO state machine underneath.
"""

__version__ = "0.1.0"

from generaldomo.broker import Broker
from generaldomo.client import Client, ClientClosed, Reply, RequestFailed
from generaldomo.core import BrokerCore, Peer, Send, Settings
from generaldomo.resolver import NameResolver, ResolveError, Resolver
from generaldomo.service import Service
from generaldomo.worker import Worker

__all__ = [
    "Broker",
    "BrokerCore",
    "Client",
    "ClientClosed",
    "NameResolver",
    "Peer",
    "Reply",
    "RequestFailed",
    "ResolveError",
    "Resolver",
    "Send",
    "Service",
    "Settings",
    "Worker",
    "__version__",
]

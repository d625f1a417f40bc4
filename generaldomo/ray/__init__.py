"""generaldomo on a Ray cluster (``pip install 'generaldomo[ray]'``): worker pools as Ray actors, and one
shared client per Ray worker process for tasks that call services through the broker.

- :class:`WorkerPool` starts generaldomo workers as Ray actors, each with its own resources and description,
  grows and shrinks at run time; Ray restarts dead actors, which register again.
- :func:`client` and :func:`request` give each process one thread-safe :class:`generaldomo.Client`, so the
  broker's per-service flow limits apply to every task of the cluster.
- :func:`start_local` starts a Ray on this machine bound to loopback.

The broker itself runs anywhere its peers can reach (``generaldomo broker --bind tcp://HOST:PORT``).
"""

from generaldomo.ray.clients import client, close, request
from generaldomo.ray.handlers import load_handler
from generaldomo.ray.host import WorkerHost
from generaldomo.ray.local import start_local
from generaldomo.ray.pool import WorkerPool

__all__ = ["WorkerHost", "WorkerPool", "client", "close", "load_handler", "request", "start_local"]

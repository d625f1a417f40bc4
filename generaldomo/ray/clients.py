"""One shared :class:`generaldomo.Client` per process, for Ray tasks (or any code) that call services.

Rules: the first call in a process for an ``(endpoint, transport)`` makes the client; every later call, from
any thread, gets the same one (a ``Client`` is thread-safe), so thousands of tasks that a Ray worker process
runs one after another, or at once in threads, share one connection. Clients are closed at interpreter exit
(``atexit``) or by :func:`close`. A forked child never reuses its parent's client (sockets do not survive a
fork): it makes its own. Without an endpoint, ``GENERALDOMO_BROKER`` names the broker (set it for every Ray
worker with ``ray.init(runtime_env={"env_vars": {"GENERALDOMO_BROKER": endpoint}})``) or a beacon finds it.
Because every request goes through one broker, its per-service flow limits hold across the whole cluster.
"""

from __future__ import annotations

import atexit
import os
import threading
from typing import Any

from generaldomo.peers.client import Client, Payload, Reply

__all__ = ["client", "close", "request"]


class _Shared:
    """The process's clients, the pid that made them, and whether ``atexit`` knows to close them."""

    lock = threading.Lock()
    clients: dict[tuple[str | None, str], Client] = {}
    pid = os.getpid()
    closes_at_exit = False


def client(endpoint: str | None = None, transport: str = "router", **options: Any) -> Client:
    """This process's client for ``endpoint`` over ``transport``; ``options`` (``heartbeat_interval``,
    ``liveness``) apply when it is made by this call.

    Args:
        endpoint: the broker's endpoint (None: found as the peers find it).
        transport: ``router`` or ``server``.
        options: what :class:`generaldomo.Client` takes.

    Example::

        @ray.remote
        def thumbnail(image: bytes) -> bytes:
            return gdray.client("tcp://10.0.0.5:5555").request("resize", image, timeout=60).payload
    """
    key = (endpoint, transport)
    with _Shared.lock:
        if _Shared.pid != os.getpid():  # a forked child: the parent's clients are not ours to use or close
            _Shared.clients = {}
            _Shared.pid = os.getpid()
        shared = _Shared.clients.get(key)
        if shared is None:
            shared = _Shared.clients[key] = Client(endpoint, transport, **options)
            if not _Shared.closes_at_exit:
                atexit.register(close)
                _Shared.closes_at_exit = True
        return shared


def request(
    description: str | bytes,
    payload: Payload = b"",
    timeout: float | None = None,
    endpoint: str | None = None,
    transport: str = "router",
) -> Reply:
    """Send one request with this process's client and wait for its :class:`~generaldomo.Reply`.

    Args:
        description: the request description.
        payload: bytes or frames.
        timeout: seconds to wait (None: the client's default).
        endpoint: the broker's endpoint (None: found).
        transport: ``router`` or ``server``.

    Example::

        @ray.remote
        def thumbnail(image: bytes) -> bytes:
            return gdray.request("resize", image, timeout=60, endpoint="tcp://10.0.0.5:5555").payload
    """
    return client(endpoint, transport).request(description, payload, timeout)


def close() -> None:
    """Close this process's clients (their waiting requests fail with ``ClientClosed``).

    Example::

        gdray.close()  # in a Ray worker process that is done with the broker
    """
    with _Shared.lock:
        closing = list(_Shared.clients.values()) if _Shared.pid == os.getpid() else []
        _Shared.clients = {}
    for shared in closing:
        shared.close()

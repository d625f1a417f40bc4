"""The inside of one pool actor: ``threads`` generaldomo workers serving one description in this process.

Rules: everything is made in ``__init__``, so that when Ray restarts a dead actor (it runs ``__init__`` again
in a new process) the new workers register with the broker like any new worker; the old ones are forgotten
by the broker when their heartbeats stop, and their tasks reissued. A task counts from the moment the handler
starts to when it returns. It knows nothing of Ray's API: :mod:`generaldomo.ray.pool` makes it an actor.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any

from generaldomo.peers.worker import Worker
from generaldomo.ray.handlers import HandlerSpec, load_handler

__all__ = ["STOP_GRACE", "WorkerHost"]

STOP_GRACE = 10.0  # seconds stop() waits for running handlers


class WorkerHost:
    """Serves ``description`` with ``threads`` workers, each running ``handler`` on its own thread.

    Args:
        endpoint: the broker's endpoint (None: found as the peers find it).
        description: the service description.
        handler: the handler, or ``"module:attr"`` naming it.
        transport: ``router`` or ``server``.
        threads: workers in this actor.
        worker_options: what :class:`generaldomo.Worker` takes besides these.

    Example::

        host = ray.remote(WorkerHost).remote("tcp://10.0.0.5:5555", "resize", "images:resize", threads=4)
        ray.get(host.info.remote())
    """

    def __init__(
        self,
        endpoint: str | None,
        description: str | bytes,
        handler: HandlerSpec,
        transport: str = "router",
        threads: int = 1,
        worker_options: dict[str, Any] | None = None,
    ) -> None:
        self.description = description
        self._handler = load_handler(handler)
        self._lock = threading.Lock()
        self._running = 0
        self._done = 0
        options = worker_options or {}
        self._workers = [Worker(endpoint, description, self._counted, transport, **options) for _ in range(threads)]
        self._threads = [
            threading.Thread(target=worker.serve, name=f"generaldomo-ray-worker-{n}", daemon=True)
            for n, worker in enumerate(self._workers)
        ]
        for thread in self._threads:
            thread.start()

    def _counted(self, payload: Any) -> Any:
        with self._lock:
            self._running += 1
        try:
            return self._handler(payload)
        finally:
            with self._lock:
                self._running -= 1
                self._done += 1

    def info(self) -> dict[str, Any]:
        """Where this actor runs and what it has done: pid, host, description, workers, running, done."""
        with self._lock:
            running, done = self._running, self._done
        description = self.description.decode() if isinstance(self.description, bytes) else self.description
        return {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "description": description,
            "workers": sum(thread.is_alive() for thread in self._threads),
            "running": running,
            "done": done,
        }

    def stop(self, grace: float = STOP_GRACE) -> dict[str, Any]:
        """Stop every worker (each tells the broker it leaves, so a running task is reissued at once); wait up
        to ``grace`` seconds for them; return :meth:`info`."""
        for worker in self._workers:
            worker.stop()
        deadline = time.monotonic() + grace
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return self.info()

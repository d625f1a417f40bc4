"""A pool of generaldomo workers as Ray actors, placed by Ray's scheduler, grown and shrunk at run time.

Rules: each actor is a :class:`~generaldomo.ray.host.WorkerHost` with its own Ray resource request (CPUs,
GPUs, custom resources) and its own service description; Ray restarts an actor that dies (``max_restarts``)
and the restarted actor's workers register again. The broker, not the pool, reissues the task of an actor
that dies mid-task. Shrinking stops idle actors first and tells the broker each worker leaves. The pool is
driven from one thread (the Ray driver or any task holding it); it knows nothing of the broker's protocol.
"""

from __future__ import annotations

import time
from typing import Any

import ray

from generaldomo.ray.handlers import HandlerSpec
from generaldomo.ray.host import STOP_GRACE, WorkerHost

__all__ = ["RemoteHost", "WorkerPool"]

RemoteHost = ray.remote(WorkerHost)


class WorkerPool:
    """``size`` actors serving ``description`` with ``handler`` through the broker at ``endpoint``.

    ``num_cpus``, ``num_gpus``, ``resources`` and ``max_restarts`` (``-1``: always restart) are the Ray
    options of each actor; ``ray_options`` passes any other (``runtime_env``, ``scheduling_strategy``,
    ``memory``, ...). ``threads`` workers run in each actor (more than one for handlers that mostly wait).
    ``worker_options`` go to each :class:`generaldomo.Worker` (``heartbeat_interval``, ``liveness``).
    :meth:`grow` can give new actors another description and other resources.

    Args:
        endpoint: the broker's endpoint (None: found as the peers find it, in each actor).
        description: the service description.
        handler: the handler, or ``"module:attr"`` naming it.
        size: actors to start now.
        transport: ``router`` or ``server``.
        threads: see above.
        num_cpus: see above.
        num_gpus: see above.
        resources: see above.
        max_restarts: see above.
        worker_options: see above.
        ray_options: see above.

    Example::

        import generaldomo.ray as gdray

        gdray.start_local(num_cpus=2)
        pool = gdray.WorkerPool("tcp://127.0.0.1:5555", "resize", "images:resize", size=2)
        pool.wait()
        pool.resize(4)
        pool.close()
    """

    def __init__(
        self,
        endpoint: str | None,
        description: str | bytes,
        handler: HandlerSpec,
        size: int = 0,
        *,
        transport: str = "router",
        threads: int = 1,
        num_cpus: float = 1,
        num_gpus: float = 0,
        resources: dict[str, float] | None = None,
        max_restarts: int = -1,
        worker_options: dict[str, Any] | None = None,
        **ray_options: Any,
    ) -> None:
        self.endpoint = endpoint
        self.description = description
        self.handler = handler
        self.transport = transport
        self.threads = threads
        self.worker_options = dict(worker_options or {})
        self.ray_options: dict[str, Any] = {
            "num_cpus": num_cpus,
            "num_gpus": num_gpus,
            "resources": dict(resources or {}),
            "max_restarts": max_restarts,
            **ray_options,
        }
        self.actors: list[Any] = []  # Ray actor handles, oldest first
        self.grow(size)

    def __len__(self) -> int:
        return len(self.actors)

    def grow(self, count: int, description: str | bytes | None = None, **ray_options: Any) -> list[Any]:
        """Start ``count`` more actors (``description`` and ``ray_options`` override the pool's); returns their
        handles. They start in the background: :meth:`wait` waits until they run.

        Args:
            count: actors to add.
            description: their service description (default: the pool's).
            ray_options: their Ray options (default: the pool's).
        """
        options = {**self.ray_options, **ray_options}
        described = self.description if description is None else description
        started = [
            RemoteHost.options(**options).remote(
                self.endpoint, described, self.handler, self.transport, self.threads, self.worker_options
            )
            for _ in range(count)
        ]
        self.actors += started
        return started

    def shrink(self, count: int, grace: float = STOP_GRACE) -> list[dict[str, Any]]:
        """Stop ``count`` actors, idle ones first and then the newest; each worker tells the broker it leaves
        (a task still running after ``grace`` seconds is reissued). Returns the stopped actors' last info.

        Args:
            count: actors to stop.
            grace: seconds a running task has to finish.
        """
        count = min(count, len(self.actors))
        if count <= 0:
            return []
        infos = self.info()
        order = sorted(range(len(self.actors)), key=lambda n: (infos[n].get("running", 0) > 0, -n))
        chosen = set(order[:count])
        leaving = [actor for n, actor in enumerate(self.actors) if n in chosen]
        self.actors = [actor for n, actor in enumerate(self.actors) if n not in chosen]
        return self._stop(leaving, grace)

    def resize(self, size: int) -> None:
        """Grow or shrink to ``size`` actors.

        Args:
            size: the number of actors wanted.
        """
        if size > len(self.actors):
            self.grow(size - len(self.actors))
        else:
            self.shrink(len(self.actors) - size)

    def wait(self, timeout: float | None = 60.0) -> list[dict[str, Any]]:
        """Wait until every actor runs; raises ``RuntimeError`` if one cannot start. Returns :meth:`info`.

        Args:
            timeout: seconds to wait (None: no limit).
        """
        infos = self.info(timeout)
        failed = [info["error"] for info in infos if "error" in info]
        if failed:
            raise RuntimeError(f"{len(failed)} of {len(infos)} pool actors did not start: {failed[0]}")
        return infos

    def info(self, timeout: float | None = 60.0) -> list[dict[str, Any]]:
        """Each actor's pid, host, description, live workers, running and done tasks, in pool order (``error``
        instead for an actor that is gone for good).

        Args:
            timeout: seconds to wait for the actors' answers (None: no limit).
        """
        return _gather([actor.info.remote() for actor in self.actors], timeout)

    def close(self, grace: float = STOP_GRACE) -> None:
        """Stop every actor.

        Args:
            grace: seconds a running task has to finish.
        """
        leaving, self.actors = self.actors, []
        self._stop(leaving, grace)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @staticmethod
    def _stop(actors: list[Any], grace: float) -> list[dict[str, Any]]:
        """Stop the workers of ``actors`` (a dead actor is skipped), then end the actors for good."""
        infos = _gather([actor.stop.remote(grace) for actor in actors], grace + 30.0)
        for actor in actors:
            ray.kill(actor, no_restart=True)
        return infos


def _gather(refs: list[Any], timeout: float | None) -> list[dict[str, Any]]:
    """The results of actor calls, in order; ``{"error": ...}`` for a call whose actor died or timed out."""
    deadline = None if timeout is None else time.monotonic() + timeout
    results: list[dict[str, Any]] = []
    for ref in refs:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            results.append(ray.get(ref, timeout=left))
        except (ray.exceptions.RayError, TimeoutError) as error:
            results.append({"error": f"{type(error).__name__}: {error}"})
    return results

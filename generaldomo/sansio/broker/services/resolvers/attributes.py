"""The ``attributes`` resolver: requests go only to workers whose attributes satisfy them, best first.

Descriptions are JSON objects. A worker announces ``{"service": "fft", "gpu": "a100"}``; a request
``{"service": "fft"}`` may go to any fft worker, while ``{"service": "fft", "gpu": "a100"}`` (or
``"gpu": ["a100", "v100"]``) goes only to workers that satisfy it. Among the waiting workers that satisfy a
request, the best one takes it: the highest numeric ``"priority"`` attribute first, then the order of the
``prefer`` option (``prefer="gpu:a100,v100,t4"`` ranks a100 workers before v100 before t4), then the one that
waited longest. Requests are considered oldest first; a request no waiting worker satisfies waits without
holding back those behind it. This module knows nothing of sockets or clocks.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from generaldomo.sansio.broker.services.resolvers.descriptions import Attributes, parse, satisfies
from generaldomo.sansio.broker.services.service import Service

__all__ = ["AttributeResolver", "AttributeService"]


class AttributeService(Service):
    """One service name; pairs each request with the best waiting worker that satisfies it."""

    def __init__(self, name: str, prefer: tuple[str, list[Any]] | None = None) -> None:
        super().__init__(name)
        self._prefer = prefer

    def rank(self, offer: Attributes) -> tuple[float, int]:
        """Sort key of a worker's attributes: lower is better."""
        priority = offer.get("priority", 0)
        preference = len(self._prefer[1]) if self._prefer else 0
        if self._prefer is not None:
            key, order = self._prefer
            if offer.get(key) in order:
                preference = order.index(offer[key])
        return (-priority if isinstance(priority, int | float) else 0, preference)

    def best_worker(self, demand: Attributes) -> Any:
        best, best_rank = None, None
        for worker in self.waiting:
            offer = parse(worker.description)[1]
            if satisfies(offer, demand):
                rank = self.rank(offer)
                if best_rank is None or rank < best_rank:
                    best, best_rank = worker, rank
        return best

    def next_pair(self) -> tuple[Any, Any] | None:
        if not self.waiting:
            return None
        for task in self.pending:
            worker = self.best_worker(parse(task.description)[1])
            if worker is not None:
                self.pending.remove(task)
                self.waiting.remove(worker)
                return worker, task
        return None

    def can_serve(self, description: bytes) -> bool:
        demand = parse(description)[1]
        return any(satisfies(parse(w.description)[1], demand) for w in self.workers)


class AttributeResolver:
    """Resolver for JSON descriptions; one :class:`AttributeService` per ``"service"`` name."""

    service_class: type[AttributeService] = AttributeService

    def __init__(self, prefer: str = "") -> None:
        self._prefer = _parse_prefer(prefer)
        self._services: dict[str, AttributeService] = {}

    def for_worker(self, description: bytes) -> Service:
        return self._service(parse(description)[0])

    def for_request(self, description: bytes) -> Service:
        return self._service(parse(description)[0])

    def find(self, description: bytes) -> Service | None:
        return self._services.get(parse(description)[0])

    def services(self) -> Iterable[Service]:
        return self._services.values()

    def forget(self, service: Service) -> None:
        if self._services.get(service.name) is service:
            del self._services[service.name]

    def _service(self, name: str) -> AttributeService:
        service = self._services.get(name)
        if service is None:
            service = self._services[name] = self.service_class(name, self._prefer)
        return service


def _parse_prefer(prefer: str) -> tuple[str, list[Any]] | None:
    """``"gpu:a100,v100,t4"`` -> ``("gpu", ["a100", "v100", "t4"])``."""
    if not prefer:
        return None
    key, sep, values = prefer.partition(":")
    if not sep or not key or not values:
        raise ValueError(f'prefer must look like "key:best,next,...", not {prefer!r}')
    return key, values.split(",")

"""The ``balanced`` resolver: spread in-flight work across resources (hosts, GPUs, ...), using broker state.

Descriptions are JSON objects as for the ``attributes`` resolver; workers also name the resource they run
on, by default ``{"service": "render", "host": "node7"}`` (option ``key`` changes the attribute). Among the
waiting workers that satisfy a request, the one whose resource has the fewest tasks in flight right now,
counted over every service, takes it; ties go to the worker that waited longest. So ten tasks and two hosts
with five idle workers each run five per host, not ten on the host whose workers registered first. This
module knows nothing of sockets or clocks; it reads which workers are busy from their ``task``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from generaldomo.sansio.broker.services.resolvers.attributes import AttributeResolver, AttributeService
from generaldomo.sansio.broker.services.resolvers.descriptions import Attributes, parse

__all__ = ["BalancedResolver", "BalancedService"]


class BalancedService(AttributeService):
    """Ranks satisfying workers by the current load of their resource."""

    def __init__(self, name: str, load: Callable[[], Counter[Any]], key: str) -> None:
        super().__init__(name)
        self._load = load
        self._key = key
        self._current: Counter[Any] = Counter()

    def rank(self, offer: Attributes) -> tuple[float, int]:
        return (self._current[offer.get(self._key)], 0)

    def next_pair(self) -> tuple[Any, Any] | None:
        if not self.waiting or not self.pending:
            return None
        self._current = self._load()
        return super().next_pair()


class BalancedResolver(AttributeResolver):
    """Resolver that balances in-flight tasks across the resource named by ``key``."""

    def __init__(self, key: str = "host") -> None:
        super().__init__()
        self._key = key

    def _service(self, name: str) -> AttributeService:
        service = self._services.get(name)
        if service is None:
            service = self._services[name] = BalancedService(name, self.load, self._key)
        return service

    def load(self) -> Counter[Any]:
        """Tasks in flight per resource, over every service."""
        busy: Counter[Any] = Counter()
        for service in self._services.values():
            for worker in service.workers:
                if worker.task is not None:
                    busy[parse(worker.description)[1].get(self._key)] += 1
        return busy

"""Service resolvers (SR): the plug-in that maps descriptions to services.

This module owns the resolver interface and the default resolver. A worker's service description (SDO) and a
client's request description (RDO) are opaque bytes to the broker; the resolver turns each into the
:class:`~generaldomo.sansio.broker.services.service.Service` (SMO) that queues it. It knows nothing of sockets, clocks,
dialects or of how the broker dispatches.
"""

from __future__ import annotations

import pkgutil
from collections.abc import Iterable
from importlib.metadata import entry_points
from typing import Any, Protocol, runtime_checkable

import generaldomo.errors as errors
from generaldomo.compat import moved_names
from generaldomo.sansio.broker.services.service import Service
from generaldomo.sansio.wire.limits import SERVICE_NAME

# the errors' old paths here: the same classes, with a DeprecationWarning (they live in generaldomo.errors)
__getattr__ = moved_names(__name__, "generaldomo", ["ResolveError"])

__all__ = ["ENTRY_POINTS", "REQUIRED", "NameResolver", "Resolver", "load_resolver"]


@runtime_checkable
class Resolver(Protocol):
    """Maps service descriptions (from workers) and request descriptions (from clients) to services.

    Example::

        Broker("router", ["tcp://*:5555"], resolver=AttributeResolver())  # or: generaldomo broker --resolver attributes
    """

    def for_worker(self, description: bytes) -> Service:
        """The service a worker with this description joins; may raise :class:`ResolveError`.

        Args:
            description: the worker's service description.
        """
        ...

    def for_request(self, description: bytes) -> Service:
        """The service that queues a request with this description; may raise :class:`ResolveError`.

        Args:
            description: the request description.
        """
        ...

    def find(self, description: bytes) -> Service | None:
        """The service a request would go to, without creating one; None if there is none yet.

        Args:
            description: the request description.
        """
        ...

    def services(self) -> Iterable[Service]:
        """Every service made so far (and not forgotten)."""
        ...

    def forget(self, service: Service) -> None:
        """Drop ``service``, which the broker found idle (no workers, no tasks, no flow limits); a later
        description that resolves to it makes a new one. Optional: the broker never forgets the services of
        a resolver without this method.

        Args:
            service: the service to drop.
        """
        ...


REQUIRED = ("for_worker", "for_request", "find", "services")  # what a resolver must have; forget is optional


class NameResolver:
    """Descriptions are plain service names, as in Majordomo: workers and requests meet on equal names.

    Example:
        >>> from generaldomo import NameResolver
        >>> resolver = NameResolver()
        >>> resolver.for_worker(b"echo") is resolver.for_request(b"echo")
        True
    """

    def __init__(self) -> None:
        # by name (the broker core reads it for a name already known, when the resolver is this class itself)
        self._services: dict[bytes, Service] = {}

    def for_worker(self, description: bytes) -> Service:
        """The service named ``description`` (made if new).

        Args:
            description: the service name, UTF-8.
        """
        return self.for_request(description)

    def for_request(self, description: bytes) -> Service:
        """The service named ``description`` (made if new).

        Args:
            description: the service name, UTF-8.
        """
        service = self._services.get(description)
        if service is None:
            if not SERVICE_NAME.fits(description):
                raise errors.ResolveError(
                    "empty service name" if not description else SERVICE_NAME.refusal(len(description))
                )
            try:
                name = description.decode()
            except UnicodeDecodeError:
                raise errors.ResolveError("service name is not UTF-8") from None
            service = self._services[description] = Service(name)
        return service

    def find(self, description: bytes) -> Service | None:
        """The service named ``description``, or None.

        Args:
            description: the service name, UTF-8.
        """
        return self._services.get(description)

    def services(self) -> Iterable[Service]:
        """Every service made so far."""
        return self._services.values()

    def forget(self, service: Service) -> None:
        """Drop ``service``.

        Args:
            service: the service to drop.
        """
        key = service.name.encode()
        if self._services.get(key) is service:
            del self._services[key]


ENTRY_POINTS = "generaldomo.resolvers"


def load_resolver(spec: str, options: dict[str, str] | None = None) -> Resolver:
    """Make a resolver from a name registered in the ``generaldomo.resolvers`` entry-point group (``name``,
    ``attributes``, ``balanced``, or a third-party one) or from ``module:attr`` (a class or factory), called
    with ``options`` as keyword arguments."""
    module_name, sep, attr = spec.partition(":")
    factory: Any
    if not sep:
        found = entry_points(group=ENTRY_POINTS, name=spec)
        if not found:
            known = ", ".join(sorted(ep.name for ep in entry_points(group=ENTRY_POINTS)))
            raise ValueError(f"no resolver named {spec!r} (known: {known}); or give module:attr")
        factory = next(iter(found)).load()
    elif not module_name or not attr:
        raise ValueError(f"resolver must be given as a name or module:attr, not {spec!r}")
    else:
        factory = pkgutil.resolve_name(spec)
    resolver = factory(**(options or {}))
    missing = [name for name in REQUIRED if not callable(getattr(resolver, name, None))]
    if missing:
        raise TypeError(f"{spec} made {resolver!r}, which lacks the Resolver methods {', '.join(missing)}")
    return resolver  # type: ignore[no-any-return]

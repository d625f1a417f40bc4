"""Services and the resolvers that map descriptions to them: the broker's matching logic, apart from its core.

Rules of this package: a service (:mod:`.service`) pairs its waiting workers with its pending tasks and keeps
their statistics (:mod:`.stats`); a resolver (:mod:`.resolver`, and the built-in plug-ins in :mod:`.resolvers`)
turns a description into the service that queues it. It imports flow control
(:mod:`generaldomo.sansio.broker.flow`), the wire and the package root, never the core.
"""

__all__: list[str] = []

"""The broker, without IO: the core that pairs requests with workers, and what it holds.

Rules of this package: its own modules are the core (:mod:`.core`) and the records, states, actions, reports
and management answers it keeps or makes; below them, and never importing them, are its sub-packages: flow
control (:mod:`.flow`), the services and their resolvers (:mod:`.services`) and the accounts of what the broker
holds for its peers (:mod:`.accounts`). It imports the wire, the configuration and the package root, never
:mod:`generaldomo.sansio.peer`.
"""

__all__: list[str] = []

"""The broker core and its parts: the sans-IO state machine that pairs client requests with workers.

The core (:mod:`generaldomo.sansio.broker.core.core`) receives, ticks, accepts, dispatches and completes; beside it
are the parts it owns, each with its state and a narrow interface (its module's docstring says what it owns, and
its ``Core`` protocol what it may call of the core). The package's names are the core's: import them from here.
"""

from generaldomo.sansio.broker.core.core import (
    HOLDINGS,
    MMI_PREFIX,
    PARTS,
    BrokerCore,
    Peer,
    Send,
    Settings,
    Task,
    WorkerRecord,
)

__all__ = ["HOLDINGS", "MMI_PREFIX", "PARTS", "BrokerCore", "Peer", "Send", "Settings", "Task", "WorkerRecord"]

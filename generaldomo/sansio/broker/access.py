"""Who a peer is, as the broker's authentication layer vouches for it, and what each role may do.

This module owns the roles and the credential the IO layer hands the core with each message of an
authenticated peer (with CURVE, from the ZAP handler's user id). The core checks a credential against the
rules here (:data:`NEEDS`: the role each kind of message needs; ``mmi.flow`` changes also need ADMIN, and a
worker's READY a service its patterns allow); without authentication there is no credential and every peer
may do everything, as in plain Majordomo. It knows nothing of CURVE, ZAP or sockets.
"""

from __future__ import annotations

import dataclasses
import enum
import fnmatch
from typing import Final

from generaldomo.sansio.wire.events import (
    ClientCancel,
    ClientHeartbeat,
    ClientRequest,
    WorkerDisconnect,
    WorkerHandover,
    WorkerHeartbeat,
    WorkerReady,
    WorkerReply,
    WorkerResume,
)

__all__ = ["NEEDS", "Credential", "Role"]


class Role(enum.StrEnum):
    """What a key is allowed to be."""

    CLIENT = "client"  # submit requests, cancel its own, read mmi.service and mmi.status
    WORKER = "worker"  # register for services (those its patterns allow) and return results
    ADMIN = "admin"  # everything a client may do, and change flow limits


@dataclasses.dataclass(frozen=True, slots=True)
class Credential:
    """An authenticated peer: its public key (Z85 text) and roles; ``services`` limits a worker's services
    to those matching one of its shell-style patterns (empty: any)."""

    key: str
    roles: frozenset[Role]
    services: tuple[str, ...] = ()

    def may(self, role: Role) -> bool:
        """True when the peer holds ``role`` (an admin may do what a client may)."""
        return role in self.roles or (role is Role.CLIENT and Role.ADMIN in self.roles)

    def may_serve(self, service: str) -> bool:
        """True when a worker with this credential may register for ``service``."""
        return self.may(Role.WORKER) and (
            not self.services or any(fnmatch.fnmatchcase(service, p) for p in self.services)
        )


NEEDS: Final[dict[type, Role]] = {
    ClientRequest: Role.CLIENT,
    ClientHeartbeat: Role.CLIENT,
    ClientCancel: Role.CLIENT,
    WorkerReady: Role.WORKER,
    WorkerReply: Role.WORKER,
    WorkerResume: Role.WORKER,
    WorkerHandover: Role.WORKER,
    WorkerHeartbeat: Role.WORKER,
    WorkerDisconnect: Role.WORKER,
}

"""The broker core's hand-over: tasks and results that outlive the broker instance that dispatched them.

This module owns what a broker started on a state directory keeps of its earlier instances' work: the tickets that serve
as task ids of generaldomo clients' tasks (:mod:`generaldomo.sansio.wire.ticket`: a later instance reads which service
and request a task id was for), the *claims* of resumed workers (a worker that came back running a task of an earlier
instance, whose request has not arrived here yet), the recovery window that holds dispatch back after a restart, and the
results each GDP worker is told were taken (its next HEARTBEAT names them). The core
(:mod:`generaldomo.sansio.broker.core`) decides what a RESUME, a hand-over or a resumed result does; this part keeps the
tickets, claims and lists it needs for it. It knows nothing of sockets, clocks or frames' layout beyond the HEARTBEAT it
builds.
"""

from __future__ import annotations

from generaldomo.sansio.broker.accounts.ledger import CHARGED
from generaldomo.sansio.broker.records import Claim, RequestKey, WorkerRecord, request_key
from generaldomo.sansio.broker.services.service import Service
from generaldomo.sansio.wire import protocol
from generaldomo.sansio.wire.events import Dialect, Frame
from generaldomo.sansio.wire.ticket import Ticket, Tickets, nonce

__all__ = ["HOLDINGS", "Handover"]

HOLDINGS = {"_claims": CHARGED + "workers (a resumed worker's claim)"}  # (see generaldomo.sansio.broker.core.HOLDINGS)


class Handover:
    """Tickets, claims and the recovery window of the broker ``instance`` (see the module docstring).

    Args:
        key: the state directory's hand-over key (None: hand-over off: task ids are random, nothing is claimed).
        instance: the broker's instance id.
        hold_until: the end of the recovery window (None: dispatch is not held back).
    """

    def __init__(self, key: bytes | None, instance: bytes, hold_until: float | None) -> None:
        self._instance = instance
        self._tickets = None if key is None else Tickets(key, instance)
        self._claims: dict[RequestKey, WorkerRecord] = {}  # requests that resumed workers run, until they arrive
        self._hold_until = hold_until if self._tickets is not None else None

    @property
    def on(self) -> bool:
        """True when hand-over is on (the broker has a state directory)."""
        return self._tickets is not None

    def __len__(self) -> int:
        """How many claims wait for their requests."""
        return len(self._claims)

    def claimed(self, key: RequestKey) -> bool:
        """True when a resumed worker runs the request ``key``, which has not arrived yet."""
        return key in self._claims

    def ticket(self, task_id: bytes, service: str, owner: str | None, request_id: bytes, digest: bytes) -> bytes:
        """The id of a new task (hand-over on): a ticket for the request ``request_id`` of ``owner`` for ``service``
        with the payload ``digest``, made of the random ``task_id``."""
        assert self._tickets is not None, "hand-over is off: task ids are random"
        return self._tickets.issue(task_id, service, owner, request_id, digest)

    def foreign(self, task_id: bytes) -> Ticket | None:
        """What ``task_id`` says if it is a valid ticket of another instance on this state directory."""
        ticket = None if self._tickets is None else self._tickets.read(task_id)
        return ticket if ticket is not None and ticket.instance != self._instance else None

    # ------------------------------------------------------------------------------------------- recovery

    def recovering(self, now: float) -> bool:
        """Within the recovery window after a restart (workers of the previous instance may still claim tasks)."""
        return self._hold_until is not None and now < self._hold_until

    def hold(self, until: float) -> None:
        """Hold dispatch back until ``until`` (hand-over on): a recovery window that starts now (a passive broker of
        a pair taking over, whose peer's workers may come back running its tasks)."""
        if self._tickets is not None:
            self._hold_until = until

    def held_until(self, now: float) -> float | None:
        """Until when dispatch is held back at ``now`` (the recovery window), or None once it is over."""
        if self._hold_until is not None and now >= self._hold_until:
            self._hold_until = None
        return self._hold_until

    # ------------------------------------------------------------------------------------------- claims

    def claim(self, worker: WorkerRecord, task_id: bytes, ticket: Ticket, now: float) -> None:
        """Resumed ``worker`` runs ``task_id`` (``ticket``) since ``now``; its request has not arrived: it holds a
        place in flight of its service until it does."""
        worker.claim = Claim(task_id, ticket, now)
        self._claims[request_key(ticket.owner, ticket.request_id)] = worker
        worker.service.flow.adopt()

    def take_claim(self, key: RequestKey, service: Service, digest: bytes) -> tuple[WorkerRecord, Claim] | None:
        """The resumed worker that runs the request ``key`` that has arrived, and its claim, no longer waiting;
        None if there is none or it is not the same request (another service, description or payload)."""
        worker = self._claims.get(key)
        claim = None if worker is None else worker.claim
        if worker is None or claim is None or service is not worker.service or digest != claim.ticket.digest:
            return None
        del self._claims[key]
        worker.claim = None
        return worker, claim

    def drop_claim(self, worker: WorkerRecord) -> None:
        """``worker`` no longer runs its claimed task (it left, or its result came): its place in flight is freed."""
        claim, worker.claim = worker.claim, None
        if claim is not None:
            del self._claims[request_key(claim.ticket.owner, claim.ticket.request_id)]
            worker.service.flow.finished()

    # ------------------------------------------------------------------------------------------- heartbeats

    def heartbeat(self, worker: WorkerRecord) -> list[Frame]:
        """A HEARTBEAT for ``worker``: a GDP worker of a hand-over broker learns which results were taken."""
        if self._tickets is None or worker.dialect is not Dialect.GDP:
            return protocol.worker_command(worker.dialect, protocol.HEARTBEAT)
        taken, worker.taken = worker.taken, []
        return protocol.worker_heartbeat(self._instance, taken)

    @staticmethod
    def taken(worker: WorkerRecord, task_id: bytes) -> None:
        """Tell the worker, in its next heartbeat, that the result of ``task_id`` was taken (GDP workers)."""
        if worker.dialect is Dialect.GDP:
            taken = worker.taken
            if len(taken) >= protocol.MAX_TAKEN:
                del taken[0]  # (the worker holds at most as many results: it dropped that one already)
            taken.append(nonce(task_id))

"""The broker core's registration: what the broker does with the messages by which workers come and go.

This module owns the handling of a worker's READY (registered, or told to go: beyond ``max_workers``, beyond what its
connection may hold, an ``mmi.`` or unresolvable description, a key that may not serve its service), RESUME (registered
busy with a task of an earlier instance, which it claims or runs), HEARTBEAT, DISCONNECT and malformed messages. A
READY or RESUME that names the worker (its peer info's id) from a new connection *replaces* the registration under
that name and CURVE key: the old one leaves at once (its task reissued, or kept by a RESUME of that very task), so no
task waits for a registration whose connection is gone. A worker that goes *leaves* and its task is *reissued* through
the core; the table of workers is
:mod:`generaldomo.sansio.broker.core.workers`'s. It reaches the core only through :class:`Core`, what it may call of it.
It knows nothing of sockets, clocks or frames' layout.
"""

from __future__ import annotations

from typing import Protocol

from generaldomo.errors import ResolveError
from generaldomo.sansio.broker.accounts.ledger import OVERHEAD, ConnectionId, Holding, address_bytes, connection
from generaldomo.sansio.broker.actions import Beat, Respond
from generaldomo.sansio.broker.core.budgets import Budgets
from generaldomo.sansio.broker.core.counters import Counters
from generaldomo.sansio.broker.core.handover import Handover
from generaldomo.sansio.broker.core.reporting import Reporting
from generaldomo.sansio.broker.core.requests import MMI_PREFIX
from generaldomo.sansio.broker.core.turns import Message, Turn, dismiss, log
from generaldomo.sansio.broker.core.workers import Workers
from generaldomo.sansio.broker.records import Identity, RequestKey, Task, WorkerRecord, request_key
from generaldomo.sansio.broker.served import ServedRecently
from generaldomo.sansio.broker.services.resolver import Resolver
from generaldomo.sansio.broker.services.service import Service
from generaldomo.sansio.broker.states import TaskState, WorkerState
from generaldomo.sansio.config.settings import Settings
from generaldomo.sansio.wire import protocol
from generaldomo.sansio.wire.events import (
    Dialect,
    Malformed,
    WorkerDisconnect,
    WorkerHeartbeat,
    WorkerReady,
    WorkerResume,
)
from generaldomo.sansio.wire.ticket import request_digest

__all__ = ["Core", "Registration"]


class Core(Protocol):
    """What the registration may read and call of the core: its resolver, its table of requests, and how a
    worker waits, leaves, has its task reissued or runs a task it resumed."""

    _by_request: dict[RequestKey, Task]

    @property
    def resolver(self) -> Resolver: ...
    def _adopt(self, service: Service, where: ConnectionId) -> str | None: ...
    def _wait(self, worker: WorkerRecord, turn: Turn) -> None: ...
    def _leave(self, worker: WorkerRecord, now: float) -> None: ...
    def _reissue(self, worker: WorkerRecord, turn: Turn) -> None: ...
    def _run_at(self, task: Task, worker: WorkerRecord, task_id: bytes, since: float) -> None: ...


class Registration:
    """The workers' coming and going (see the module docstring); ``core`` is the broker core it serves, the others
    its parts and what it shares with them."""

    def __init__(
        self, core: Core, settings: Settings, counters: Counters, served: ServedRecently, workers: Workers,
        budgets: Budgets, handover: Handover, reporting: Reporting,
    ) -> None:  # fmt: skip
        self._core = core
        self._settings = settings
        self._counters = counters
        self._served = served
        self._workers = workers
        self._budgets = budgets
        self._handover = handover
        self._reporting = reporting

    def on_ready(self, event: WorkerReady, message: Message) -> None:
        known = self._workers.get(message.peer)
        if known is not None:
            log.info("worker %s sent READY again; re-registering it", known.label)
            self._core._leave(known, message.now)
            self._core._reissue(known, message)
            if event.dialect is not Dialect.GDP:  # MDP: a second READY is a protocol error
                message.out.append(dismiss(message.peer, event.dialect))
                return
        stale = self._retire(event.name, message)
        self.register(message, event.dialect, event.description, (event.host, event.pid), event.features, event.name)
        if stale is not None:  # its task, if any, to the front of its queue: the new registration may take it
            if stale.task is not None:  # (lost with a connection its worker replaced, not with the worker: a plain
                stale.task.attempts -= 1  # READY says no task runs there; max_attempts counts the runs lost alone)
            self._core._reissue(stale, message)

    def _retire(self, name: str | None, message: Message) -> WorkerRecord | None:
        """The registration under ``name`` and this message's CURVE key at another connection, made to leave: its
        worker registers again from this one (its claim dropped; the caller reissues its task, or hands it over to
        the new registration); None if there is none. A peer with another key cannot name it."""
        identity = _identity(name, message)
        stale = None if identity is None else self._workers.holding(identity)
        if stale is None or stale.peer == message.peer:
            return None
        self._counters.workers_replaced += 1
        log.info("worker %s registered again from a new connection; its old registration is retired", stale.label)
        self._core._leave(stale, message.now)
        self._handover.drop_claim(stale)
        return stale

    def register(
        self, message: Message, dialect: Dialect, description: bytes,
        where: tuple[str | None, int | None] = (None, None), features: frozenset[str] = frozenset(),
        name: str | None = None, *, busy: bool = False,
    ) -> WorkerRecord | None:  # fmt: skip
        """Register the worker that sent ``message``, running on ``where`` = (host, pid) as far as it said,
        understanding ``features`` and named ``name`` across its reconnects (its identity then holds the message's
        CURVE key too), waiting (or ``busy`` with a task of its own, resumed); a worker beyond
        ``max_workers``, or beyond what its connection may hold (one connection may claim many peer addresses
        through envelopes), is told to go. The worker, or None if it was told to go."""
        peer, now = message.peer, message.now
        limit = self._settings.max_workers
        if limit is not None and len(self._workers) >= limit:
            self._counters.workers_refused += 1
            # one line per interval for them all: a flood comes from many (claimed) peers
            self._reporting.warn_all("too many workers", "new workers", now, "refused: %d registered", limit)
            message.out.append(dismiss(peer, dialect))
            return None
        service = self._resolve_worker(message, dialect, description)
        if service is None:
            return None
        account = connection(peer.link, peer.address)
        host, pid = where
        charge = OVERHEAD[Holding.WORKER] + len(description) + address_bytes(peer.address) + len(host or "")
        charge += len(name or "")
        refusal = self._budgets.refusal(account, Holding.WORKER, charge)
        if refusal is not None:
            self._counters.workers_refused += 1
            self._reporting.warn("refused worker", peer, now, "refused a worker: %s", refusal)
            message.out.append(dismiss(peer, dialect))
            return None
        state = WorkerState.BUSY if busy else WorkerState.WAITING
        label = self._reporting.label(peer)
        worker = WorkerRecord(peer, dialect, description, service, now + self._settings.expiry, label, state)
        worker.host, worker.pid = host, pid
        worker.features = features
        worker.identity = _identity(name, message)
        worker.charge = charge
        self._workers.add(worker, now + self._settings.heartbeat_interval)
        service.join(worker)
        self._served.seen(service.name, now)
        self._counters.workers_registered += 1
        if not busy:
            self._core._wait(worker, message)
        return worker

    def _resolve_worker(self, message: Message, dialect: Dialect, description: bytes) -> Service | None:
        """The service for a worker's description, or None after telling the worker to go away."""
        peer, credential = message.peer, message.credential
        if description.startswith(MMI_PREFIX):
            reason = "mmi. services belong to the broker"
        else:
            try:
                service = self._core.resolver.for_worker(description)
                if credential is None or credential.may_serve(service.name):
                    refusal = self._core._adopt(service, connection(peer.link, peer.address))
                    if refusal is None:
                        return service
                    reason = refusal
                else:
                    self._counters.forbidden += 1
                    reason = f"its key may not serve {service.name!r}"
            except ResolveError as error:
                reason = str(error)
            except Exception as error:  # a faulty resolver plug-in must not stop the broker
                log.exception("resolver failed on service description %r", description[:64])
                reason = repr(error)
        self._reporting.warn(
            "refused worker", peer, message.now, "refused worker with description %r: %s", description[:64], reason,
            key=credential.key if credential is not None else description[:64],
        )  # fmt: skip
        self._counters.workers_refused += 1
        message.out.append(dismiss(peer, dialect))
        return None

    def on_heartbeat(self, event: WorkerHeartbeat, message: Message) -> None:
        worker = self._workers.get(message.peer)
        if worker is None:
            message.out.append(dismiss(message.peer, event.dialect))
        else:
            worker.expires = message.now + self._settings.expiry

    def on_disconnect(self, event: WorkerDisconnect, message: Message) -> None:
        worker = self._workers.get(message.peer)
        if worker is not None:
            log.info("worker %s disconnected", worker.label)
            self._core._leave(worker, message.now)
            self._core._reissue(worker, message)

    def on_malformed(self, event: Malformed, message: Message) -> None:
        """Count and log it; answer a generaldomo request 400; drop a registered worker that sent it (its task is
        reissued) and tell it DISCONNECT."""
        peer = message.peer
        self._counters.malformed += 1
        self._reporting.warn("malformed", peer, message.now, "dropped a malformed message: %s", event.reason)
        if event.request_id is not None:
            frames = protocol.client_reply(
                Dialect.GDP, event.request_id, b"", protocol.BAD_REQUEST, [event.reason.encode()], final=True
            )
            if frames is not None:
                message.out.append(Respond(peer, frames))
        elif event.worker is not None:
            worker = self._workers.get(peer)
            if worker is not None:
                self._counters.workers_malformed += 1
                log.info("worker %s sent a malformed message; dropping it", worker.label)
                self._core._leave(worker, message.now)
                self._core._reissue(worker, message)
                message.out.append(dismiss(peer, event.worker))

    def on_resume(self, event: WorkerResume, message: Message) -> None:
        peer, now = message.peer, message.now
        known = self._workers.get(peer)
        if known is not None:  # as a second READY: a new registration
            self._core._leave(known, message.now)
            self._core._reissue(known, message)
        stale = self._retire(event.name, message)
        where = (event.host, event.pid)
        worker = self.register(message, event.dialect, event.description, where, event.features, event.name, busy=True)
        if stale is not None:
            task = stale.task
            if worker is not None and task is not None and task.id == event.task_id and task.service is worker.service:
                stale.task, task.worker, worker.task = None, worker, task  # the same run, now at its new connection
            else:
                self._core._reissue(stale, message)
        if worker is None:
            return
        self._counters.workers_resumed += 1
        message.out.append(
            Beat(peer, self._handover.heartbeat(worker))
        )  # at once: the worker knows its RESUME was taken
        ticket = self._handover.foreign(event.task_id)
        if ticket is None or ticket.service != worker.service.name:
            return  # not a task this broker can take over: the worker takes no task until its result comes
        key = request_key(ticket.owner, ticket.request_id)
        live = self._core._by_request.get(key)
        if live is None:
            self._handover.claim(worker, event.task_id, ticket, now)
        elif (
            live.state is TaskState.QUEUED
            and live.service is worker.service
            and request_digest(live.description, live.body) == ticket.digest
        ):
            live.service.drop(live)  # the client's resend came first: the worker's run is that task's
            self._core._run_at(live, worker, event.task_id, now)
            live.service.flow.adopt(live.size)
            self._counters.tasks_resumed += 1


def _identity(name: str | None, message: Message) -> Identity | None:
    """The identity of a worker named ``name`` that sent ``message``: the name with its CURVE key; None without a
    name."""
    if name is None:
        return None
    credential = message.credential
    return (None if credential is None else credential.key), name

"""The broker core's requests: what the broker does with each message of a client.

This module owns the handling of a client's REQUEST up to its acceptance (a retry whose id is live or answered absorbed,
a request refused with its error: stopping, no such service, over a budget, past its deadline or unable to make it
(its ``not_before`` at or after its deadline, or less time left than its service's estimated service time), too
large; a management request goes to :mod:`generaldomo.sansio.broker.core.management`), of its HEARTBEAT (the
re-asked ids it does not know) and of its CANCEL; the ``404`` of a request that asked to fail fast for a service
nobody serves (also once the grace after start is over), and the queued tasks of clients gone silent. It accepts a
task only through the core (``_accept``: one path for every task), and reaches the core only through :class:`Core`,
what it may call of it. It knows nothing of
sockets, clocks or frames' layout.
"""

from __future__ import annotations

import itertools
from typing import Final, Protocol

from generaldomo.errors import ResolveError
from generaldomo.sansio.broker import mmi
from generaldomo.sansio.broker.accounts.kept import KeptAnswers
from generaldomo.sansio.broker.accounts.ledger import ConnectionId, connection, request_charge
from generaldomo.sansio.broker.actions import Beat, Respond
from generaldomo.sansio.broker.core.budgets import Budgets
from generaldomo.sansio.broker.core.clients import Clients
from generaldomo.sansio.broker.core.counters import Counters
from generaldomo.sansio.broker.core.expiry import unreachable
from generaldomo.sansio.broker.core.handover import Handover
from generaldomo.sansio.broker.core.management import Management, reject
from generaldomo.sansio.broker.core.reporting import Reporting
from generaldomo.sansio.broker.core.turns import Message, Tasks, Turn, frames_size, log
from generaldomo.sansio.broker.records import Claim, Peer, RequestKey, Task, WorkerRecord, displaced, request_key
from generaldomo.sansio.broker.served import MAX_NAMES, ServedRecently
from generaldomo.sansio.broker.services.resolver import NameResolver
from generaldomo.sansio.broker.services.service import Service
from generaldomo.sansio.broker.states import TaskState
from generaldomo.sansio.config.settings import Settings
from generaldomo.sansio.wire import protocol
from generaldomo.sansio.wire.events import ClientCancel, ClientHeartbeat, ClientRequest
from generaldomo.sansio.wire.ticket import request_digest

__all__ = ["MMI_PREFIX", "Core", "Requests"]

MMI_PREFIX: Final = b"mmi."


class Core(Tasks, mmi.BrokerView, Protocol):
    """What the requests' part may read and call of the core: its tables of live tasks, and how a task is
    accepted, answered, cancelled and finished."""

    _stopping: bool

    @property
    def instance(self) -> bytes: ...
    @property
    def started(self) -> float: ...
    def _adopt(self, service: Service, where: ConnectionId) -> str | None: ...
    def _accept(
        self, event: ClientRequest, message: Message, service: Service, key: RequestKey | None,
        cost: tuple[int, int], resumed: tuple[WorkerRecord, Claim] | None,
    ) -> None: ...  # fmt: skip
    def _cancel(self, task: Task, turn: Turn) -> None: ...


class Requests:
    """The clients' messages (see the module docstring); ``core`` is the broker core it serves, the others its
    parts and what it shares with them."""

    def __init__(
        self, core: Core, settings: Settings, counters: Counters, kept: KeptAnswers, served: ServedRecently,
        clients: Clients, budgets: Budgets, handover: Handover, reporting: Reporting, management: Management,
    ) -> None:  # fmt: skip
        self._core = core
        self._settings = settings
        self._counters = counters
        self._kept = kept
        self._served = served
        self._clients = clients
        self._budgets = budgets
        self._handover = handover
        self._reporting = reporting
        self._management = management
        self._graced = False  # True once the requests that asked to fail fast within the grace were looked at

    def on_request(self, event: ClientRequest, message: Message) -> None:
        self._counters.requests += 1
        if event.description.startswith(MMI_PREFIX):
            self._management.answer(event, message)
            return
        peer, now = message.peer, message.now
        key = None
        if event.request_id is not None:
            self._clients.refresh(peer, now)
            key = request_key(message.owner, event.request_id)
            if self._known(message, key, event):
                self._clients.listen(peer, connection(peer.link, peer.address), now)
                self._counters.retries_absorbed += 1
                return
        if self._core._stopping:
            self.reject(event, message, protocol.UNAVAILABLE, "the broker is stopping")
            return
        service = self._resolve_request(event, message)
        if service is None:
            return
        size = len(event.description) + frames_size(event.body)
        charge = request_charge(size, len(event.body), event.request_id, peer.address)
        if event.trace is not None or event.trace_dropped is not None:
            charge += self._traced(event, message)
        resumed = None
        if key is not None and len(self._handover) and self._handover.claimed(key):
            resumed = self._handover.take_claim(key, service, request_digest(event.description, event.body))
        if resumed is not None or self._admits(event, message, service, key, charge):
            self._core._accept(event, message, service, key, (size, charge), resumed)

    def _traced(self, event: ClientRequest, message: Message) -> int:
        """The bytes ``event``'s trace context adds to its charge; a trace context dropped (malformed) is counted
        and logged, and the request goes on without it."""
        if event.trace_dropped is not None:
            self._counters.trace_dropped += 1
            self._reporting.warn(
                "trace", message.peer, message.now, "dropped a request's trace context: %s", event.trace_dropped
            )
        trace = event.trace
        return 0 if trace is None else len(trace.traceparent) + len(trace.tracestate)

    def _admits(
        self, event: ClientRequest, message: Message, service: Service, key: RequestKey | None, charge: int
    ) -> bool:
        """True when a new task for ``event``, charged ``charge`` bytes, may be accepted: its service is not known
        to have nobody (if it asks to fail fast), the budgets hold its bytes, and its deadline has not passed;
        else it is answered with the error, and False."""
        peer, now = message.peer, message.now
        if event.flags & protocol.FLAG_KNOWN_SERVICE and self._unknown(service, now):
            self._counters.unknown_service += 1
            self.reject(event, message, protocol.NOT_FOUND, self._no_such_service(service.name, now))
            return False
        where = connection(peer.link, peer.address)
        client = 0 if key is None or self._clients.listening(peer) else Clients.charge(peer)
        budgets = self._budgets
        refusal = None if budgets.adopted(service) else self._core._adopt(service, where)
        refusal = refusal or budgets.refuse_task(service, where, charge, client)
        if refusal is not None:
            self._counters.over_budget += 1
            self.reject(event, message, protocol.OVER_BUDGET, refusal)
            return False
        deadline = event.deadline
        if deadline is not None and deadline <= 0:
            self._counters.past_deadline += 1
            self._counters.expired += 1
            self.reject(event, message, protocol.EXPIRED, "the request's deadline had passed when it came")
            return False
        if deadline is not None:  # it cannot be dispatched with enough time left: not after its not_before, ...
            left = deadline - (event.not_before or 0.0)
            ahead = service.stats.ahead(self._settings.deadline_estimate_after)  # ... nor with less than the estimate
            if left <= ahead:
                self._counters.deadline_unreachable += 1
                self._counters.expired += 1
                service.stats.turned_away(service.flow.in_flight)
                self.reject(event, message, protocol.EXPIRED, unreachable(left, ahead).decode())
                return False
        return True

    def _known(self, message: Message, key: RequestKey, request: ClientRequest | None = None) -> bool:
        """True when the request ``key`` has a kept answer (sent again to the message's sender) or a live task
        (whose answer now goes to the sender, unless its connection has no room for it). Given the ``request`` (not a
        re-ask), a kept answer or a live task counts only if it is for the same description and payload: one for
        another request under the same id (a peer sent the id first) is left to its sender, counted
        (``request_id_conflicts``), and this request is a new task."""
        peer, now = message.peer, message.now
        digest = None if request is None else lambda: request_digest(request.description, request.body)
        kept = self._kept.get(key, now, digest)
        if kept is None and request is not None and self._kept.get(key, now) is not None:
            self._counters.request_id_conflicts += 1  # kept for another request: this one is a new task
        if kept is not None:
            if self._clients.may_resend(peer, sum(map(len, kept)), now):
                message.out.append(Respond(peer, kept))
            return True
        task = self._core._by_request.get(key)
        if task is None:
            return False
        if request is not None and (task.description != request.description or task.body != request.body):
            self._counters.request_id_conflicts += 1
            del self._core._by_request[key]  # that task runs on for its sender; its answer is not kept
            task.key = displaced(key)
            return False
        if task.client != peer:
            self._move(task, peer)
        return True

    def _move(self, task: Task, peer: Peer) -> None:
        """Send ``task``'s answer to ``peer`` (its client's new address): its charge moves with it, if it fits."""
        if self._budgets.move(task, peer):
            task.client = peer
        else:
            self._counters.moves_refused += 1  # the answer goes where it would have gone

    def _resolve_request(self, event: ClientRequest, message: Message) -> Service | None:
        """The service for a request, or None after answering the client with an error."""
        resolver = self._core.resolver
        if type(resolver) is NameResolver:  # the default resolver: a known name's service, read without a call into
            service = resolver._services.get(event.description)  # the interpreter (resolver.py is not compiled)
            if service is not None:
                return service
        try:
            return resolver.for_request(event.description)
        except ResolveError as error:
            self.reject(event, message, protocol.BAD_REQUEST, str(error))
        except Exception as error:  # a faulty resolver plug-in must not stop the broker
            log.exception("resolver failed on request description %r", event.description[:64])
            self.reject(event, message, protocol.BAD_REQUEST, f"resolver error: {error!r}")
        return None

    def on_heartbeat(self, event: ClientHeartbeat, message: Message) -> None:
        peer, owner = message.peer, message.owner
        self._clients.refresh(peer, message.now)
        self._counters.reasked += len(event.request_ids)
        asked = dict.fromkeys(event.request_ids)  # each once, however often it is named
        unknown = [
            rid
            for rid in asked
            if not self._known(message, key := request_key(owner, rid)) and not self._handover.claimed(key)
        ]
        if self._handover.recovering(
            message.now
        ):  # workers of the previous instance may still claim them: not "unknown" yet
            unknown = []
        message.out.append(
            Beat(peer, protocol.gdp_client_heartbeat(self._core.instance, self._clients.echo(peer, unknown)))
        )

    def on_cancel(self, event: ClientCancel, message: Message) -> None:
        self._clients.refresh(message.peer, message.now)
        task = self._core._by_request.pop(request_key(message.owner, event.request_id), None)
        if task is None:
            return
        self._counters.cancelled += 1
        self._core._cancel(task, message)

    def on_large_request(self, event: ClientRequest, message: Message) -> None:
        self._counters.too_large += 1
        reason = f"message larger than the broker's limit of {self._settings.max_message} bytes"
        self.reject(event, message, protocol.TOO_LARGE, reason)

    def reject(self, event: ClientRequest, message: Message, status: bytes, reason: str) -> None:
        """Answer the request ``event`` with the error ``status`` saying ``reason`` (counted, and logged)."""
        reject(self._counters, self._reporting, event, message, status, reason)

    def _unknown(self, service: Service, now: float) -> bool:
        """True when the broker knows that nobody serves ``service``: no worker now, none within
        ``served_memory``, and the broker has run long enough for the workers of a restart to be back."""
        if service.workers or self._in_grace(now):
            return False
        return not self._served.recent(service.name, now)

    def _in_grace(self, now: float) -> bool:
        """True within ``known_service_grace`` of the start, when no service is known to have no workers."""
        return now - self._core.started < self._settings.known_service_grace

    def end_grace(self, turn: Turn) -> None:
        """Once the grace after start is over, answer ``404`` to the requests that asked to fail fast during it
        and still wait for a service nobody serves, as if they came now (once: one pass over the tasks)."""
        now = turn.now
        if self._graced or self._in_grace(now):
            return
        self._graced = True
        unknown = [t for t in self._core._tasks.values() if t.fail_unknown and t.state is TaskState.QUEUED]
        for task in unknown:
            if self._unknown(task.service, now):
                self._counters.unknown_service += 1
                reason = self._no_such_service(task.service.name, now)
                self._core._complete(task, protocol.NOT_FOUND, [reason.encode()], turn)

    def _no_such_service(self, name: str, now: float) -> str:
        """The text of a ``404`` for ``name``: the services that have workers, and the nearest name (among the
        first :data:`~generaldomo.sansio.broker.served.MAX_NAMES` services: a bounded cost per refusal)."""
        services = itertools.islice(self._core.resolver.services(), MAX_NAMES)
        names = sorted({s.name for s in services if s.workers and s.name != name})
        nearest = self._served.nearest(name, names)
        listed = ", ".join(repr(n) for n in names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
        hint = f"; did you mean {nearest!r}?" if nearest else ""
        memory = self._settings.served_memory
        return (
            f"no worker serves {name!r}, and none has in the last {memory:g} s; services with workers: "
            f"{listed or 'none'}{hint}"
        )

    def drop_silent_clients(self, heard_before: float) -> None:
        """Drop the queued tasks of generaldomo clients last heard before ``heard_before``."""
        silent = self._clients.silent(heard_before)
        if not silent:
            return
        doomed: dict[Service, set[Task]] = {}
        for task in self._core._tasks.values():
            if task.state is TaskState.QUEUED and task.key is not None and task.client in silent and not task.detached:
                doomed.setdefault(task.service, set()).add(task)
        for service, tasks in doomed.items():
            service.discard(tasks)
            for task in tasks:
                self._core._finish(task, task.state, dequeued=True)
            self._counters.client_gone_dropped += len(tasks)
            log.info("dropped %d queued requests for %r of clients gone silent", len(tasks), service.name)

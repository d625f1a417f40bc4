"""The broker core's budgets: the bytes of requests it holds per service, the queue budgets, and the services and
flow entries it holds on a peer's behalf.

This module owns what a request, a service or a flow entry costs the broker and whether it fits: the queue budgets
(``queue_bytes``, ``service_queue_bytes``, a connection's share of them), the bytes held for each service's live tasks,
the charge of each service the core has seen and of each flow entry a peer set (to the connection whose message made
it), and when an idle one is *forgotten* (``service_idle``). Every charge goes through the ledger
(:mod:`generaldomo.sansio.broker.accounts.ledger`); a refusal is counted by the ledger's name for it and explained in
words. The core (:mod:`generaldomo.sansio.broker.core`) asks before it accepts and tells when a task comes and goes;
this part changes no task, worker or queue. It knows nothing of sockets, clocks or frames.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

import generaldomo.errors as errors
from generaldomo.sansio.broker.accounts.ledger import (
    CHARGED,
    OVERHEAD,
    ConnectionId,
    Holding,
    Ledger,
    Refusal,
    address_bytes,
    connection,
    exceeds,
    flow_charge,
)
from generaldomo.sansio.broker.core.counters import Counters
from generaldomo.sansio.broker.flow.flow import FlowLimits
from generaldomo.sansio.broker.records import Peer, Task
from generaldomo.sansio.broker.services.service import Service
from generaldomo.sansio.config.settings import Settings

__all__ = ["HOLDINGS", "Budgets"]

HOLDINGS = {  # what this part holds on peers' behalf (see generaldomo.sansio.broker.core.HOLDINGS)
    "_adopted": CHARGED + "services",
    "_flow_charges": CHARGED + "flows",
    "_flow_idle_since": CHARGED + "flows",
    "_held": CHARGED + "services",
    "_idle_since": CHARGED + "services",
}

Forget = Callable[[Service], object] | None  # the resolver's ``forget``, if it forgets services


class Budgets:
    """What the core holds for peers and whether more fits (see the module docstring)."""

    def __init__(self, settings: Settings, ledger: Ledger, counters: Counters) -> None:
        self._settings = settings
        self._ledger = ledger
        self._counters = counters
        self._held: dict[Service, int] = {}  # bytes charged for the live tasks of each service
        self._total = 0
        self._adopted: dict[Service, tuple[ConnectionId, int]] = {}  # services seen -> who made them, at what charge
        self._idle_since: dict[Service, float] = {}
        self._flow_charges: dict[str, tuple[ConnectionId, int]] = {}  # flow entries peers set -> who, at what charge
        self._flow_idle_since: dict[str, float] = {}

    @property
    def total(self) -> int:
        """Bytes charged for all live tasks."""
        return self._total

    def held(self, service: Service) -> int:
        """Bytes charged for the live tasks of ``service``."""
        return self._held.get(service, 0)

    def adopted(self, service: Service) -> bool:
        """True when ``service`` is charged to a connection already (:meth:`adopt` has nothing to do)."""
        return service in self._adopted

    def holds(self) -> bool:
        """True when a service or a flow entry is charged to a peer (the sweep has work to do)."""
        return bool(self._adopted or self._flow_charges)

    # ------------------------------------------------------------------------------------------- refusals

    def refuse_task(self, service: Service, where: ConnectionId, charge: int, client: int) -> str | None:
        """Why a request charged ``charge`` bytes for ``service`` from ``where`` (and ``client`` more, for listening to
        its client) does not fit, or None: the connection's share of the queue, then the queue's and the service's
        budgets, by the small-request rule (:func:`~generaldomo.sansio.broker.accounts.ledger.exceeds`) as the ledger's
        total, then the ledger."""
        settings = self._settings
        held = self._ledger.tasks(where) + charge
        limit = settings.connection_queue_bytes
        if limit is not None and held > limit:
            share = settings.connection_queue_share
            return f"connection queue budget exceeded: connection_queue_share={share} of queue_bytes held for it"
        if exceeds(settings.queue_bytes, self._total + charge, held):
            return f"broker queue budget exceeded: queue_bytes={settings.queue_bytes} bytes of requests held"
        limit = settings.service_queue_bytes
        if exceeds(limit, self._held.get(service, 0) + charge, held):
            return f"service queue budget exceeded: service_queue_bytes={limit} bytes held for {service.name!r}"
        return self.refusal(where, Holding.TASK, charge + client)

    def refusal(self, where: ConnectionId, kind: Holding, size: int) -> str | None:
        """Why a new holding of ``kind`` and ``size`` bytes does not fit the ledger (counted), or None if it does."""
        refusal = self._ledger.admit(where, kind, size)
        if refusal is None:
            return None
        self._counters.add(refusal.counter(kind))
        return self._refusal_text(refusal, kind)

    def over_connection_budget(self, peer: Peer, size: int = 0) -> bool:
        """True when ``peer``'s connection holds more than its budget (its unread replies included), or would
        with ``size`` more."""
        return self._ledger.over_budget(connection(peer.link, peer.address), size)

    def _refusal_text(self, refusal: Refusal, kind: Holding) -> str:
        settings = self._settings
        if refusal is Refusal.TOTAL_BYTES:
            return f"broker budget exceeded: held_bytes={settings.held_bytes} bytes held for all peers"
        if refusal is Refusal.CONNECTION_BYTES:
            return f"connection budget exceeded: connection_bytes={settings.connection_bytes} bytes held for it"
        return f"this connection holds {self._ledger.caps[kind]} {kind.value}, the most one connection may"

    # ------------------------------------------------------------------------------------------- tasks

    def charge(self, task: Task) -> None:
        """Hold ``task``'s bytes, charged to its client's connection."""
        client, charge, service = task.client, task.charge, task.service
        address = client.address  # (connection(), inline: the hot path)
        where = (client.link, address if not isinstance(address, tuple) else address[0])
        self._ledger.charge(where, Holding.TASK, charge)
        self._held[service] = self._held.get(service, 0) + charge
        self._total += charge

    def release(self, task: Task) -> None:
        """Release ``task``'s bytes (it finished)."""
        client, charge, service = task.client, task.charge, task.service
        address = client.address  # (connection(), inline: the hot path)
        where = (client.link, address if not isinstance(address, tuple) else address[0])
        self._ledger.release(where, Holding.TASK, charge)
        self._total -= charge
        held = self._held[service] - charge
        if held:
            self._held[service] = held
        else:
            del self._held[service]

    def move(self, task: Task, peer: Peer) -> bool:
        """Charge ``task`` to ``peer``'s connection (its client's new address) instead, if it fits (False: it stays
        charged where it was)."""
        old = connection(task.client.link, task.client.address)
        where = connection(peer.link, peer.address)
        charge = task.charge - address_bytes(task.client.address) + address_bytes(peer.address)
        self._ledger.release(old, Holding.TASK, task.charge)
        if self._ledger.room(where, charge) is not None:
            self._ledger.charge(old, Holding.TASK, task.charge)
            return False
        self._ledger.charge(where, Holding.TASK, charge)
        delta = charge - task.charge
        self._held[task.service] += delta
        self._total += delta
        task.charge = charge
        return True

    # ------------------------------------------------------------------------------------------- services and flows

    def adopt(
        self, service: Service, where: ConnectionId, flows: Mapping[str, FlowLimits], forget: Forget
    ) -> str | None:
        """Charge a service the core sees for the first time to the connection whose message made it, and apply the
        flow limits ``flows`` holds for its name; or say why it does not fit the ledger (counted), and ``forget``
        it if it was made for this message alone."""
        if service in self._adopted:
            return None
        charge = OVERHEAD[Holding.SERVICE] + len(service.name.encode())
        refusal = self.refusal(where, Holding.SERVICE, charge)
        if refusal is not None:
            if forget is not None and not service.workers and not service.pending:
                forget(service)
            return refusal
        self._ledger.charge(where, Holding.SERVICE, charge)
        self._adopted[service] = (where, charge)
        limits = flows.get(service.name)
        if limits is not None:
            service.apply_flow(limits)
        return None

    def charge_flow(self, name: str, limits: FlowLimits, where: ConnectionId | None, configured: bool) -> None:
        """Charge the flow entry ``name`` set to ``limits`` to ``where`` (None: the operator's, charged to nobody),
        its earlier charge released; an entry already ``configured`` by the operator stays the operator's. Raises
        :class:`~generaldomo.errors.OverBudget` (counted) when it does not fit: the entry stays as it was."""
        charged = self._flow_charges.pop(name, None)
        if charged is not None:
            self._ledger.release(charged[0], Holding.FLOW, charged[1])
            self._flow_idle_since.pop(name, None)
        if limits.unset or where is None or (charged is None and configured):
            return
        size = flow_charge(name, limits.tenants or ())
        refusal = self._ledger.admit(where, Holding.FLOW, size)
        if refusal is not None:
            if charged is not None:  # the entry stays as it was, charged as it was
                self._ledger.charge(charged[0], Holding.FLOW, charged[1])
                self._flow_charges[name] = charged
            self._counters.add(refusal.counter(Holding.FLOW))
            raise errors.OverBudget(f"no room for more flow limits: {self._refusal_text(refusal, Holding.FLOW)}")
        self._ledger.charge(where, Holding.FLOW, size)
        self._flow_charges[name] = (where, size)

    def forget_idle(
        self, now: float, services: Iterable[Service], forget: Forget, flows: Mapping[str, FlowLimits]
    ) -> tuple[list[Service], list[str]]:
        """Forget the services that have had no workers and no tasks for ``service_idle`` (through ``forget``), and
        the flow entries peers set for names no busy service had as long: the services forgotten and the names
        of the entries forgotten (the caller drops them from ``flows``). A service idle as long that is kept (the
        operator set flow limits for its name, or the resolver forgets nothing) is charged to nobody from then
        on: it is no longer held on the behalf of the peer whose message made it."""
        idle_for = self._settings.service_idle
        if idle_for is None:
            return [], []
        charged, gone = self._flow_charges, []
        busy: set[str] = set()
        for service in list(services) if forget is not None or charged or self._adopted else ():
            name = service.name
            if service.workers or service.pending or service in self._held:
                busy.add(name)
                self._idle_since.pop(service, None)
                continue
            kept = forget is None or (name in flows and name not in charged)
            if kept and service not in self._adopted:
                continue  # kept, and charged to nobody already
            since = self._idle_since.setdefault(service, now)
            if now - since >= idle_for:
                del self._idle_since[service]
                where, charge = self._adopted.pop(service, (None, 0))
                if where is not None:
                    self._ledger.release(where, Holding.SERVICE, charge)
                if forget is not None and not kept:
                    forget(service)
                    gone.append(service)
                    self._counters.services_forgotten += 1
        names = []
        for name in list(charged):
            if name in busy:
                self._flow_idle_since.pop(name, None)
                continue
            since = self._flow_idle_since.setdefault(name, now)
            if now - since >= idle_for:
                where, charge = charged.pop(name)
                self._ledger.release(where, Holding.FLOW, charge)
                del self._flow_idle_since[name]
                names.append(name)
                self._counters.flows_forgotten += 1
        return gone, names

    def holdings(self) -> Iterator[tuple[ConnectionId, Holding, int]]:
        """The services and flow entries charged to peers, as ``(connection, kind, bytes)``."""
        for where, charge in self._adopted.values():
            yield where, Holding.SERVICE, charge
        for where, charge in self._flow_charges.values():
            yield where, Holding.FLOW, charge

"""The broker core's management requests: ``mmi.*`` answered now, when their turn comes, or ``429``; and a request
refused with an error.

This module owns how the broker answers a management request (:mod:`generaldomo.sansio.broker.mmi` says what it means
and what it changes; the core applies a flow change): an expensive one (``mmi.PACED``) beyond its connection's or the
broker's work per second waits in its connection's line (kept by :mod:`generaldomo.sansio.broker.core.clients`) and is
answered when its turn comes (a tick), or ``429`` beyond the lines; and the one way every part refuses a request with an
error (:func:`reject`: counted, logged, answered). It reaches the core only through :class:`Core`, what it may call of
it. It knows nothing of sockets, clocks or frames' layout.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

import generaldomo.errors as errors
from generaldomo.sansio.broker import mmi
from generaldomo.sansio.broker.access import Role
from generaldomo.sansio.broker.accounts.ledger import ConnectionId, address_bytes, connection
from generaldomo.sansio.broker.actions import Respond, Send
from generaldomo.sansio.broker.core.clients import Clients
from generaldomo.sansio.broker.core.counters import Counters
from generaldomo.sansio.broker.core.reporting import Reporting
from generaldomo.sansio.broker.core.turns import Message, Turn
from generaldomo.sansio.wire import protocol
from generaldomo.sansio.wire.events import ClientRequest

__all__ = ["Core", "Management", "reject"]

_SPENT = "too many expensive requests waiting: this connection's work per second is spent"


def reject(
    counters: Counters, reporting: Reporting, event: ClientRequest, message: Message, status: bytes, reason: str,
    extra: Sequence[bytes] = (), kind: str | None = None,
) -> None:  # fmt: skip
    """Answer the request ``event`` with the error ``status`` saying ``reason`` (and the frames ``extra``), counted
    and logged (rate-limited as ``kind``, by default the status)."""
    counters.rejected += 1
    peer = message.peer
    kind = f"rejected {status.decode()}" if kind is None else kind
    reporting.warn(kind, peer, message.now, "rejected a request: %s", reason, level=logging.INFO)
    body = [reason.encode(), *extra]
    frames = protocol.client_reply(event.dialect, event.request_id, event.description, status, body, final=True)
    if frames is not None:
        message.out.append(Respond(peer, frames))


class Core(mmi.BrokerView, Protocol):
    """What the management part may read and call of the core: what ``mmi`` reads, and how a flow change is applied."""

    def apply_flow(self, change: mmi.FlowChange, now: float, where: ConnectionId | None = None) -> list[Send]: ...
    def _take_dead(
        self, change: mmi.DeadChange, event: ClientRequest, message: Message
    ) -> tuple[bytes, list[bytes]]: ...
    def _caught(self, handling: str, now: float) -> None: ...


class Management:
    """Management requests (see the module docstring); ``core`` is the broker core it serves, the others its parts
    and what it shares with them."""

    def __init__(self, core: Core, counters: Counters, clients: Clients, reporting: Reporting) -> None:
        self._core = core
        self._counters = counters
        self._clients = clients
        self._reporting = reporting

    def answer(self, event: ClientRequest, message: Message) -> None:
        """Answer a management request now, or, for an expensive one (:data:`~generaldomo.sansio.broker.mmi.PACED`)
        beyond its connection's or the broker's work per second, when its turn comes (a tick), or ``429`` beyond
        the waiting lines (:mod:`generaldomo.sansio.broker.accounts.pacing`)."""
        peer, now = message.peer, message.now
        if event.description in mmi.PACED and not self._clients.may_go(peer, now):
            size = len(event.description) + sum(map(len, event.body)) + address_bytes(peer.address)
            later = self._clients.wait((peer, event, message.credential), size, now)
            if later is not None:  # beyond the lines: it may ask again after ``later`` seconds
                extra = [protocol.retry_after_frame(round(later, 3))]
                reject(
                    self._counters, self._reporting, event, message, protocol.OVER_BUDGET, _SPENT, extra, "paced 429"
                )
            return
        self._answer_now(event, message)

    def answer_waiting(self, turn: Turn) -> None:
        """Answer the expensive management requests whose turn has come (see :meth:`answer`)."""
        now = turn.now
        for peer, event, credential in self._clients.ready(now):
            message = Message(peer, now, credential)
            message.out = turn.out  # its answer goes with the tick's
            try:
                self._answer_now(event, message)
            except Exception:
                self._core._caught("a management request", now)

    def _answer_now(self, event: ClientRequest, message: Message) -> None:
        peer, now, credential = message.peer, message.now, message.credential
        admin = credential is None or credential.may(Role.ADMIN)
        # a change by an authenticated admin is the operator's; one by an unauthenticated peer is that peer's
        where = connection(peer.link, peer.address)
        try:
            answer = mmi.answer(self._core, event.description, event.body, now, admin)
            owner = where if credential is None else None
            caused = self._core.apply_flow(answer.change, now, owner) if answer.change is not None else []
        except errors.ManagementError as error:
            if isinstance(error, errors.Forbidden):
                self._counters.forbidden += 1
            reject(self._counters, self._reporting, event, message, error.status, str(error))
            return
        if answer.work:
            self._clients.spent(peer, answer.work, now)
        status, body = answer.status, answer.body
        if answer.dead is not None:  # a dead letter to replay or drop: the core answers
            status, body = self._core._take_dead(answer.dead, event, message)
        frames = protocol.client_reply(event.dialect, event.request_id, event.description, status, body, True)
        if frames is not None:
            message.out.append(Respond(peer, frames))
        message.out.extend(caused)

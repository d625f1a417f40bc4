"""The broker core's durable queues: the journal records of what a broker with a state directory must not lose.

This module owns the records the core makes as it accepts a request, finishes a task, keeps an answer and changes
a service name's flow limits at run time (:mod:`generaldomo.sansio.broker.journal`), until the IO layer takes them
(:meth:`Durable.take`, after each message or tick), writes them off the loop (:mod:`generaldomo.io.hub.wal`) and
ships them to a passive broker (:mod:`generaldomo.sansio.broker.replication`); and the restore at start or
takeover: the flow limits a journal left standing are applied again (through the path of every run-time change,
as the operator's), the requests it left standing are queued again through the one path every request takes (the
requests' part, as if their clients had sent them again, from their old addresses: a client that resends one is
its sender again, as after any retry), and the kept answers kept again. Each live task has a serial (its
acceptance's record), by which its end is recorded; a restored task gets a new one (the journal is rewritten at
start: see the IO layer).

Times: the core's clock plus the ``offset`` the IO layer gives (wall clock minus the core's clock) is what records
hold. A restored request's time in the queue starts again at the restore; its deadline is kept. It knows nothing
of files, sockets or clocks.
"""

from __future__ import annotations

from collections.abc import Callable

from generaldomo.sansio.broker.access import Credential, Role
from generaldomo.sansio.broker.accounts.kept import KeptAnswers
from generaldomo.sansio.broker.accounts.ledger import CHARGED, connection
from generaldomo.sansio.broker.actions import Send
from generaldomo.sansio.broker.core.counters import Counters
from generaldomo.sansio.broker.core.turns import Message
from generaldomo.sansio.broker.journal import Accepted, Finished, JournalRecord, Kept, Limited, Live
from generaldomo.sansio.broker.mmi import FlowChange
from generaldomo.sansio.broker.records import Peer, RequestKey, Task, request_key
from generaldomo.sansio.wire import protocol
from generaldomo.sansio.wire.events import ClientRequest, Dialect, Frame

__all__ = ["HOLDINGS", "Durable"]

# (see generaldomo.sansio.broker.core.HOLDINGS)
HOLDINGS = {
    "_serials": CHARGED + "tasks (one serial per live task)",
    "_records": "the records of one message or tick, until the IO layer takes them (after each)",
}
_CLIENT = frozenset({Role.CLIENT})
_DIALECTS = {dialect.value: dialect for dialect in Dialect}


class Durable:
    """The journal records of a core whose clock is ``offset`` seconds behind the wall clock (None: the journal is
    off, and the core makes no records; see the module docstring); ``kept`` and ``counters`` are the core's."""

    def __init__(self, offset: float | None, kept: KeptAnswers, counters: Counters) -> None:
        self.on = offset is not None
        self.offset = offset or 0.0
        self._kept = kept
        self._counters = counters
        self._serials: dict[Task, int] = {}
        self._next = 0
        self._records: list[JournalRecord] = []

    def __len__(self) -> int:
        """How many records wait for the IO layer."""
        return len(self._records)

    def take(self) -> list[JournalRecord]:
        """The records made since the last call, in order."""
        records, self._records = self._records, []
        return records

    def accepted(self, task: Task, not_before: float | None = None) -> None:
        """``task`` was accepted (queued, or running at a resumed worker), not to be dispatched before
        ``not_before`` (None: at once)."""
        self._next += 1
        self._serials[task] = serial = self._next
        key, client, offset = task.key, task.client, self.offset
        owner = key[0] if isinstance(key, tuple) else None
        tenant = task.tenant if owner is None and isinstance(task.tenant, str) else None
        self._records.append(
            Accepted(
                serial,
                client.link,
                client.address,
                task.dialect.value,
                owner,
                task.request_id,
                task.description,
                task.body,
                task.enqueued + offset,
                None if task.deadline is None else task.deadline + offset,
                tenant,
                task.priority,
                task.detached,
                task.fail_unknown,
                None if not_before is None else not_before + offset,
            )
        )

    def finished(self, task: Task) -> None:
        """``task`` left the core's tables."""
        serial = self._serials.pop(task, None)
        if serial is not None:
            self._records.append(Finished(serial))

    def kept(self, key: RequestKey, frames: list[Frame], now: float, client: Peer, digest: bytes | None) -> None:
        """The answer ``frames`` to the request ``key`` is kept since ``now`` for re-asks."""
        owner, request_id = (None, key) if isinstance(key, bytes) else key
        at = now + self.offset
        self._records.append(Kept(owner, request_id, tuple(frames), at, client.link, client.address, digest))

    def flowed(self, change: FlowChange) -> None:
        """The flow limits of the services called ``change.name`` were changed at run time."""
        if self.on:
            self._records.append(Limited(change.name, change.limits))

    def restore(
        self,
        live: Live,
        now: float,
        request: Callable[[ClientRequest, Message], None],
        flow: Callable[[FlowChange, float], list[Send]],
    ) -> list[Send]:
        """Apply again the flow limits, keep again the answers and queue again the requests ``live`` holds
        (``request``: the requests' part's handler of a client's request; ``flow``: the core's run-time flow
        change); return what the core sends meanwhile (an answer to a request that has expired, to its client's
        old address)."""
        out: list[Send] = []
        for limited in live.flows.values():
            out.extend(flow(FlowChange(limited.name, limited.limits), now))
        offset, seconds = self.offset, self._kept.seconds
        for kept in live.kept.values():
            at = kept.at - offset
            if at + seconds > now:
                key = request_key(kept.owner, kept.request_id)
                self._kept.keep(key, list(kept.frames), at, connection(kept.link, kept.address), kept.digest)
                self.kept(key, list(kept.frames), at, Peer(kept.link, kept.address), kept.digest)
                self._counters.answers_restored += 1
        for task in live.tasks.values():
            flags = (protocol.FLAG_DETACHED if task.detached else 0) | (
                protocol.FLAG_KNOWN_SERVICE if task.fail_unknown else 0
            )
            deadline = None if task.deadline is None else task.deadline - offset - now
            dialect = _DIALECTS.get(task.dialect)
            if dialect is None:  # (a record that checked, of no dialect this broker speaks: another's making)
                self._counters.journal_damaged += 1
                continue
            delay = None if task.not_before is None else max(0.0, task.not_before - offset - now) or None
            event = ClientRequest(
                dialect, task.request_id, task.description, task.body, deadline, task.tenant,
                task.priority, flags, delay,
            )  # fmt: skip
            credential = None if task.owner is None else Credential(task.owner, _CLIENT)
            message = Message(Peer(task.link, task.address), now, credential)
            before = len(self._serials)
            request(event, message)
            self._counters.tasks_restored += len(self._serials) - before
            out.extend(message.out)
        return out

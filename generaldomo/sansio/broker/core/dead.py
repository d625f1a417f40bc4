"""The broker core's dead letters: the tasks that finally failed, kept per service, and what replays them.

This module owns when a task becomes a dead letter and what ``mmi.dead``'s replay and drop do. A task becomes one
when it fails for good: lost with its worker ``max_attempts`` times (the core's ``503``), or answered by its worker
with a failure (:data:`FAILURES`: ``500``, ``501``, ``502``, ``503``) once whatever retries its service allows are
over; its client is answered as before, and the letter is kept in its service's dead letters
(:mod:`generaldomo.sansio.broker.accounts.dead`: bounded per service and in bytes, charged to the ledger). A letter
replayed is taken out of the store and sent as a new request of the admin that asked, detached, under a new
request id: a new task with a new id, whose answer goes to that admin (who fetches it by the id) and never to the
client that had the first answer; a replay the broker refuses (a budget, the broker stopping) leaves the letter
where it was. A letter is taken once, so it is replayed at most once. It accepts a task only through the requests'
part (the one path of a request) and reaches the core only through :class:`Core`. It knows nothing of sockets,
clocks or frames' layout.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Final, Protocol

from generaldomo.sansio.broker.accounts.dead import REASON_BYTES, DeadLetter, DeadLetters, letter_size
from generaldomo.sansio.broker.accounts.ledger import CHARGED, Ledger, connection
from generaldomo.sansio.broker.core.counters import Counters
from generaldomo.sansio.broker.core.turns import Message, Tasks
from generaldomo.sansio.broker.mmi import DeadChange
from generaldomo.sansio.broker.records import Task, request_key
from generaldomo.sansio.config.settings import Settings
from generaldomo.sansio.wire import protocol
from generaldomo.sansio.wire.events import ClientRequest, Dialect, Frame

__all__ = ["FAILURES", "HOLDINGS", "REQUEST_ID_BYTES", "Core", "Dead"]

HOLDINGS = {  # what this part holds on peers' behalf (see generaldomo.sansio.broker.core.HOLDINGS)
    "letters": CHARGED + "dead letters, within dead_bytes in all and dead_letters per service",
}

# A worker's answers that fail its task for good (once its service's retries, if any, are over): a dead letter.
FAILURES: Final = frozenset(
    {protocol.WORKER_ERROR, protocol.NOT_IMPLEMENTED, protocol.BAD_GATEWAY, protocol.UNAVAILABLE}
)
REQUEST_ID_BYTES = 16  # the request id of a replay, random


class Core(Tasks, Protocol):
    """What the dead letters' part may read of the core: its tables of live tasks (a replay accepted is one)."""


class Dead:
    """The dead letters (see the module docstring): ``letters``, the store, within ``settings``' bounds and
    charged to ``ledger``; ``random`` gives the request ids of replays."""

    def __init__(
        self, core: Core, settings: Settings, counters: Counters, ledger: Ledger, random: Callable[[int], bytes]
    ) -> None:
        self._core = core
        self._counters = counters
        self._random = random
        self.letters = DeadLetters(settings.dead_letters, settings.dead_bytes, ledger)

    def failed(self, task: Task, status: bytes, body: Sequence[Frame], now: float) -> None:
        """``task``'s worker answered it ``status`` with ``body``, its final answer: a dead letter if it is a failure
        (:data:`FAILURES`), the start of the answer's first frame its reason."""
        if status in FAILURES:
            first = bytes(body[0][:REASON_BYTES]) if body else b""
            self.bury(task, status, first.decode(errors="replace") or f"the worker answered {status.decode()}", now)

    def bury(self, task: Task, status: bytes, reason: str, now: float) -> None:
        """Keep ``task``, answered ``status`` for ``reason``, in its service's dead letters (counted), charged to its
        client's connection."""
        service = task.service.name
        size = letter_size(task.id, service, task.description, task.body, reason)
        letter = DeadLetter(
            id=task.id, service=service, description=bytes(task.description), body=tuple(map(bytes, task.body)),
            status=status, reason=reason,
            when=now, attempts=task.attempts, tenant=task.tenant if isinstance(task.tenant, str) else None,
            priority=task.priority, charged=connection(task.client.link, task.client.address), size=size,
        )  # fmt: skip
        if self.letters.keep(letter):
            self._counters.dead_lettered += 1

    def take(
        self,
        change: DeadChange,
        event: ClientRequest,
        message: Message,
        request: Callable[[ClientRequest, Message], None],
    ) -> tuple[bytes, list[bytes]]:
        """Apply ``change`` for the ``mmi.dead`` request ``event`` of ``message``: drop the letter, or replay it
        through ``request`` (the requests' part's handler) as a new detached request of the sender; return the
        answer's status and body."""
        letter = self.letters.get(change.service, change.task_id)
        if letter is None:
            return protocol.NOT_FOUND, [b"no such dead letter (replayed or dropped already, or evicted)"]
        if not change.replay:
            self.letters.take(change.service, change.task_id)
            self._counters.dead_dropped += 1
            return protocol.OK, [json.dumps({"dropped": change.task_id.hex()}).encode()]
        if event.dialect is not Dialect.GDP:
            why = b"a replay's answer is fetched by its request id: replay from a generaldomo client"
            return protocol.BAD_REQUEST, [why]
        return self._replay(letter, message, request)

    def _replay(
        self, letter: DeadLetter, message: Message, request: Callable[[ClientRequest, Message], None]
    ) -> tuple[bytes, list[bytes]]:
        """Send ``letter`` again as a new request of ``message``'s sender; take it out once that is accepted."""
        request_id = self._random(REQUEST_ID_BYTES)
        replay = ClientRequest(
            Dialect.GDP, request_id, letter.description, tuple(map(bytes, letter.body)), tenant=letter.tenant,
            priority=letter.priority, flags=protocol.FLAG_DETACHED,
        )  # fmt: skip
        tried = Message(message.peer, message.now, message.credential)
        request(replay, tried)
        task = self._core._by_request.get(request_key(tried.owner, request_id))
        if task is None:  # refused (its answer, to a request id nobody waits for yet, is not sent): the letter stays
            return protocol.UNAVAILABLE, [
                b"the broker refused the replay (a budget, or it is stopping); try again later"
            ]
        self.letters.take(letter.service, letter.id)
        self._counters.dead_replayed += 1
        message.out.extend(tried.out)
        answer = {"replayed": letter.id.hex(), "task": task.id.hex(), "request_id": request_id.hex()}
        return protocol.OK, [json.dumps(answer).encode()]

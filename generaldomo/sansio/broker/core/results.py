"""The broker core's results: what the broker does with what a worker answers.

This module owns the handling of a worker's REPLY (a partial result forwarded, a final one completing the task
through the core or held for a retry by :mod:`~generaldomo.sansio.broker.core.retries`, a ``429`` that sends the
task back to the head of its queue while the worker rests, a result
from a peer that does not hold the task refused, one too large failing its task), the final result of a task a
resumed worker ran or an earlier instance dispatched (taken over when it can be), and a hand-over's results.
Results are accepted only from the task's holder; a task is *completed*, *cancelled* or *finished* only through
the core. It reaches the core only through :class:`Core`, what it may call of it. It knows nothing of sockets,
clocks or frames' layout.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Final, Protocol

from generaldomo.sansio.broker.accounts.kept import KeptAnswers
from generaldomo.sansio.broker.accounts.ledger import connection
from generaldomo.sansio.broker.actions import Forward, Respond
from generaldomo.sansio.broker.core.counters import Counters
from generaldomo.sansio.broker.core.dead import Dead
from generaldomo.sansio.broker.core.handover import Handover
from generaldomo.sansio.broker.core.registration import Registration
from generaldomo.sansio.broker.core.reporting import Reporting
from generaldomo.sansio.broker.core.retries import Retries
from generaldomo.sansio.broker.core.turns import Message, Tasks, Turn, dismiss
from generaldomo.sansio.broker.core.workers import Workers
from generaldomo.sansio.broker.flow.backoff import rest
from generaldomo.sansio.broker.records import Task, WorkerRecord, request_key
from generaldomo.sansio.broker.services.service import Service
from generaldomo.sansio.broker.states import TASK, WORKER, Step, TaskState, WorkerState
from generaldomo.sansio.config.settings import Settings
from generaldomo.sansio.wire import protocol
from generaldomo.sansio.wire.events import Dialect, Frame, WorkerHandover, WorkerReply
from generaldomo.sansio.wire.ticket import Ticket, request_digest

__all__ = ["Core", "Results"]

_W_RESULT: Final = WORKER.row(Step.RESULT)
_T_REISSUE: Final = TASK.row(Step.REISSUE)


class Core(Tasks, Protocol):
    """What the results' part may read and call of the core: its tables of live tasks, and how a task is
    completed, cancelled, finished or dispatched, and a worker waits or leaves."""

    def _cancel(self, task: Task, turn: Turn) -> None: ...
    def _dispatch(self, service: Service, turn: Turn) -> None: ...
    def _wait(self, worker: WorkerRecord, turn: Turn) -> None: ...
    def _leave(self, worker: WorkerRecord, now: float) -> None: ...


class Results:
    """What workers answer (see the module docstring); ``core`` is the broker core it serves, the others its parts
    and what it shares with them."""

    def __init__(
        self, core: Core, settings: Settings, counters: Counters, kept: KeptAnswers, workers: Workers,
        registration: Registration, handover: Handover, reporting: Reporting, retries: Retries,
        dead: Dead,
    ) -> None:  # fmt: skip
        self._core = core
        self._settings = settings
        self._counters = counters
        self._kept = kept
        self._workers = workers
        self._registration = registration
        self._handover = handover
        self._reporting = reporting
        self._retries = retries
        self._dead = dead

    def on_reply(self, event: WorkerReply, message: Message) -> None:
        self._result(event, message, event.status, event.body)

    def on_large_reply(self, event: WorkerReply, message: Message) -> None:
        self._counters.too_large += 1
        self._reporting.warn("too large", message.peer, message.now, "dropped a result larger than max_message")
        reason = f"message larger than the broker's limit of {self._settings.max_message} bytes"
        if event.final:  # the same task would give the same result again: fail it
            self._result(event, message, protocol.TOO_LARGE, (reason.encode(),))
        elif (worker := self._workers.get(message.peer)) is not None:
            worker.expires = message.now + self._settings.expiry

    def _result(self, event: WorkerReply, message: Message, status: bytes, body: Sequence[Frame]) -> None:
        """A worker's (partial) result with ``status`` and ``body``: accepted only from the task's holder."""
        peer, now = message.peer, message.now
        worker = self._workers.get(peer)
        task = self._core._tasks.get(event.task_id)
        if worker is None or task is None or task.worker is not worker:
            resumed = worker is not None and worker.task is None and worker.state is WorkerState.BUSY
            forgotten = (
                worker is None and event.dialect is Dialect.GDP and self._handover.foreign(event.task_id) is not None
            )
            if event.final and (resumed or forgotten):
                self._resumed_result(event, message, status, body, worker)
            else:
                self._refuse_result(event, message, worker, task)
            return
        worker.expires = now + self._settings.expiry
        if not event.final:
            if task.state is TaskState.RUNNING:
                frames = protocol.client_reply(task.dialect, task.request_id, task.description, status, body, False)
                if frames is not None:
                    message.out.append(Forward(task.client, frames))
            return
        worker.task = None
        worker.state = _W_RESULT[worker.state]
        worker.done += 1
        if self._handover.on:
            self._handover.taken(worker, event.task_id)
        same = event.description is None or event.description == worker.description
        if task.state is TaskState.CANCELLED:
            self._core._finish(task, task.state)
        elif status == protocol.OVER_BUDGET and event.dialect is Dialect.GDP:  # "slow down": not a failure
            self._slow_down(task, worker, body, now)
            if not same or worker.rests is not None:
                self._core._dispatch(task.service, message)
        elif status[:1] == b"5" and self._retries.take(task, status, body, event.dialect, message):  # held, or 504
            if not same:
                self._core._dispatch(task.service, message)
        else:  # when the worker waits again on the same service, _wait below dispatches the place it freed
            if status == protocol.UNAVAILABLE and protocol.marked_retry(status, body):
                body = body[:1]  # (the retry mark is the broker's, not the client's)
            self._dead.failed(task, status, body, now)
            self._core._complete(task, status, body, message, dispatch=not same)
        if not same and event.description is not None:
            self._core._leave(worker, now)
            self._registration.register(
                message, event.dialect, event.description, (worker.host, worker.pid), worker.features
            )
            return
        if worker.rests is None:
            self._core._wait(worker, message)

    def _slow_down(self, task: Task, worker: WorkerRecord, body: Sequence[Frame], now: float) -> None:
        """``worker`` answered 429: ``task`` goes back to the head of its queue (not a failure, not an attempt), the
        worker rests for the answer's retry_after (bounded both ways:
        :func:`~generaldomo.sansio.broker.flow.backoff.rest`) and its service's dispatch rate adapts, as far as the 429s
        of its workers justify."""
        service = task.service
        task.worker = None
        task.state = _T_REISSUE[task.state]
        task.attempts -= 1
        service.flow.finished(task.size)
        service.stopped(task)
        retry_after = protocol.parse_retry_after(body)
        self._workers.rest(worker, now + rest(retry_after))
        service.flow.slow_down(now, task.dispatched, retry_after, worker.serial, len(service.workers))
        service.stats.throttled += 1
        self._counters.throttled += 1
        service.push(task, front=True)

    def _refuse_result(
        self, event: WorkerReply, message: Message, worker: WorkerRecord | None, task: Task | None
    ) -> None:
        peer, now = message.peer, message.now
        if worker is not None:
            worker.expires = now + self._settings.expiry
            if event.final and self._handover.on:
                self._handover.taken(worker, event.task_id)  # whatever became of it, the worker need not hold it
        if task is None:
            self._counters.duplicates_dropped += 1
            if worker is not None:
                worker.service.stats.duplicates_dropped += 1
            self._reporting.warn(
                "stale result", peer, now, "dropped a result for a task that is not live", level=logging.INFO
            )
        else:
            self._counters.results_refused += 1
            self._reporting.warn(
                "refused result", peer, now, "refused a result from a peer that does not hold the task"
            )
        if worker is None:
            message.out.append(dismiss(peer, event.dialect))

    def _resumed_result(
        self, event: WorkerReply, message: Message, status: bytes, body: Sequence[Frame], worker: WorkerRecord | None
    ) -> None:
        """The result of a resumed worker's own task, or of a worker this instance does not know (a restart
        forgot it) whose task an earlier instance dispatched: taken over if it can be, and the worker waits."""
        if worker is None:
            description = event.description if event.description is not None else b""
            worker = self._registration.register(message, event.dialect, description, busy=True)
            if worker is None:
                return
        worker.expires = message.now + self._settings.expiry
        ticket = self._handover.foreign(event.task_id)
        if ticket is not None and ticket.service == worker.service.name:
            self._hand_over(ticket, status, body, message)
        else:
            self._counters.duplicates_dropped += 1
        self._handover.drop_claim(worker)
        self._handover.taken(worker, event.task_id)
        worker.state = _W_RESULT[worker.state]
        worker.done += 1
        self._core._wait(worker, message)

    def _hand_over(self, ticket: Ticket, status: bytes, body: Sequence[Frame], message: Message) -> None:
        """A result of a task an earlier instance dispatched, from the worker that sent ``message``: it answers the
        request if it is live here (whose own run is then let go) and is kept for the client's resend or re-ask
        (charged to that client's connection, else to the worker's); a request with another description or
        payload under the same id is not answered by it."""
        now = message.now
        key = request_key(ticket.owner, ticket.request_id)
        live = self._core._by_request.get(key)
        if live is not None and request_digest(live.description, live.body) != ticket.digest:
            self._counters.handovers_refused += 1
            return
        if status == protocol.UNAVAILABLE and protocol.marked_retry(status, body):
            body = body[:1]  # (a run an earlier instance dispatched is not retried here: its answer stands)
        frames = protocol.client_reply(Dialect.GDP, ticket.request_id, b"", status, body, True)
        assert frames is not None  # a final reply always has frames
        self._counters.handed_over += 1
        charged = message.peer
        if live is not None:
            message.out.append(Respond(live.client, frames))
            charged = live.client
            del self._core._by_request[key]
            self._core._cancel(live, message)
        elif self._kept.get(key, now) is not None:
            return  # answered already: the first answer stands
        self._kept.keep(key, frames, now, connection(charged.link, charged.address), ticket.digest)

    def on_handover(self, event: WorkerHandover, message: Message) -> None:
        worker = self._workers.get(message.peer)
        if worker is None:
            message.out.append(dismiss(message.peer, event.dialect))
            return
        worker.expires = message.now + self._settings.expiry
        ticket = self._handover.foreign(event.task_id)
        credential = message.credential
        if ticket is not None and (credential is None or credential.may_serve(ticket.service)):
            self._hand_over(ticket, event.status, event.body, message)
        else:
            self._counters.duplicates_dropped += 1
        self._handover.taken(worker, event.task_id)

    def on_large_handover(self, event: WorkerHandover, message: Message) -> None:
        self._counters.too_large += 1
        self._reporting.warn(
            "too large", message.peer, message.now, "dropped a handed-over result larger than max_message"
        )
        if (worker := self._workers.get(message.peer)) is not None:
            self._handover.taken(worker, event.task_id)  # nothing more will come of it

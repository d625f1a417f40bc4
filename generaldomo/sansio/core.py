"""The broker core: a sans-IO state machine that pairs client requests with workers.

Rules of this file:

- Everything that decides what the broker does lives here: registration, dispatch, heartbeats, expiry,
  reissue, duplicate suppression and MMI answers.
- It reads no socket and no clock. It is fed ``(peer, frames, now)`` by :meth:`BrokerCore.receive` and clock
  ticks by :meth:`BrokerCore.tick`, and returns the messages to send as ``Send(peer, frames)``.
- It does not know which transport a peer came over; a :class:`Peer` is an opaque ``(link, address)`` pair.
- It does not know how descriptions map to services (the resolver's job) nor how a service orders its
  queues (the service's job), nor how frames are laid out (the protocol module's job).

Theory of operation. A worker's READY joins the service its description resolves to and waits there. A
client's request becomes a *task* with a broker-made id, queued on the service its description resolves to.
Whenever a service has both a waiting worker and a pending task, the service picks a pair and the task is
sent to the worker, which is then busy. The worker's final reply completes the task: the result goes to the
client that asked and the worker waits again. Each task is answered once: a reply for a task that is no longer
live (already answered, or unknown) is counted and dropped. A worker that says DISCONNECT, re-registers, or
stays silent for ``liveness`` heartbeat intervals is forgotten; the task it held goes back to the front of
its service's queue, unless it has already been tried ``max_attempts`` times, in which case the client gets
an error reply. generaldomo clients put a unique request id in every request; a request whose id is already
live (a client's retry, perhaps over a new connection) is not a new task: its answer goes to the latest sender.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from typing import Any, NamedTuple

import attrs

from generaldomo.sansio import mmi, protocol
from generaldomo.sansio.events import (
    ClientHeartbeat,
    ClientRequest,
    Dialect,
    Malformed,
    WorkerDisconnect,
    WorkerHeartbeat,
    WorkerReady,
    WorkerReply,
)
from generaldomo.sansio.flow import Flow
from generaldomo.sansio.resolver import NameResolver, ResolveError, Resolver
from generaldomo.sansio.service import Service
from generaldomo.sansio.settings import Settings

log = logging.getLogger(__name__)

MMI_PREFIX = b"mmi."


class Peer(NamedTuple):
    """Where a message came from: the index of the link and the peer's address on it.

    The address is opaque to the core: a ROUTER identity (``bytes``), a SERVER routing id (``int``), or the
    identities of every hop of a ROUTER envelope (a tuple, outermost first)."""

    link: int
    address: bytes | int | tuple[bytes, ...]


class Send(NamedTuple):
    """A message the broker must send."""

    peer: Peer
    frames: list[bytes]


@attrs.define(eq=False, slots=True)
class Worker:
    """The core's record of one registered worker."""

    peer: Peer
    dialect: Dialect
    description: bytes
    service: Service
    expires: float
    task: Task | None = None
    waiting: bool = False
    done: int = 0


@attrs.define(eq=False, slots=True)
class Task:
    """One client request, from acceptance until its single answer."""

    id: bytes
    client: Peer
    dialect: Dialect
    request_id: bytes | None
    description: bytes
    body: tuple[bytes, ...]
    service: Service
    enqueued: float
    worker: Worker | None = None
    dispatched: float | None = None
    attempts: int = 0
    in_flight: bool = False


class BrokerCore:
    """The broker's state machine; see the module docstring."""

    def __init__(
        self,
        resolver: Resolver | None = None,
        settings: Settings | None = None,
        instance: bytes = b"",
        started: float = 0.0,
    ) -> None:
        self.resolver: Resolver = resolver if resolver is not None else NameResolver()
        self.settings = settings or Settings()
        self.counters: Counter[str] = Counter()
        self._instance = instance
        self._serial = 0
        self._workers: dict[Peer, Worker] = {}
        self._tasks: dict[bytes, Task] = {}
        self._by_request: dict[bytes, Task] = {}
        self._next_sweep: float | None = None
        self._throttled: dict[Service, float] = {}  # services held back by their rate limit -> when to retry
        self._adopted: set[Service] = set()
        self.flows: dict[str, dict[str, Any]] = {}  # flow limits by service name, applied to services as they appear
        self.started = started
        self.endpoints: list[tuple[str, str]] = []  # what the links are bound to; told by whoever runs the core
        self._handlers = {
            ClientRequest: self._on_request,
            ClientHeartbeat: self._on_client_heartbeat,
            WorkerReady: self._on_ready,
            WorkerReply: self._on_reply,
            WorkerHeartbeat: self._on_heartbeat,
            WorkerDisconnect: self._on_disconnect,
            Malformed: self._on_malformed,
        }

    # ------------------------------------------------------------------------------------------- public

    @property
    def workers(self) -> dict[Peer, Worker]:
        """Registered workers by peer (read only)."""
        return self._workers

    @property
    def tasks(self) -> dict[bytes, Task]:
        """Live tasks (queued or running) by task id (read only)."""
        return self._tasks

    def receive(self, peer: Peer, frames: Sequence[bytes], now: float) -> list[Send]:
        """Act on one message from ``peer``; return what to send."""
        out: list[Send] = []
        event = protocol.parse(frames)
        limit = self.settings.max_message
        if limit is not None and isinstance(event, ClientRequest | WorkerReply) and _size(frames) > limit:
            self._too_large(peer, event, now, out)
        else:
            self._handlers[type(event)](peer, event, now, out)
        if self._next_sweep is None:
            self._next_sweep = now + self.settings.heartbeat_interval
        return out

    @property
    def instance(self) -> bytes:
        """The id of this broker instance, told to clients so they notice a restart."""
        return self._instance

    def deadline(self) -> float | None:
        """The time at which :meth:`tick` next has work to do, or None if it has none."""
        if not self._throttled:
            return self._next_sweep
        soonest = min(self._throttled.values())
        return soonest if self._next_sweep is None else min(soonest, self._next_sweep)

    def tick(self, now: float) -> list[Send]:
        """Dispatch what rate limits now allow; send heartbeats and expire silent workers when their time has
        come; return what to send."""
        out: list[Send] = []
        for service in [s for s, when in self._throttled.items() if when <= now]:
            del self._throttled[service]
            self._dispatch(service, now, out)
        if self._next_sweep is not None and now >= self._next_sweep:
            self._sweep(now, out)
        return out

    def set_flow(
        self, name: str, rate: float | None, burst: int | None, concurrency: int | None, now: float
    ) -> list[Send]:
        """Set the flow limits of the services named ``name`` (now and when they appear); return what to send."""
        flow = {"rate": rate, "burst": burst, "concurrency": concurrency}
        Flow().configure(**flow)  # raises ValueError on a bad limit before anything changes
        self.flows[name] = flow
        out: list[Send] = []
        for service in [s for s in self.resolver.services() if s.name == name]:
            service.flow.configure(**flow)
            self._throttled.pop(service, None)
            self._dispatch(service, now, out)
        return out

    def _adopt(self, service: Service) -> None:
        """Apply configured flow limits to a service the first time the core sees it."""
        if service not in self._adopted:
            self._adopted.add(service)
            flow = self.flows.get(service.name)
            if flow is not None:
                service.flow.configure(**flow)

    def _sweep(self, now: float, out: list[Send]) -> None:
        settings = self.settings
        busy = self._workers or (settings.queue_timeout is not None and self._tasks)
        self._next_sweep = now + settings.heartbeat_interval if busy else None
        if settings.queue_timeout is not None:
            self._expire_queued(now - settings.queue_timeout, now, out)
        expired = [w for w in self._workers.values() if w.expires <= now]
        for worker in expired:  # unregister them all first, so no reissued task goes to one of them
            log.info("worker %s (%r) expired", _show(worker.peer), worker.description)
            self.counters["workers_expired"] += 1
            self._unregister(worker)
        for worker in expired:
            self._release(worker, now, out)
        for worker in self._workers.values():
            out.append(Send(worker.peer, protocol.worker_command(worker.dialect, protocol.HEARTBEAT)))

    def close(self) -> list[Send]:
        """Tell every worker the broker is going away; return what to send."""
        out = [Send(w.peer, protocol.worker_command(w.dialect, protocol.DISCONNECT)) for w in self._workers.values()]
        self._workers.clear()
        return out

    # ------------------------------------------------------------------------------------------- clients

    def _on_request(self, peer: Peer, event: ClientRequest, now: float, out: list[Send]) -> None:
        self.counters["requests"] += 1
        if event.description.startswith(MMI_PREFIX):
            self._answer_mmi(peer, event, now, out)
            return
        retried = self._by_request.get(event.request_id) if event.request_id is not None else None
        if retried is not None:  # a retry, maybe over a new connection: answer once, to the latest sender
            retried.client = peer
            self.counters["retries_absorbed"] += 1
            return
        try:
            service = self.resolver.for_request(event.description)
        except ResolveError as error:
            self._reject(peer, event, protocol.BAD_REQUEST, str(error), out)
            return
        except Exception as error:  # a faulty resolver plug-in must not stop the broker
            log.exception("resolver failed on request description %r", event.description[:64])
            self._reject(peer, event, protocol.BAD_REQUEST, f"resolver error: {error!r}", out)
            return
        self._adopt(service)
        self._serial += 1
        task = Task(
            self._instance + self._serial.to_bytes(8, "big"),
            peer,
            event.dialect,
            event.request_id,
            event.description,
            event.body,
            service,
            now,
        )
        self._tasks[task.id] = task
        if event.request_id is not None:
            self._by_request[event.request_id] = task
        service.push(task)
        self._dispatch(service, now, out)

    def _on_client_heartbeat(self, peer: Peer, event: ClientHeartbeat, now: float, out: list[Send]) -> None:
        out.append(Send(peer, protocol.gdp_client_heartbeat(self._instance)))

    def _too_large(self, peer: Peer, event: ClientRequest | WorkerReply, now: float, out: list[Send]) -> None:
        self.counters["too_large"] += 1
        reason = f"message larger than the broker's limit of {self.settings.max_message} bytes"
        if isinstance(event, ClientRequest):
            self._reject(peer, event, protocol.TOO_LARGE, reason, out)
            return
        log.warning("dropped a too large result for task %s from %s", event.task_id.hex(), _show(peer))
        if event.final:  # the same task would give the same result again: fail it
            self._on_reply(peer, attrs.evolve(event, status=protocol.TOO_LARGE, body=(reason.encode(),)), now, out)
        elif (worker := self._workers.get(peer)) is not None:
            worker.expires = now + self.settings.expiry

    def _expire_queued(self, enqueued_before: float, now: float, out: list[Send]) -> None:
        """Answer 504 to queued requests that have waited since before ``enqueued_before``."""
        stale: dict[Service, set[Task]] = {}
        for task in self._tasks.values():  # oldest first
            if task.enqueued >= enqueued_before:
                break
            if task.worker is None:
                stale.setdefault(task.service, set()).add(task)
        for service, tasks in stale.items():
            service.discard(tasks)
            for task in tasks:
                reason = b"no worker took the request in time"
                self._complete(task, protocol.EXPIRED, [reason], now, out, queued=False)

    def _reject(self, peer: Peer, event: ClientRequest, status: bytes, reason: str, out: list[Send]) -> None:
        self.counters["rejected"] += 1
        log.info("rejected request from %s: %s", _show(peer), reason)
        frames = protocol.client_reply(
            event.dialect, event.request_id, event.description, status, [reason.encode()], final=True
        )
        if frames is not None:
            out.append(Send(peer, frames))

    def _answer_mmi(self, peer: Peer, event: ClientRequest, now: float, out: list[Send]) -> None:
        try:
            status, body, caused = mmi.answer(self, event.description, event.body, now)
        except mmi.ManagementError as error:
            self._reject(peer, event, protocol.BAD_REQUEST, str(error), out)
            return
        frames = protocol.client_reply(event.dialect, event.request_id, event.description, status, body, True)
        if frames is not None:
            out.append(Send(peer, frames))
        out.extend(caused)

    # ------------------------------------------------------------------------------------------- workers

    def _on_ready(self, peer: Peer, event: WorkerReady, now: float, out: list[Send]) -> None:
        known = self._workers.get(peer)
        if known is not None:
            log.info("worker %s sent READY again; re-registering it", _show(peer))
            self._forget(known, now, out)
            if event.dialect is not Dialect.GDP:  # MDP: a second READY is a protocol error
                out.append(Send(peer, protocol.worker_command(event.dialect, protocol.DISCONNECT)))
                return
        service = self._resolve_worker(peer, event.dialect, event.description, out)
        if service is None:
            return
        worker = Worker(peer, event.dialect, event.description, service, now + self.settings.expiry)
        self._workers[peer] = worker
        service.join(worker)
        self.counters["workers_registered"] += 1
        self._wait(worker, now, out)

    def _resolve_worker(self, peer: Peer, dialect: Dialect, description: bytes, out: list[Send]) -> Service | None:
        """The service for a worker's description, or None after telling the worker to go away."""
        reason = None
        if description.startswith(MMI_PREFIX):
            reason = "mmi. services belong to the broker"
        else:
            try:
                service = self.resolver.for_worker(description)
                self._adopt(service)
                return service
            except ResolveError as error:
                reason = str(error)
            except Exception as error:  # a faulty resolver plug-in must not stop the broker
                log.exception("resolver failed on service description %r", description[:64])
                reason = repr(error)
        log.warning("refused worker %s with description %r: %s", _show(peer), description[:64], reason)
        self.counters["workers_refused"] += 1
        out.append(Send(peer, protocol.worker_command(dialect, protocol.DISCONNECT)))
        return None

    def _on_reply(self, peer: Peer, event: WorkerReply, now: float, out: list[Send]) -> None:
        worker = self._workers.get(peer)
        task = self._tasks.get(event.task_id)
        if worker is not None:
            worker.expires = now + self.settings.expiry
        if task is None:
            self.counters["duplicates_dropped"] += 1
            if worker is not None:
                worker.service.stats.duplicates_dropped += 1
            log.info("dropped a reply for task %s, which is not live", event.task_id.hex())
        elif event.final:
            self._complete(task, event.status, event.body, now, out)
        elif task.worker is worker:
            frames = protocol.client_reply(
                task.dialect, task.request_id, task.description, event.status, event.body, False
            )
            if frames is not None:
                out.append(Send(task.client, frames))
        if worker is None:
            out.append(Send(peer, protocol.worker_command(event.dialect, protocol.DISCONNECT)))
            return
        if not event.final or (worker.task is not None and worker.task is not task):
            return
        if task is not None:
            worker.done += 1
        if event.description is not None and event.description != worker.description:
            self._forget(worker, now, out)
            self._on_ready(peer, WorkerReady(event.dialect, event.description), now, out)
            return
        self._wait(worker, now, out)

    def _on_heartbeat(self, peer: Peer, event: WorkerHeartbeat, now: float, out: list[Send]) -> None:
        worker = self._workers.get(peer)
        if worker is None:
            out.append(Send(peer, protocol.worker_command(event.dialect, protocol.DISCONNECT)))
        else:
            worker.expires = now + self.settings.expiry

    def _on_disconnect(self, peer: Peer, event: WorkerDisconnect, now: float, out: list[Send]) -> None:
        worker = self._workers.get(peer)
        if worker is not None:
            log.info("worker %s disconnected", _show(peer))
            self._forget(worker, now, out)

    def _on_malformed(self, peer: Peer, event: Malformed, now: float, out: list[Send]) -> None:
        self.counters["malformed"] += 1
        log.warning("dropped a malformed message from %s: %s", _show(peer), event.reason)

    # ------------------------------------------------------------------------------------------- state changes

    def _wait(self, worker: Worker, now: float, out: list[Send]) -> None:
        worker.task = None
        if not worker.waiting:
            worker.waiting = True
            worker.service.wait(worker)
        self._dispatch(worker.service, now, out)

    def _dispatch(self, service: Service, now: float, out: list[Send]) -> None:
        """Send the service's pending tasks to its waiting workers, as far as its flow limits allow."""
        flow = service.flow
        while True:
            if not flow.admits(now):
                if service.pending and service.waiting:
                    when = flow.next_token(now)  # None when the concurrency cap holds it: a completion frees it
                    if when is not None:
                        self._throttled[service] = when
                return
            pair = service.next_pair()
            if pair is None:
                return
            worker, task = pair
            worker.waiting = False
            worker.task = task
            task.worker = worker
            task.dispatched = now
            task.attempts += 1
            task.in_flight = True
            flow.dispatched(now)
            out.append(Send(worker.peer, protocol.worker_request(worker.dialect, task.id, task.description, task.body)))

    def _land(self, task: Task) -> bool:
        """Take ``task`` out of its service's flight count; True if it was in flight."""
        if not task.in_flight:
            return False
        task.in_flight = False
        task.service.flow.finished()
        return True

    def _complete(
        self, task: Task, status: bytes, body: Sequence[bytes], now: float, out: list[Send], *, queued: bool = True
    ) -> None:
        """Answer ``task``'s client and forget the task; ``queued=False`` when it is already off its queue."""
        del self._tasks[task.id]
        if task.request_id is not None:
            self._by_request.pop(task.request_id, None)
        holder = task.worker
        if holder is None:
            if queued:
                task.service.drop(task)
        elif holder.task is task:
            holder.task = None
        self.counters["completed"] += 1
        waited = (task.dispatched if task.dispatched is not None else now) - task.enqueued
        served = now - task.dispatched if task.dispatched is not None else 0.0
        stats = task.service.stats
        if status == protocol.UNAVAILABLE:
            stats.failed += 1
            self.counters["failed"] += 1
        elif status == protocol.EXPIRED:
            stats.expired += 1
            self.counters["expired"] += 1
        else:
            stats.record(waited, served, now)
        meta = protocol.timing(waited, served)
        frames = protocol.client_reply(task.dialect, task.request_id, task.description, status, body, True, meta)
        if frames is not None:
            out.append(Send(task.client, frames))
        if self._land(task):
            self._dispatch(task.service, now, out)  # a place in flight came free

    def _forget(self, worker: Worker, now: float, out: list[Send]) -> None:
        """Drop ``worker``; reissue or fail the task it held."""
        self._unregister(worker)
        self._release(worker, now, out)

    def _unregister(self, worker: Worker) -> None:
        del self._workers[worker.peer]
        worker.service.leave(worker)
        worker.waiting = False

    def _release(self, worker: Worker, now: float, out: list[Send]) -> None:
        """Reissue or fail the task an unregistered ``worker`` held."""
        task, worker.task = worker.task, None
        if task is None:
            return
        task.worker = None
        if task.attempts >= self.settings.max_attempts:
            reason = f"task lost with its worker {task.attempts} times; giving up"
            self._complete(task, protocol.UNAVAILABLE, [reason.encode()], now, out, queued=False)
            return
        self._land(task)
        self.counters["reissued"] += 1
        task.service.stats.reissued += 1
        task.service.push(task, front=True)
        self._dispatch(task.service, now, out)


def _size(frames: Sequence[bytes]) -> int:
    return sum(map(len, frames))


def _show(peer: Peer) -> str:
    address = peer.address.hex() if isinstance(peer.address, bytes) else str(peer.address)
    return f"{peer.link}/{address}"

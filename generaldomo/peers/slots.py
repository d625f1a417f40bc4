"""Slots: each one worker registration serving one service, one task at a time, on its own thread.

Rules:

- A :class:`Slot` is a :class:`~generaldomo.Worker` around a :class:`~generaldomo.peers.app.Bound` handler;
  the broker sees each slot as a worker, so its reissue, flow control and balancing see each one.
- Stopping is in two steps. :meth:`Slot.begin_stop`: an idle slot leaves at once (DISCONNECT); a running
  task goes on and its result is sent, then the slot leaves; a task that arrives from now on is handed back
  unrun (the worker leaves, so the broker reissues it). :meth:`Slot.cut_short`: past the grace a slot still
  running leaves anyway, telling the broker, which reissues the task; the handler's thread is abandoned.
  :meth:`SlotGroup.stop` does both for all its slots at once, so it returns within the grace and a fraction of
  a second.
- :class:`SlotGroup` is the thread pool: ``copies`` slots of each service in this process.

It knows nothing of processes or signals (:mod:`generaldomo.peers.pool`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import attrs

from generaldomo.io.peer.locator import Place
from generaldomo.peers.app import Bound, ServiceSpec
from generaldomo.peers.task import TaskContext
from generaldomo.peers.worker import Worker
from generaldomo.sansio.config.settings import HEARTBEAT_INTERVAL, LIVENESS

__all__ = ["ABANDON_WAIT", "DEFAULT_OPTIONS", "Slot", "SlotGroup", "SlotOptions"]

log = logging.getLogger(__name__)

ABANDON_WAIT = 0.25  # seconds the slots cut short get, all together, to write their DISCONNECT


@attrs.frozen(slots=True)
class SlotOptions:
    """How each slot's worker heartbeats the broker, and its CURVE keys (None: plaintext)."""

    heartbeat_interval: float = HEARTBEAT_INTERVAL
    liveness: int = LIVENESS
    server_key: bytes | None = None
    keys: tuple[bytes, bytes] | None = attrs.field(default=None, repr=False)


DEFAULT_OPTIONS = SlotOptions()


class Slot:
    """One registration of one service; see the module docstring."""

    def __init__(self, service: ServiceSpec, endpoint: Place, transport: str, options: SlotOptions) -> None:
        self.service = service
        self.bound = Bound(service)
        self.failure: BaseException | None = None
        self._stopping = threading.Event()
        self.worker = Worker(
            endpoint,
            service.description,
            self._handle,
            transport,
            heartbeat_interval=options.heartbeat_interval,
            liveness=options.liveness,
            server_key=options.server_key,
            keys=options.keys,
        )
        self.thread = threading.Thread(target=self._serve, name=f"generaldomo-slot-{service.name}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    @property
    def alive(self) -> bool:
        return self.thread.is_alive()

    def begin_stop(self) -> None:
        """Take no new task; an idle slot leaves now, a running one after sending its result."""
        self._stopping.set()
        self.worker.stop(finish=True)

    def cut_short(self) -> None:
        """Past the grace: leave anyway, telling the broker, which reissues the task; the handler is abandoned."""
        log.warning("a %r task outlived the stop grace; the broker reissues it", self.service.name)
        self.worker.stop()

    def _serve(self) -> None:
        try:
            self.worker.serve()
        except Exception as error:  # the group sees .failure and replaces the slot
            log.exception("a %r slot stopped serving", self.service.name)
            self.failure = error
        finally:
            self.bound.close()

    def _handle(self, payload: bytes | tuple[bytes, ...], task: TaskContext) -> Any:
        # takes the task's context, as Bound does, so that a handler that asks for it gets it
        if self._stopping.is_set():
            self.worker.stop()  # leave without answering: the broker reissues the task
            return b""
        return self.bound(payload, task)


class SlotGroup:
    """``copies`` slots of each of ``services``, as threads of this process (the thread pool)."""

    def __init__(
        self,
        services: Sequence[ServiceSpec],
        copies: int,
        endpoint: Place,
        transport: str,
        options: SlotOptions = DEFAULT_OPTIONS,
    ) -> None:
        if copies < 1:
            raise ValueError(f"concurrency is at least 1, not {copies}")
        self._where = (endpoint, transport, options)
        self.slots = [self._make(service) for service in services for _ in range(copies)]
        self._stopping = False

    def _make(self, service: ServiceSpec) -> Slot:
        return Slot(service, *self._where)

    def start(self) -> None:
        for slot in self.slots:
            slot.start()

    def watch(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds, then replace any slot whose worker stopped serving unasked."""
        time.sleep(timeout)
        for index, slot in enumerate(self.slots):
            if not slot.alive and not self._stopping:
                log.warning("replacing a %r slot that stopped (%r)", slot.service.name, slot.failure)
                self.slots[index] = self._make(slot.service)
                self.slots[index].start()

    def registrations(self) -> dict[str, tuple[int, int]]:
        """Per service name: (slots the broker has accepted, slots)."""
        counts: dict[str, tuple[int, int]] = {}
        for slot in self.slots:
            registered, total = counts.get(slot.service.name, (0, 0))
            counts[slot.service.name] = (registered + slot.worker.registered, total + 1)
        return counts

    def handshake_failure(self) -> str | None:
        """Why the broker refuses the slots' connections, if it does (see Worker.handshake_failure)."""
        failure = next((s.worker.handshake_failure for s in self.slots if s.worker.handshake_failure), None)
        return None if failure is None else failure.cause

    def stop(self, grace: float) -> int:
        """Stop every slot, letting running tasks finish for up to ``grace`` seconds; the number cut short."""
        self._stopping = True
        for slot in self.slots:
            slot.begin_stop()
        deadline = time.monotonic() + grace
        for slot in self.slots:
            slot.thread.join(max(0.0, deadline - time.monotonic()))
        late = [slot for slot in self.slots if slot.alive]
        for slot in late:
            slot.cut_short()
        abandon = time.monotonic() + ABANDON_WAIT
        for slot in late:
            slot.thread.join(max(0.0, abandon - time.monotonic()))
        return len(late)

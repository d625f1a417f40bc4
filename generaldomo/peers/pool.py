"""Running an app with concurrency: ``run_app(spec, endpoint, ...)`` and ``python -m generaldomo.peers.pool``.

Rules:

- ``concurrency N`` gives each selected service N slots (:mod:`generaldomo.peers.slots`), each its own
  worker registration. ``pool="thread"``: every slot is a thread of this process (handlers that wait: IO,
  ``async def``, native code that releases the GIL). ``pool="process"``: N child processes (``spawn`` or
  ``forkserver``), each with one slot of every service (CPU-bound Python handlers). A child or slot that
  dies unasked is replaced, at most one per second.
- Stop (SIGINT or SIGTERM in :func:`run_app`, or :meth:`ProcessPool.stop`): idle slots leave at once; a
  running task has ``stop_grace`` seconds to finish and be answered; past that its slot leaves anyway and
  the broker reissues the task to another worker. Every request is answered once.
- The children ignore SIGINT (a terminal's Ctrl-C reaches the whole group: the parent decides) and leave
  when the parent does.

It knows nothing of the protocol (the Worker speaks it) or of the ``generaldomo`` command's other options.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import time
from collections.abc import Sequence
from multiprocessing.process import BaseProcess
from typing import Any, Protocol, TextIO

from generaldomo.io.peer.locator import Locator, Place, Where
from generaldomo.io.signals import stop_on_signals
from generaldomo.peers.app import App, load
from generaldomo.peers.slots import DEFAULT_OPTIONS, SlotGroup, SlotOptions
from generaldomo.sansio.config.settings import HEARTBEAT_INTERVAL, LIVENESS

__all__ = ["make_pool", "run_app"]

log = logging.getLogger(__name__)

POOLS = ("thread", "process")
START_METHODS = ("spawn", "forkserver")
DEFAULT_GRACE = 30.0  # seconds a running task may take to finish when its pool stops
EXIT_MARGIN = 5.0  # seconds past the grace a child gets to exit before it is killed
CUT_SHORT = 3  # a child's exit status when it left tasks to be reissued
RESTART_EVERY = 1.0  # at most one replacement per this many seconds
_CHILD_POLL = 0.2  # seconds between a pool's looks at its slots (and a child's at the stop signal)


class Pool(Protocol):
    def start(self) -> None: ...

    def watch(self, timeout: float) -> None: ...

    def registrations(self) -> dict[str, tuple[int, int]]:
        """Per service name: (slots the broker has accepted, slots)."""

    def handshake_failure(self) -> str | None:
        """Why the broker refuses the slots' connections, if this process knows (threads; processes log it)."""

    def stop(self, grace: float) -> int:
        """Stop gracefully; the number of slots (thread pool) or processes that left tasks to be reissued."""


class _Drain:
    """The children's stop signal and the grace it gives running tasks, shared with them."""

    def __init__(self, context: Any) -> None:
        self._event = context.Event()
        self._grace = context.Value("d", DEFAULT_GRACE)

    @property
    def grace(self) -> float:
        return float(self._grace.value)

    def is_set(self) -> bool:
        return bool(self._event.is_set())

    def set(self, grace: float) -> None:
        self._grace.value = grace
        self._event.set()


def _child(
    spec: str,
    services: Sequence[str] | None,
    endpoint: Place,
    transport: str,
    options: SlotOptions,
    drain: _Drain,
    registered: Any,
    index: int,
) -> None:
    """A pool process: one slot of each service until ``drain`` is set, the parent goes, or SIGTERM; it marks
    its slots the broker accepted in ``registered`` (one flag per service, from ``index`` on)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    asked = stop_on_signals([signal.SIGTERM])
    group = SlotGroup(load(spec).select(services), 1, endpoint, transport, options)
    group.start()
    parent = multiprocessing.parent_process()
    while not (asked.is_set() or drain.is_set() or (parent is not None and not parent.is_alive())):
        group.watch(_CHILD_POLL)
        for offset, slot in enumerate(group.slots):
            registered[index + offset] = slot.worker.registered
    if group.stop(drain.grace):
        logging.shutdown()
        os._exit(CUT_SHORT)  # abandoned handler threads hold sockets open; their DISCONNECT went out


class ProcessPool:
    """``concurrency`` child processes, each serving one slot of every selected service of ``spec``."""

    def __init__(
        self,
        spec: str,
        endpoint: Place,
        transport: str,
        concurrency: int,
        *,
        services: Sequence[str] | None = None,
        options: SlotOptions = DEFAULT_OPTIONS,
        start_method: str = "spawn",
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency is at least 1, not {concurrency}")
        for named in Where.of(endpoint).endpoints:
            if named.startswith("inproc://"):
                raise ValueError(f"{named} reaches only this process; use the thread pool or tcp:// or ipc://")
        self._context: Any = multiprocessing.get_context(start_method)  # typeshed's BaseContext lacks Process
        self._drain = _Drain(self._context)
        self._names = [service.name for service in load(spec).select(services)]
        self._registered = self._context.Array("b", concurrency * len(self._names), lock=False)
        self._args = (spec, services, endpoint, transport, options, self._drain, self._registered)
        self._size = concurrency
        self.children: list[BaseProcess] = []
        self._next_restart = 0.0

    def _spawn(self, index: int) -> BaseProcess:
        for offset in range(len(self._names)):
            self._registered[index * len(self._names) + offset] = 0
        args = (*self._args, index * len(self._names))
        child: BaseProcess = self._context.Process(target=_child, args=args, name=f"generaldomo-pool-{index}")
        child.start()
        return child

    def start(self) -> None:
        self.children = [self._spawn(index) for index in range(self._size)]

    def watch(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for a child to end; replace one that ended unasked."""
        multiprocessing.connection.wait([child.sentinel for child in self.children if child.is_alive()], timeout)
        for index, child in enumerate(self.children):
            if child.is_alive() or self._drain.is_set() or time.monotonic() < self._next_restart:
                continue
            log.warning("pool process %s ended with status %s; starting another", child.pid, child.exitcode)
            self._next_restart = time.monotonic() + RESTART_EVERY
            self.children[index] = self._spawn(index)

    def registrations(self) -> dict[str, tuple[int, int]]:
        flags = list(self._registered)
        count = len(self._names)
        return {name: (sum(flags[offset::count]), self._size) for offset, name in enumerate(self._names)}

    def handshake_failure(self) -> str | None:
        return None  # each child logs it

    def stop(self, grace: float) -> int:
        """Tell every child to stop, giving running tasks ``grace`` seconds; the number that cut tasks short."""
        self._drain.set(grace)
        deadline = time.monotonic() + grace + EXIT_MARGIN
        cut_short = 0
        for child in self.children:
            child.join(max(0.0, deadline - time.monotonic()))
            if child.is_alive():
                child.kill()
                child.join()
            cut_short += child.exitcode != 0
        return cut_short


def make_pool(
    spec: str | App,
    endpoint: Place,
    transport: str = "router",
    *,
    concurrency: int = 1,
    pool: str = "thread",
    services: Sequence[str] | None = None,
    options: SlotOptions = DEFAULT_OPTIONS,
    start_method: str = "spawn",
) -> Pool:
    """A pool, not started: ``concurrency`` slots of each service, as threads or processes.

    Args:
        spec: ``module:attr`` (an App or a handler function) or an App object (thread pools only).
        endpoint: the broker's endpoint.
        transport: ``router`` or ``server``.
        concurrency: slots per service.
        pool: ``thread`` or ``process``.
        services: serve only these services of the app (None: all).
        options: heartbeats and CURVE of every slot.
        start_method: ``spawn`` or ``forkserver`` (process pools).

    Example::

        pool = make_pool("mymodule:app", "tcp://127.0.0.1:5555", concurrency=4, pool="process")
        pool.start()
        ...
        pool.stop(grace=10)  # running tasks have 10 s to finish
    """
    app = load(spec) if isinstance(spec, str) else spec
    chosen = app.select(services)  # fails here, in the caller, on a mistyped name
    if not chosen:
        raise ValueError(f"{app!r} has no services to serve: declare one with @app.service(...) or app.add(...)")
    if pool == "thread":
        return SlotGroup(chosen, concurrency, endpoint, transport, options)
    if pool != "process":
        raise ValueError(f"pool is one of {POOLS}, not {pool!r}")
    if not isinstance(spec, str):
        raise TypeError("the process pool needs a module:attr spec that its processes can import")
    return ProcessPool(
        spec,
        endpoint,
        transport,
        concurrency,
        services=services,
        options=options,
        start_method=start_method,
    )


def run_app(
    spec: str | App,
    endpoint: Place | None,
    transport: str = "router",
    *,
    concurrency: int = 1,
    pool: str = "thread",
    stop_grace: float = DEFAULT_GRACE,
    services: Sequence[str] | None = None,
    heartbeat_interval: float = HEARTBEAT_INTERVAL,
    liveness: int = LIVENESS,
    start_method: str = "spawn",
    out: TextIO | None = None,
    server_key: bytes | None = None,
    keys: tuple[bytes, bytes] | None = None,
) -> int:
    """Serve ``spec`` until SIGINT or SIGTERM, then stop gracefully; the exit status (0).

    Call it from the main thread (it installs the signal handlers). ``endpoint`` is found and followed by each
    slot as :class:`generaldomo.Worker` says (None: ``GENERALDOMO_BROKER``, the broker file, a beacon). Prints
    one line saying what it serves to ``out``, one per service once registered, and one when it stopped.
    ``server_key`` and ``keys`` turn on CURVE for every slot, as for :class:`generaldomo.Worker`.

    Args:
        spec: ``module:attr`` (an App or a handler function) or an App object.
        endpoint: the broker's endpoint, several (tried in turn), a Where, or None (found).
        transport: ``router`` or ``server``.
        concurrency: slots per service.
        pool: ``thread`` or ``process``.
        stop_grace: seconds a running task has to finish once asked to stop.
        services: serve only these services of the app (None: all).
        heartbeat_interval: seconds between heartbeats.
        liveness: heartbeat intervals of silence after which a slot reconnects.
        start_method: ``spawn`` or ``forkserver`` (process pools).
        out: where the lines about serving and registration go (default: stdout).
        server_key: the broker's CURVE public key.
        keys: the slots' CURVE key pair.

    Example::

        import sys
        from generaldomo.peers.pool import run_app

        sys.exit(run_app("mymodule:app", "tcp://127.0.0.1:5555", concurrency=4, pool="process"))
    """
    where = Where.of(endpoint)
    first = Locator(where, transport)  # found once here (waited for), for the lines below
    first.close()
    endpoint = first.target.endpoint
    options = SlotOptions(heartbeat_interval, liveness, server_key, keys)
    app = load(spec) if isinstance(spec, str) else spec
    running = make_pool(
        spec,
        where,
        transport,
        concurrency=concurrency,
        pool=pool,
        services=services,
        options=options,
        start_method=start_method,
    )
    asked = stop_on_signals()
    running.start()
    out = out or sys.stdout
    served = ", ".join(f"{service.name!r} x{concurrency}" for service in app.select(services))
    print(f"generaldomo worker: serving {served} ({pool} pool) from {endpoint} ({transport})", file=out, flush=True)
    reporter = Reporter(endpoint, transport, heartbeat_interval * liveness, out)
    while not asked.is_set():
        running.watch(_CHILD_POLL)
        reporter.look(running, time.monotonic())
    if cut_short := running.stop(stop_grace):
        units = "slots" if pool == "thread" else "processes"
        print(f"generaldomo worker: {cut_short} {units} left tasks past the grace; they are reissued", file=out)
    print(f"generaldomo worker: stopped serving {served}", file=out, flush=True)
    return 0


class Reporter:
    """What a running pool tells its user: ``registered 'NAME' xN at ENDPOINT`` (on ``out``) once the broker has
    accepted every slot of a service, and a warning (on stderr) when no slot is registered ``patience`` seconds
    after the start and the broker did not refuse the handshake (the slots' workers log that at once)."""

    def __init__(self, endpoint: str, transport: str, patience: float, out: TextIO) -> None:
        self.endpoint, self.transport, self.out = endpoint, transport, out
        self._silent_after = time.monotonic() + patience
        self._said: set[str] = set()
        self._warned_silent = False

    def look(self, pool: Pool, now: float) -> None:
        failure = pool.handshake_failure()  # the slots' Worker logs it, once per process
        counts = pool.registrations()
        for name, (registered, total) in counts.items():
            if registered == total and name not in self._said:
                self._said.add(name)
                print(f"generaldomo worker: registered {name!r} x{total} at {self.endpoint}", file=self.out, flush=True)
        anyone = any(registered for registered, _ in counts.values())
        if not anyone and failure is None and now >= self._silent_after and not self._warned_silent:
            self._warned_silent = True
            _warn(f"no broker has answered at {self.endpoint} over {self.transport} yet; still trying")
        elif anyone and self._warned_silent:
            self._warned_silent = False
            self._silent_after = now


def _warn(message: str) -> None:
    print(f"generaldomo worker: warning: {message}", file=sys.stderr, flush=True)

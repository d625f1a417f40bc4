"""The broker process: one :class:`~generaldomo.sansio.broker.core.BrokerCore` driven over one or more links.

This module owns the event loop: it polls the links, reads the clock, feeds the core and sends what the core
returns. It can run in the calling thread (:meth:`Broker.run`) or in a background thread of an application
(:meth:`Broker.start`). It makes no decisions of its own; those are the core's.

Fail fast. Each message, and each periodic job, is handled inside a barrier (:mod:`generaldomo.sansio.barrier`):
an unexpected ``Exception`` drops that message, is counted (``internal_errors``) and logged, and the loop goes
on. What ends the loop otherwise (a socket that fails: ``zmq.ZMQError``; a ``BaseException`` such as a plug-in's
``SystemExit``) makes the broker *failed* (:mod:`generaldomo.io.failfast`): it logs the error, calls
``on_failure(error)`` if it was given one, closes its sockets (peers then reconnect elsewhere), and from then on
:meth:`Broker.join`, :meth:`Broker.check` and :meth:`Broker.stop` raise :class:`BrokerFailed` (its
``__cause__`` is the error), so that an application never keeps a broker that serves nothing.
``generaldomo broker`` exits non-zero at once.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterable
from typing import Any

import zmq

import generaldomo.errors as errors
from generaldomo.compat import moved_names
from generaldomo.errors import StateError
from generaldomo.io.auth import BrokerSecurity, ZapHandler
from generaldomo.io.beacon import BROADCAST, DEFAULT_PORT, Beacon
from generaldomo.io.failfast import Failure, OnFailure, ServingLoop
from generaldomo.io.hub.backlog import POLL as BACKLOG_POLL
from generaldomo.io.hub.backlog import Backlog
from generaldomo.io.hub.links import LINKS, NO_LIMIT, Link
from generaldomo.io.hub.pair import PairConfig, PairLink
from generaldomo.io.hub.replication import ReplicationLink
from generaldomo.io.hub.spans import Recorder, recorder
from generaldomo.io.hub.state import StateDir
from generaldomo.io.hub.wal import Fsync, WriteAheadLog, log_limit
from generaldomo.io.randomness import RandomPool
from generaldomo.io.transport import Transport
from generaldomo.io.waiter import waiter
from generaldomo.sansio.barrier import INTERNAL_ERRORS, Barrier
from generaldomo.sansio.broker.actions import Dispatch
from generaldomo.sansio.broker.core import BrokerCore, Peer, Send
from generaldomo.sansio.broker.journal import JournalRecord, Live
from generaldomo.sansio.broker.pair import Pair, PairState, Visit, visit
from generaldomo.sansio.broker.replication import Replica, Shipper
from generaldomo.sansio.broker.report import PAGE_BYTES, PairReport, StatusQuery, StatusReport
from generaldomo.sansio.broker.services.resolver import Resolver
from generaldomo.sansio.config.settings import Settings

# the errors' old paths here: the same classes, with a DeprecationWarning (they live in generaldomo.errors)
__getattr__ = moved_names(__name__, "generaldomo", ["BrokerFailed"])

__all__ = ["ENVELOPE_SLACK", "MIN_DRAIN", "REFUSALS_PERIOD", "SNAPSHOT", "SNAPSHOT_BYTES", "TURN_SECONDS", "Broker"]

log = logging.getLogger(__name__)

_DRAIN = 256  # messages read from one link before looking at the others, at most
# A turn of the loop serves a batch of one link's messages: libzmq takes them from its connections in turn, one
# message each. A batch that took longer than TURN_SECONDS (messages that cost much each: new services, ...)
# makes that link's next batches half as long, down to MIN_DRAIN, so that the loop comes round to the others'
# messages (an honest answer among them) sooner; a batch that took less than a quarter of it doubles them again.
TURN_SECONDS = 0.01
MIN_DRAIN = 8
# libzmq's hard size limit sits this far above the core's, so that a request a little too large gets a 413
# answer from the core, while a huge one is cut off by libzmq before it fills the broker's memory.
ENVELOPE_SLACK = 64 * 1024
# the busiest services, and the first workers, in the snapshot metrics read: its cost does not grow with them,
# nor with what they hold (a quarter of a status page's bytes: the loop builds it every period)
SNAPSHOT = StatusQuery(limit=200, order="busy")
SNAPSHOT_BYTES = PAGE_BYTES // 4
REFUSALS_PERIOD = 0.5  # seconds between reads of the links' monitors (refused connections are logged then)


class Broker(ServingLoop):
    """A broker bound to endpoints over one or more transports, sharing one core. It runs in the calling thread
    (:meth:`run`) or a daemon thread (:meth:`start`), and fails fast (:meth:`join`, :meth:`check`, :attr:`failure`,
    :attr:`serving`; the module docstring says how).

    >>> broker = Broker("router", ["inproc://demo", "tcp://127.0.0.1:*"]).start()
    >>> broker.stop()
    """

    def __init__(
        self,
        transport: str | None = None,
        bind: Iterable[str] = (),
        *,
        resolver: Resolver | None = None,
        settings: Settings | None = None,
        context: zmq.Context[Any] | None = None,
        security: BrokerSecurity | None = None,
        state_dir: str | os.PathLike[str] | None = None,
        on_failure: OnFailure | None = None,
        pair: PairConfig | None = None,
        fsync: str = "batch",
        trace_spans: bool = False,
    ) -> None:
        """With ``security`` the links speak CURVE only and admit the keys it lists; such a broker gets a context
        of its own (unless given one), since a context has one ZAP handler. With ``state_dir`` the flow limits
        changed at run time are kept there and restored when a broker starts on it again
        (:mod:`generaldomo.io.hub.state`); limits set with ``core.set_flow`` before the broker runs are its
        configuration, which run-time changes override.

        Args:
            transport: ``router`` or ``server``: the transport of the ``bind`` endpoints (None: add links later with
                :meth:`add_link`).
            bind: the endpoints to bind (``tcp://127.0.0.1:*`` binds a free port; :meth:`endpoint` says which).
            resolver: maps descriptions to services (default: by name, :class:`~generaldomo.NameResolver`).
            settings: the core's timing and limits (:class:`~generaldomo.Settings`).
            context: the ZeroMQ context (``inproc://`` peers must share it).
            security: CURVE keys and the admitted keys' roles (:class:`~generaldomo.io.auth.BrokerSecurity`).
            state_dir: where run-time flow changes, queued requests and kept answers are kept across restarts
                (:mod:`generaldomo.io.hub.wal`).
            fsync: when the state directory's write-ahead log is flushed to disk: ``batch`` (after each group of
                records, before what they report is sent) or ``os`` (the operating system's buffers).
            on_failure: called with the error, from the loop's thread, if the loop stops because of one (see the
                module docstring).
            pair: this broker's place in a broker pair (:class:`~generaldomo.io.hub.pair.PairConfig`): it serves
                only while it is the active one (:mod:`generaldomo.sansio.broker.pair`); None: a broker alone.
            trace_spans: record the broker's spans of requests that carry a trace context, in their traces
                (:mod:`generaldomo.io.hub.spans`; needs the OpenTelemetry API: ImportError without it).
        """
        if fsync not in ("batch", "os"):
            raise ValueError(f"fsync must be 'batch' or 'os', not {fsync!r}")
        self._fsync = Fsync(fsync)
        self._spans: Recorder | None = recorder() if trace_spans else None
        self.state = None if state_dir is None else StateDir(state_dir)
        self.wal: WriteAheadLog | None = None  # the state directory's write-ahead log, opened at start
        self._own_context = security is not None and context is None
        self.context = context or (zmq.Context() if security is not None else zmq.Context.instance())
        self.security = security
        self._zap = None if security is None else ZapHandler(self.context, security).start()
        state = self.state
        self.core = BrokerCore(
            resolver, settings, instance=os.urandom(4), started=time.monotonic(), random=RandomPool(),
            handover_key=None if state is None else state.handover_key, recovering=state is not None and state.reused,
            journal=None if state is None and pair is None else time.time() - time.monotonic(),
        )  # fmt: skip
        # replies the links hold for peers that do not read, charged to the core's ledger
        self.backlog = Backlog(self.core.ledger, self.core.settings.connection_bytes)
        self.core.spans.on = trace_spans
        self.links: list[Link] = []
        limit = self.core.settings.max_message
        self._max_message = NO_LIMIT if limit is None else limit + ENVELOPE_SLACK
        self._thread: threading.Thread | None = None
        self._running = False
        self._failure = Failure(log, "broker", errors.BrokerFailed, on_failure)
        self._barrier = Barrier(log, "the broker loop")
        self._drain: float | None = None  # set by stop(drain=...): serve what is held that long, then fail it
        self._drains: list[int] = []  # messages each link's next batch reads at most (see TURN_SECONDS)
        self._beacon: Beacon | None = None
        self._snapshot_period: float | None = None
        self.snapshot: StatusReport | None = None  # the latest status report, when metrics are served
        # stop() writes a byte here (a pipe, not a socket: the loop polls one fewer socket per wake-up)
        self._stop_read, self._stop_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        # no write to the pipe once its descriptors are closed (and maybe reused); reentrant for signal handlers
        self._stop_lock = threading.RLock()
        # answers held until the flow changes they report are on disk (the generation), in order; their peers
        self._pending: collections.deque[tuple[int, list[Send]]] = collections.deque()
        # what turns returned, held until the records of the write-ahead log made until then are written (the
        # count), with the flow changes' generation they then wait for (0: none)
        self._journaled: collections.deque[tuple[int, int, list[Send]]] = collections.deque()
        self._held_peers: set[Peer] = set()
        self.pair_link: PairLink | None = None
        self.pair: Pair | None = None
        self._pair_refused = 0  # the pair link's refusals counted so far
        # the replication of the journal to the passive broker (generaldomo.io.hub.replication): the active's end
        # and the passive's, both kept (the roles swap); the counts already reported
        self.replication: ReplicationLink | None = None
        self.shipper: Shipper | None = None
        self.replica: Replica | None = None
        self._replication_counted: dict[str, int] = {}
        self._malformed_passive = 0  # messages to this broker as the active that were no passive's word
        self._journaling = False  # whether the core's journal records are taken after each turn (log or pair)
        # a pair broker's own write-ahead log, read and not yet restored: until the pair decides (_decide)
        self._undecided: tuple[WriteAheadLog, Live, list[JournalRecord]] | None = None
        try:
            if pair is not None:
                self.pair_link = PairLink(self.context, pair, security, self._zap)
                self.pair = Pair(pair.role, pair.heartbeat, time.monotonic())
                self.core.set_pair(self._pair_report)
                frame_bytes = 1 << 20 if self._max_message == NO_LIMIT else self._max_message
                self.replication = ReplicationLink(self.context, pair, frame_bytes, security, self._zap)
                self.shipper = Shipper(os.urandom(8), frame_bytes, pace=pair.heartbeat)
                settings = self.core.settings
                self.replica = Replica((settings.held_bytes or 1 << 34) + settings.keep_bytes)
                self._journaling = True
            if transport is not None:
                self.add_link(transport, bind)
        except Exception:
            self._close_sockets()
            raise

    def add_link(self, transport: str, endpoints: Iterable[str]) -> Link:
        """Bind a new link of ``transport`` (``router`` or ``server``) to ``endpoints``; call before running.

        Args:
            transport: ``router`` or ``server``.
            endpoints: the endpoints to bind.
        """
        if self._thread is not None:
            raise RuntimeError("links must be added before the broker starts")
        link = LINKS[Transport.of(transport)](
            self.context,
            endpoints,
            self._max_message,
            max_frames=self.core.settings.max_frames,
            security=self.security,
        )
        link.backlog, link.index, link.labels = self.backlog, len(self.links), self.core.labels
        self.links.append(link)
        self._drains.append(_DRAIN)
        self.core.set_endpoints(self.endpoints)
        return link

    def announce(
        self, name: str = "generaldomo", destination: str = BROADCAST, port: int = DEFAULT_PORT, interval: float = 1.0
    ) -> Beacon:
        """Announce this broker's endpoints by UDP beacon (see :mod:`generaldomo.io.beacon`) until it stops.

        Args:
            name: the broker's name in its announcements (clients may look for one by name).
            destination: where the datagrams go (the broadcast address by default; ``127.0.0.1`` on one machine).
            port: the UDP port.
            interval: seconds between announcements.
        """
        key = None if self.security is None else self.security.public_key.decode()  # public, never the secret
        self._beacon = Beacon(name, self.core.instance.hex(), self.endpoints, destination, port, interval, key).start()
        return self._beacon

    def serve_metrics(self, port: int = 0, address: str = "127.0.0.1", period: float = 1.0) -> int:
        """Expose the status as Prometheus metrics over HTTP (needs ``prometheus_client``); return the port.

        The broker's loop refreshes a status snapshot every ``period`` seconds for it.

        Args:
            port: the HTTP port (0: a free one).
            address: the address to listen on.
            period: seconds between snapshots.
        """
        from generaldomo.io.hub import metrics

        self._snapshot_period = period
        return int(metrics.serve(lambda: self.snapshot, port, address))

    @property
    def endpoints(self) -> list[tuple[str, str]]:
        """Every bound endpoint as ``(transport, endpoint)``, with the ports that ``*`` binds received."""
        return [(link.transport, endpoint) for link in self.links for endpoint in link.endpoints]

    def endpoint(self, transport: str, scheme: str = "") -> str:
        """The first bound endpoint of ``transport`` whose address starts with ``scheme`` (e.g. ``"tcp"``).

        Args:
            transport: ``router`` or ``server``.
            scheme: a prefix of the endpoint (``tcp``, ``ipc``, ``inproc``; empty: any).
        """
        for kind, endpoint in self.endpoints:
            if kind == transport and endpoint.startswith(scheme):
                return endpoint
        raise LookupError(f"no {transport} link bound to a {scheme or 'any'} endpoint")

    # ------------------------------------------------------------------------------------------ running
    # start, join, check, failure and serving: ServingLoop's (generaldomo.io.failfast), raising BrokerFailed

    _thread_name = "generaldomo-broker"

    def stop(self, timeout: float = 5.0, *, drain: float | None = None) -> None:
        """Ask the loop to finish, and wait up to ``timeout`` (plus ``drain``) for a background thread to end; close
        a broker never run. Raises :class:`BrokerFailed` if the loop had stopped because of an error.

        Without ``drain`` the requests the broker holds are left to their clients, which send them again to the
        next broker at the endpoint (a restart). With ``drain`` (seconds) the broker stops for good: it answers new
        requests ``503`` while it serves those it holds for up to ``drain`` seconds, then answers those still
        unanswered ``503``, so that every request gets an answer.

        Args:
            timeout: seconds to wait for the loop's thread.
            drain: seconds to serve what the broker holds before failing it ``503`` (None: stop at once).
        """
        if self._thread is None and not self._running:
            self._close_sockets()
            self.check()
            return
        self.request_stop(drain)
        if self._thread is not None:
            self._thread.join(timeout + (drain or 0.0))
        self.check()

    def request_stop(self, drain: float | None = None) -> None:
        """Ask the loop to finish as :meth:`stop` does, without waiting; any thread, at any time (a loop that has
        not started yet returns as soon as it starts, one that has ended ignores it).

        Args:
            drain: as for :meth:`stop`.
        """
        with self._stop_lock:
            if drain is not None:
                self._drain = max(0.0, drain)
            if self._stop_write >= 0:
                with contextlib.suppress(BlockingIOError):  # a full pipe already holds a stop request
                    os.write(self._stop_write, b"x")

    def __enter__(self) -> Broker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if exc_info[0] is None:
            self.stop()
        else:  # an error is on its way out already: do not hide it behind the broker's
            with contextlib.suppress(errors.BrokerFailed):
                self.stop()

    def run(self) -> None:
        """Serve until :meth:`stop` is called (from another thread or a signal handler). An error that stops the
        loop is raised, after the broker has failed as the module docstring says (Ctrl-C in the main thread is
        a stop, not a failure)."""
        if not self.links:
            raise RuntimeError("the broker has no link to serve")
        self._serve_until_done(self._serving, self._finish)

    def _serving(self) -> None:
        if self.pair is not None:  # the peer's expiry counts from the start of serving, not of construction
            self.pair = Pair(self.pair.role, self.pair.heartbeat, time.monotonic())
        self._restore()
        log.info("broker serving %s", ", ".join(f"{t} {e}" for t, e in self.endpoints))
        self._loop()

    def _finish(self) -> None:
        with contextlib.suppress(zmq.ZMQError):  # failed sockets take no goodbye
            if self._drain is not None:
                self._after(self.core.abandon(time.monotonic()))
            self._flush_state()
            self._send(self.core.close())
        self._close_sockets()
        log.info("broker stopped; %s", self.core.counters.reported())

    def _loop(self) -> None:
        # the links and the stop pipe; the monitors are read every REFUSALS_PERIOD
        state, pair, pair_link, wal = self.state, self.pair, self.pair_link, self.wal
        sockets = [link.socket for link in self.links] + ([] if pair_link is None else [pair_link.socket])
        replication = self.replication
        if replication is not None:
            sockets += replication.sockets
        if wal is None and self._undecided is not None:
            wal = self._undecided[0]  # (begun once the pair decides)
        pipes = () if state is None or wal is None else (state.ready, wal.ready)
        wait = waiter(sockets, (self._stop_read, *pipes))
        pair_bit = 1 << len(self.links)  # the pair link heard its peer (when in a pair)
        replication_bits = 0 if replication is None else pair_bit << 1 | pair_bit << 2  # its ROUTER and DEALER
        stop_bit = 1 << len(sockets)
        state_bit = stop_bit << 1  # the state directory's writer wrote changes to disk
        wal_bit = state_bit << 1  # the write-ahead log's writer wrote records
        links = list(enumerate(self.links))
        core, backlog, spans = self.core, self.backlog, self._spans
        clock = time.monotonic
        next_snapshot = next_refusals = clock()
        draining: float | None = None  # when a draining stop ends
        while True:
            if draining is not None and (not core.tasks or clock() >= draining):
                return
            # the earliest of the times below: comparisons rather than min() and max(), whose calls cost about 750
            # instructions each (a wake-up per message makes them a few thousand per request)
            deadline = due = core.deadline()  # due: when the core's tick next has work
            if draining is not None and (deadline is None or draining < deadline):
                deadline = draining
            if self._snapshot_period is not None:
                if clock() >= next_snapshot:
                    self._guarded("the status snapshot", self._snapshot)
                    next_snapshot = clock() + self._snapshot_period
                if deadline is None or next_snapshot < deadline:
                    deadline = next_snapshot
            if deadline is None or next_refusals < deadline:
                deadline = next_refusals
            if pair is not None and pair.next_beat < deadline:
                deadline = pair.next_beat
            timeout = int((deadline - clock()) * 1000) + 1
            ready = wait(timeout if timeout > 0 else 0)
            if pair is not None and (ready & pair_bit or clock() >= pair.next_beat):
                self._pair_turn(pair)
            if ready & replication_bits and pair is not None:
                self._replication_turn(pair)
            if ready:
                if ready & stop_bit:
                    if self._drain is None or draining is not None or not core.tasks:
                        return
                    draining = self._begin_drain()
                if ready & (state_bit | wal_bit) and state is not None and wal is not None:
                    state.drain()
                    wal.drain()
                    self._release()
                for index, link in links:
                    if ready >> index & 1:
                        try:  # self._guarded inlined (a call less per batch)
                            self._serve(index, link)
                        except zmq.ZMQError:
                            raise
                        except Exception:
                            self._caught("a batch of messages")
            now = clock()
            # the tick only when its time has come: what serving scheduled is later than the batch's clock read
            # (it waits for the next turn, a millisecond at most after its time), so most wake-ups skip it
            if due is not None and now >= due:
                self._after(core.tick(now))
            if spans is not None and core.spans:
                self._guarded("the broker spans", spans.record, core.spans.take())
            if now >= backlog.next_poll:
                backlog.next_poll = now + BACKLOG_POLL  # a connection backed up meanwhile waits one period
                if backlog:
                    self._guarded("the backlog", backlog.poll)
            if now >= next_refusals:
                for link in self.links:
                    self._guarded("the refusals", link.log_refusals)
                next_refusals = now + REFUSALS_PERIOD
                if pair_link is not None and pair_link.refused > self._pair_refused:
                    core.count("pair_refused", pair_link.refused - self._pair_refused)
                    self._pair_refused = pair_link.refused
            for link in self.links:
                if link.counters:
                    for name, n in link.take_counts().items():
                        core.count(name, n)

    def _caught(self, what: str) -> None:
        self.core.count(INTERNAL_ERRORS)
        super()._caught(what)

    def _snapshot(self) -> None:
        self.snapshot = self.core.report(time.monotonic(), SNAPSHOT, SNAPSHOT_BYTES)

    def _begin_drain(self) -> float:
        """Stop accepting requests and return when the draining stop ends (the stop request is consumed)."""
        with self._stop_lock, contextlib.suppress(BlockingIOError):
            os.read(self._stop_read, 64)
        self.core.stop_accepting()
        assert self._drain is not None
        held = len(self.core.tasks)
        log.info("broker stopping: serving the %d requests it holds for up to %.1f s", held, self._drain)
        return time.monotonic() + self._drain

    def _restore(self) -> None:
        """Take the limits configured so far as the base, apply the state directory's run-time changes, and queue
        again what its write-ahead log left standing (the log is written anew holding it). A broker of a pair
        does so once the pair has decided its state (:meth:`_decide`): the active one's log holds what it must
        serve, a passive one's is stale (its peer's state is the one it replicates)."""
        core = self.core
        core.take_changes()  # the configuration's, not run-time changes
        if self.state is not None:
            now = time.monotonic()
            for change in self.state.restore(core.flows):
                core.apply_flow(change, now)
            core.take_changes()
            settings = core.settings
            limit = log_limit(settings.held_bytes, settings.keep_bytes)
            wal, decoded = self.state.open_log(self._fsync, limit, settings.keep_answers)
            self.wal = wal
            core.count("journal_damaged", decoded.damaged + decoded.truncated)
            live = Live().apply_all(decoded.records)
            live.flows.clear()  # a restart's flow limits are the state file's (where the configuration wins)
            core.set_journal(wal.report)
            if self.pair is not None:  # (the flow changes' records go with what is decided)
                self._undecided = (wal, live, core.take_journal())
                return
            self._open_log(wal, live, [], now)

    def _open_log(self, wal: WriteAheadLog, live: Live, records: list[JournalRecord], now: float) -> None:
        """Queue again and keep again what ``live`` (a log's) holds, and write the log ``wal`` anew holding it, after
        ``records``."""
        core = self.core
        out = core.restore(live, now)
        if live.tasks or live.kept:
            restored = core.counters.tasks_restored, core.counters.answers_restored
            log.info("restored %d queued requests and %d kept answers from %s", *restored, wal.path)
        records += core.take_journal()
        if self.shipper is not None:  # what it holds now (a passive gets it by a snapshot)
            self.shipper.ship(records, now)
        self.wal = wal
        wal.begin(records)
        self._journaling = True
        self._send(out)

    def _decide(self, pair: Pair, now: float) -> None:
        """The pair has decided this broker's state (active or passive) for the first time: an active one restores
        its write-ahead log; a passive one drops it (what it held is the active's to serve, or served already) and
        writes it anew, to hold what it serves once it takes over."""
        undecided, self._undecided = self._undecided, None
        if undecided is None:
            return
        wal, live, records = undecided
        if pair.state is not PairState.ACTIVE:
            if live.tasks or live.kept:
                log.warning(
                    "broker pair: passive: the %d requests and %d kept answers of %s are the active broker's: "
                    "dropped here", len(live.tasks), len(live.kept), wal.path,
                )  # fmt: skip
            live = Live()
        self._open_log(wal, live, records, now)

    def _serve(self, index: int, link: Link) -> None:
        """Feed the core what ``link`` has (a bounded number of messages: see :data:`TURN_SECONDS`), sending what it
        answers, each message inside the barrier. A flow change is in the state directory before its answer goes:
        the answers of a message that changed the flow limits, and what follows them to the same peers, wait for
        the state directory's writer (:meth:`_release`); other peers are served meanwhile. With a write-ahead log,
        what the whole batch answers waits for the batch's records (one group commit)."""
        if self.pair is not None and not self.pair.serving:
            self._serve_passive(index, link, self.pair)
            return
        core, links, held = self.core, self.links, self._held_peers
        receive, now = core.receive, time.monotonic()  # one clock read per batch (and one at its end)
        drains, batch = self._drains, None if not self._journaling else list[Send]()
        # Peer(index, address) as its NamedTuple __new__ makes it, without that Python frame (about 2,000
        # instructions a message)
        new = tuple.__new__
        for address, frames, credential in link.recv_batch(drains[index]):
            try:
                out = receive(new(Peer, (index, address)), frames, now, credential)
                if batch is not None:
                    batch += out
                elif core.changed:
                    self._hold(out)
                elif held:
                    self._send(out)
                else:
                    for peer, message in out:  # self._send inlined (the hot path)
                        links[peer.link].send(peer.address, message)
            except zmq.ZMQError:
                raise
            except Exception:
                self._caught("a message")
        if batch is not None:
            self._hold(batch)
        took = time.monotonic() - now
        if took > TURN_SECONDS:
            drains[index] = max(MIN_DRAIN, drains[index] // 2)
        elif took < TURN_SECONDS / 4 and drains[index] < _DRAIN:
            drains[index] = min(_DRAIN, drains[index] * 2)

    def _after(self, out: list[Send]) -> None:
        """Send ``out`` (what a turn of the core returned), held if the turn changed flow limits or made records of
        the write-ahead log (:meth:`_hold`)."""
        if self.core.changed or self._journaling:
            self._hold(out)
        else:
            self._send(out)

    # ------------------------------------------------------------------------------------------ the pair

    def _pair_turn(self, pair: Pair) -> None:
        """Hear the peer broker, tell it this broker's state when due; a broken pair fails the loop."""
        assert self.pair_link is not None
        before, now = pair.state, time.monotonic()
        due = pair.due(now)
        self.pair_link.beat(pair, now)
        if due and self.replication is not None:
            self._replication_beat(pair, now)
        if pair.state is not before:
            log.warning("broker pair: %s -> %s (the peer said %s)", before.value, pair.state.value,
                        pair.last_heard.value if pair.last_heard else "nothing")  # fmt: skip
            if pair.state is PairState.PASSIVE:
                self._decide(pair, now)
            elif pair.state is PairState.ACTIVE:  # (a passive one whose peer restarts: its workers may come back)
                self._take_over(now, recover=before is PairState.PASSIVE)
        if pair.state is PairState.BROKEN:
            said = pair.last_heard.value if pair.last_heard else "?"
            raise errors.PairBroken(
                f"the broker pair is broken: this broker was {before.value} and its peer says it is {said}; "
                f"restart this broker once the other one serves"
            )

    def _serve_passive(self, index: int, link: Link, pair: Pair) -> None:
        """Serve what ``link`` has while this broker is not the active one of its pair: a status request is
        answered; a client's request or a worker's READY is the moment the passive takes over if its peer has
        expired (then it is served); anything else is dropped unanswered (its peer hears nothing and moves to its
        next endpoint). See :class:`~generaldomo.sansio.broker.pair.Visit`."""
        core, now, dropped = self.core, time.monotonic(), 0
        for address, frames, credential in link.recv_batch(self._drains[index]):
            if not pair.serving:
                seen = visit(frames)
                if seen is Visit.NOTHING or (seen is Visit.SERVE and not pair.admit(now)):
                    dropped += 1
                    continue
                if pair.serving:  # taking over: the peer's workers may come back with its tasks (shared key)
                    log.warning("broker pair: the peer broker is silent and a peer came: this broker serves now")
                    self._take_over(now)
            try:
                self._after(core.receive(Peer(index, address), frames, now, credential))
            except zmq.ZMQError:
                raise
            except Exception:
                self._caught("a message")
        if dropped:
            core.count("passive_dropped", dropped)

    def _ship(self, records: list[JournalRecord]) -> None:
        """Ship the journal's ``records`` (a turn's) to the passive broker, before what the turn answers is sent (it
        does not wait for the passive: see :mod:`generaldomo.io.hub.replication`)."""
        assert self.shipper is not None and self.replication is not None
        messages = self.shipper.ship(records, time.monotonic())
        if self.replication.connected:
            self.replication.to_passive(messages)

    def _replication_beat(self, pair: Pair, now: float) -> None:
        """Once per pair heartbeat: the active's beat to the passive, or the passive's word to the active; kept
        answers past their time leave the replicated state; the link's counts go to the status report."""
        replication, shipper, replica = self.replication, self.shipper, self.replica
        assert replication is not None and shipper is not None and replica is not None
        before = time.time() - self.core.settings.keep_answers
        if pair.serving:
            shipper.expire(before)
            if replication.connected:
                replication.to_passive([shipper.beat()])
        else:
            replica.live.expire(before)
            replication.to_active(replica.beat())
        counts = {
            "replication_dropped": replication.dropped, "replication_refused": replication.refused,
            "replication_malformed": replica.malformed + self._malformed_passive, "replication_gaps": replica.gaps,
            "replication_over_budget": replica.over_budget, "replication_snapshots": shipper.snapshots,
        }  # fmt: skip
        counted = self._replication_counted
        for name, value in counts.items():
            if value > counted.get(name, 0):
                self.core.count(name, value - counted.get(name, 0))
                counted[name] = value

    def _replication_turn(self, pair: Pair) -> None:
        """Read the replication link: the passive's words (as the active: snapshots sent when asked), the active's
        records (as the passive: folded; a gap found asks for a snapshot at once)."""
        replication, shipper, replica = self.replication, self.shipper, self.replica
        assert replication is not None and shipper is not None and replica is not None
        now = time.monotonic()
        for sender, frames in replication.from_passive():
            if pair.serving:
                answer = shipper.heard(frames, now)
                if answer is None:
                    self._malformed_passive += 1
                else:
                    replication.answer_to(sender)
                    replication.to_passive(answer)
        for frames in replication.from_active():
            if not pair.serving and replica.receive(frames):
                replication.to_active(replica.beat())

    def _take_over(self, now: float, recover: bool = True) -> None:
        """This broker serves now: its own log restored if the pair had not decided yet (:meth:`_decide`), then
        what it replicated while passive queued again and kept again, as a restart restores its log; with
        ``recover``, the hand-over's recovery window begins (the peer's workers may come back with its tasks)."""
        assert self.pair is not None and self.replica is not None
        core, replica = self.core, self.replica
        self._decide(self.pair, now)
        if recover:
            core.recover(now)
        if replica.live.tasks or replica.live.kept or replica.live.flows:
            log.warning(
                "broker pair: took over with %d queued requests and %d kept answers replicated (record %d)",
                len(replica.live.tasks), len(replica.live.kept), replica.applied,
            )  # fmt: skip
        out = core.restore(replica.live, now)
        replica.clear()
        self._after(out)

    def _pair_report(self, now: float) -> PairReport:
        pair, config = self.pair, self.pair_link.config if self.pair_link is not None else None
        assert pair is not None and config is not None
        heard = pair.heard_at
        shipper, replica = self.shipper, self.replica
        assert shipper is not None and replica is not None
        records, seconds = shipper.lag(now) if pair.serving else (None, None)
        live = shipper.live if pair.serving else replica.live
        return PairReport(
            role=pair.role.value,
            state=pair.state.value,
            peer=config.peer,
            peer_state=None if pair.last_heard is None else pair.last_heard.value,
            last_contact=None if heard is None else round(max(0.0, now - heard), 3),
            changes=pair.changes,
            sequence=shipper.sequence,
            applied=replica.applied,
            lag_records=records,
            lag_seconds=None if seconds is None else round(seconds, 3),
            replicated_requests=len(live.tasks),
            replicated_answers=len(live.kept),
            replicated_flows=len(live.flows),
        )

    def _hold(self, out: list[Send]) -> None:
        """Record the core's flow changes and its journal's records, and hold ``out`` (what the turns that made them
        returned) until the state directory has them on disk. With a write-ahead log, everything waits for the
        records written before it, but the tasks dispatched to workers (no answer, no heartbeat telling a worker
        its result was taken, leaves before what it reports is written; a task runs meanwhile: were its record
        lost, so was its request, and its worker's result is handed over). Then a flow change's answers, and what
        follows them to the same peers, wait for the state file; other peers are served meanwhile."""
        core, state, wal = self.core, self.state, self.wal
        records = core.take_journal()
        if records and self.shipper is not None:
            self._ship(records)
        if state is None:
            core.take_changes()
            self._send(out)
            return
        generation = state.record(core.take_changes()) if core.changed else 0
        if wal is not None:
            journaled = self._journaled
            count = wal.append(records) if records else journaled[-1][0] if journaled else 0
            if count > wal.durable:
                journaled.append((count, generation, self._dispatch_now(out)))
                self._release()
                return
        self._gate(generation, out)

    def _gate(self, generation: int, out: list[Send]) -> None:
        """Send ``out``, or hold it until the state file holds ``generation`` (0: no flow change in it)."""
        assert self.state is not None
        if generation and (self._pending or generation > self.state.durable):
            self._pending.append((generation, out))
            self._held_peers.update(peer for peer, _ in out)
        else:
            self._pass(out)

    def _release(self) -> None:
        """Send what was held and is now on disk, in order (raises if the state file or the log cannot be written:
        the broker fails)."""
        assert self.state is not None
        journaled = self._journaled
        if journaled and self.wal is not None:
            written = self.wal.durable
            while journaled and journaled[0][0] <= written:
                _, generation, out = journaled.popleft()
                self._gate(generation, out)
        durable, pending = self.state.durable, self._pending
        if pending and pending[0][0] <= durable:
            while pending and pending[0][0] <= durable:
                self._send_now(pending.popleft()[1])
            self._held_peers.clear()
            self._held_peers.update(peer for _, out in pending for peer, _ in out)

    def _send(self, messages: list[Send]) -> None:
        """Send ``messages``; with records of the write-ahead log not yet written, they wait behind them (but the
        tasks dispatched, :meth:`_hold`); those to peers with held flow answers wait behind those."""
        journaled = self._journaled
        if journaled:
            journaled.append((journaled[-1][0], 0, self._dispatch_now(messages)))
        else:
            self._pass(messages)

    def _pass(self, messages: list[Send]) -> None:
        """Send ``messages`` that waited for no record; those to peers with held flow answers wait behind them."""
        held = self._held_peers
        if not held:
            self._send_now(messages)
            return
        links, pending = self.links, self._pending
        for message in messages:
            peer = message[0]
            if peer in held:
                pending.append((pending[-1][0], [message]))
            else:
                links[peer.link].send(peer.address, message[1])

    def _dispatch_now(self, messages: list[Send]) -> list[Send]:
        """Send the tasks dispatched to workers among ``messages``; the others, to be held."""
        if not any(type(message) is Dispatch for message in messages):
            return messages
        links, held = self.links, []
        for message in messages:
            if type(message) is Dispatch:
                links[message[0].link].send(message[0].address, message[1])
            else:
                held.append(message)
        return held

    def _send_now(self, messages: list[Send]) -> None:
        links = self.links
        for peer, frames in messages:
            links[peer.link].send(peer.address, frames)

    def _flush_state(self) -> None:
        """Wait until every recorded change and record is on disk, and send what waited for it."""
        if self.state is not None:
            try:
                self.state.flush()
                if self.wal is not None:
                    self.wal.flush()
                self._release()
            except StateError:
                pass  # the loop failed with it: what waited for the write is never sent

    def _close_sockets(self) -> None:
        if self._beacon is not None:
            self._beacon.stop()
        for link in self.links:
            link.close()
        if self.pair_link is not None:
            self.pair_link.close()
        if self.replication is not None:
            self.replication.close()
        with self._stop_lock:
            if self._stop_write >= 0:
                ends, self._stop_read, self._stop_write = (self._stop_read, self._stop_write), -1, -1
                for end in ends:
                    os.close(end)
        if self._zap is not None:
            self._zap.stop()
        if self._own_context:
            self.context.term()
        if self.wal is not None:
            self.wal.close()
        if self.state is not None:
            self.state.close()

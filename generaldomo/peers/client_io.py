"""The client's IO shell around :class:`generaldomo.sansio.peer.session.ClientSession`, which owns request ids,
heartbeats, re-asking, resending and duplicate suppression.

Threads: the caller's thread registers the request in the session and sends it; one IO thread per client
heartbeats, re-asks and reconnects as the session says. One lock guards the session; no user code runs under
it.

The reader role (leader/follower): one thread at a time reads the socket and feeds the session what arrives,
under the lock. It is the IO thread's, except while a caller waits in its future's ``result()`` or
``exception()``: that caller takes the role (when nobody is reading just then), reads and resolves replies,
its own and other callers', and stops when its own reply came, its time is up, or the session's next tick is
due; so a synchronous round trip crosses no thread. On leaving it keeps the role lent (no wake-up) unless
another thread waits for a reply or a tick is due: then the IO thread takes it back at once. The IO thread
looks at a lent role every :data:`LEND_CHECK` seconds and takes it back when its holder has stopped reading
(nothing read since the last look, or a tick due): a reply nobody waits for in ``result()`` (callbacks,
``asyncio``, ``concurrent.futures.wait``) may so wait up to two looks after synchronous use. Only the IO
thread ticks, and only while it holds the role. The role's states and moves are a transition table
(:mod:`generaldomo.peers.reader_role`), applied under the lock.
A lent reader resolves futures only: a batch that brings anything else (partial results, callbacks) goes to
the IO thread whole, in order, and the role with it. Whoever reads feeds the session each message inside a
barrier (:mod:`generaldomo.sansio.barrier`): one whose handling raises is dropped, counted
(:attr:`ClientIO.internal_errors`) and logged, rate-limited; a reply whose delivery raises fails its own future
with that error.

A handshake the broker refuses, or an endpoint where nothing accepts connections (while no broker has answered
and one endpoint was given, unless told to wait), fails what is outstanding and what is submitted until a
handshake succeeds. Closing, the IO thread makes sure the CANCELs sent have reached the broker (bounded), since
the process may exit right after. This module knows nothing of the callers' arguments, timeouts or retries
(:mod:`generaldomo.peers.client`), nor of workers or services beyond the descriptions it passes on.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from typing import Final, TypeVar

from generaldomo.errors import BrokerUnreachable, ClientClosed, HandshakeFailed
from generaldomo.io.peer.connection import BrokerChannel
from generaldomo.io.randomness import RandomPool
from generaldomo.peers.reader_role import READER_ROLE, ReaderEvent, ReaderRole
from generaldomo.peers.reply import Call, OnPartial, Reply, RequestFuture, partial, resolve
from generaldomo.sansio.barrier import Barrier
from generaldomo.sansio.peer.handshake import UNREACHABLE, HandshakeWatch
from generaldomo.sansio.peer.session import Action, ClientSession, Fail, Progress, Reconnect, Resolve, ToBroker
from generaldomo.sansio.wire.tracecontext import TraceContext

__all__ = [
    "CLOSE_CONFIRM",
    "CLOSE_LINGER_MS",
    "LEND_CHECK",
    "READ_BATCH",
    "REQUEST_ID_BYTES",
    "SHUT_WAITS",
    "WAIT_HINT",
    "ClientIO",
]

log = logging.getLogger("generaldomo.peers.client")  # the client's log, by the name users configure it under
X = TypeVar("X")

WAIT_HINT: Final = " (to wait for a broker that starts later: Client(..., fail_unreachable=False), --wait-for-broker)"
CLOSE_LINGER_MS: Final = 200  # libzmq sends CANCELs queued at close in the background for this long
CLOSE_CONFIRM: Final = 2.0  # seconds the closing IO thread waits for the broker to confirm it read the CANCELs
READ_BATCH: Final = 256  # messages read per round before the session's clock is looked at again
REQUEST_ID_BYTES: Final = 16  # random bytes per request id: unique across clients, and unpredictable
# the reader role's moves, each one dict lookup (a move its table lacks raises IllegalTransition)
_CLAIMED, _KEPT = READER_ROLE.row(ReaderEvent.CLAIM), READER_ROLE.row(ReaderEvent.KEEP)
_GIVEN_BACK, _TAKEN_BACK = READER_ROLE.row(ReaderEvent.GIVE_BACK), READER_ROLE.row(ReaderEvent.TAKE_BACK)
LEND_CHECK: Final = 0.005  # seconds between the IO thread's looks at a reader role lent to a caller
SHUT_WAITS: Final = 50  # tenths of a second the closing IO thread waits for a lent reader to leave


def _silent(action: Action[Call]) -> bool:
    """A partial result nobody listens to: a lent reader may drop it as the IO thread would."""
    return isinstance(action, Progress) and action.token.on_partial is None


class ClientIO:
    """A client's session, socket and IO thread: sends what callers submit, and settles their futures as the
    broker answers (module docstring). It starts its IO thread when made; :meth:`close` stops it.

    Args:
        session: the client's session (this object owns it from now on).
        channel: the channel to the broker (likewise).
        fail_unreachable: fail requests when nothing accepts connections at the only endpoint and no broker has
            answered yet; False: wait for a broker.
    """

    def __init__(self, session: ClientSession[Call], channel: BrokerChannel, fail_unreachable: bool) -> None:
        self.fail_unreachable = fail_unreachable
        self._session = session
        self._channel = channel
        self._ids = RandomPool()  # request ids: 16 unpredictable bytes each, drawn under the lock
        self._lock = threading.Lock()  # guards the session, the reader role, and the channel while it reconnects
        self._released = threading.Condition(self._lock)  # a lent reader left its read loop
        self._role = ReaderRole.IO  # who reads the socket (see generaldomo.peers.reader_role)
        self._reads = 0  # batches lent readers read (the IO thread sees whether a lent role is still used)
        self._seen = -1  # that count at the IO thread's last look
        self._waiting = 0  # threads waiting for a reply that someone else reads
        self._handoff: list[Action[Call]] = []  # what a lent reader left for the IO thread to deliver, in order
        self._calling = False  # the IO thread is delivering partial results (callbacks)
        self._closed = False
        self._refused: HandshakeFailed | None = None  # the connection's handshake failed (until one succeeds)
        self._cause: BaseException | None = None  # why the IO thread stopped, if not close()
        self._barrier = Barrier(log, "the client")  # around each message from the broker (lock held)
        self._thread = threading.Thread(target=self._run, name="generaldomo-client", daemon=True)
        self._thread.start()

    @property
    def _reading(self) -> bool:
        """A caller holds the reader role and is in its read loop."""
        return self._role is ReaderRole.READING

    @property
    def internal_errors(self) -> int:
        """Messages from the broker (or replies) whose handling raised an unexpected error: dropped, logged."""
        return self._barrier.count

    def submit(
        self, name: bytes, body: tuple[bytes, ...], on_partial: OnPartial | None, now: float, *,
        deadline: float | None, tenant: str | None, priority: int, flags: int, not_before: float | None = None,
        trace: TraceContext | None = None,
    ) -> RequestFuture:  # fmt: skip
        """Send a request (``deadline``, ``not_before``: monotonic); its future is failed at once while the
        handshake is refused. :class:`ClientClosed` once closed."""
        with self._lock:
            if self._closed:
                raise self.closed_error()
            request_id = self._ids(REQUEST_ID_BYTES)
            future = RequestFuture(self, request_id)
            if self._refused is not None:
                future.set_exception(self._refused)
                return future
            idle = not self._session.outstanding and self._role is ReaderRole.IO  # (a lent role is looked at often)
            frames = self._session.submit(
                request_id, name, body, Call(future, on_partial), now,
                deadline=deadline, tenant=tenant, priority=priority, flags=flags, not_before=not_before, trace=trace,
            )  # fmt: skip
        self._channel.send(frames)
        if idle:
            self._channel.wake()  # the IO thread starts heartbeating
        return future

    def fetch(self, request_id: bytes) -> RequestFuture:
        """Ask for the answer to ``request_id``; :class:`HandshakeFailed` while the handshake is refused,
        :class:`ClientClosed` once closed."""
        future = RequestFuture(self, request_id)
        with self._lock:
            if self._closed:
                raise self.closed_error()
            if self._refused is not None:
                raise self._refused
            idle = not self._session.outstanding and self._role is ReaderRole.IO
            frames = self._session.fetch(request_id, Call(future, None), time.monotonic())
        self._channel.send(frames)
        if idle:
            self._channel.wake()
        return future

    def close(self) -> None:
        """Stop the IO thread; requests still waiting fail with :class:`ClientClosed`."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._channel.wake()
        self._thread.join()

    def closed_error(self) -> ClientClosed:
        """The :class:`ClientClosed` a closed client raises (with why its IO thread stopped, if it did)."""
        if self._cause is None:
            return ClientClosed("the client is closed")
        error = ClientClosed(f"the client's IO thread stopped: {self._cause!r}")
        error.__cause__ = self._cause
        return error

    def _cancel(self, request_id: bytes) -> None:
        with self._lock:
            actions = self._session.cancel(request_id)
            if self._reading:
                self._channel.connection.kick()  # a lent reader may be waiting for this one
        for action in actions:
            if isinstance(action, ToBroker):
                self._channel.send(action.frames)

    # ---------------------------------------------------------------------------------- lent reader role

    def _await(self, future: Future[Reply], timeout: float | None, get: Callable[[float | None], X]) -> X:
        """``get(timeout)`` (the plain future's result or exception) once ``future`` is done, having read the
        socket meanwhile if the reader role could be had."""
        end = None if timeout is None else time.monotonic() + timeout
        if self._claim():
            done = False
            try:
                done = self._read_until(future, end)
            except Exception:  # the socket failed (a terminated context): the IO thread finds out and says why
                log.debug("a lent reader gave up", exc_info=True)
            finally:
                self._release(keep=done)
            if done:
                return get(0)
            with self._lock:
                self._waiting += 1
        try:
            return get(None if end is None else max(0.0, end - time.monotonic()))
        finally:
            with self._lock:
                self._waiting -= 1

    def _claim(self) -> bool:
        """Take the reader role (True), or count this thread among those waiting for another reader (False)."""
        with self._lock:
            if self._role in _CLAIMED and not (self._closed or self._handoff or self._calling):
                self._role = _CLAIMED[self._role]
                return True
            self._waiting += 1
            return False

    def _release(self, keep: bool) -> None:
        """Leave the read loop; the role stays lent if ``keep`` and nobody needs the IO thread to read now."""
        with self._lock:
            deadline = self._session.deadline()
            due = deadline is not None and deadline <= time.monotonic()
            back = not keep or due or self._waiting > 0 or self._closed or bool(self._handoff)
            self._role = (_GIVEN_BACK if back else _KEPT)[self._role]
            if self._closed:
                self._released.notify_all()
        if back:
            self._channel.wake()

    def _read_until(self, future: Future[Reply], end: float | None) -> bool:
        """Read and resolve until ``future`` is done (True), ``end``, a tick is due, or the IO thread must take
        over (False)."""
        channel, session, clock = self._channel, self._session, time.monotonic
        while not future.done():  # (the IO thread may have resolved it before this thread took the role)
            now = clock()
            with self._lock:
                deadline = session.deadline()
            stop = min(deadline or now + LEND_CHECK, end or math.inf)
            if self._closed or stop <= now:
                return future.done()
            kicked = channel.wait_readable(stop - now)
            with self._lock:
                if self._closed:
                    return future.done()
                if kicked:
                    channel.consume_kicks()
                messages = channel.recv_batch(READ_BATCH)
                if not messages:
                    continue  # a kick (a cancel, perhaps), or a signal another thread's send took
                self._reads += 1
                actions = self._receive(messages, clock())
                if actions is None:
                    return future.done()  # partial results, callbacks: handed to the IO thread, in order
            if self._resolve_all(actions, future):
                return True
        return True

    def _resolve_all(self, actions: list[Resolve[Call]], future: Future[Reply]) -> bool:
        """Resolve what a lent reader read; True if ``future`` was among them. Interrupted (Ctrl-C), it leaves
        the rest to the IO thread rather than lose other callers' replies."""
        mine, done = False, 0
        try:
            for action in actions:
                self._resolve_guarded(action)
                done += 1
                mine = mine or action.token.future is future
        finally:
            if done < len(actions):
                with self._lock:
                    self._handoff += actions[done:]
        return mine

    def _receive(self, messages: list[list[bytes]], now: float) -> list[Resolve[Call]] | None:
        """Feed the session a lent reader's batch (lock held): the replies it resolves, or None when the batch
        brought something else, which is left whole for the IO thread."""
        actions: list[Action[Call]] = []
        for frames in messages:
            actions += self._fed(frames, now)
        rest = self._channel.perform(actions)  # resends; a receive never reconnects
        resolved: list[Resolve[Call]] = []
        for action in rest:
            if isinstance(action, Resolve):
                resolved.append(action)
            elif not _silent(action):
                self._handoff += rest
                return None
        return resolved

    # ---------------------------------------------------------------------------------------- IO thread

    def _run(self) -> None:
        try:
            self._channel.adopt()
            self._serve()
        except BaseException as error:  # anything: the callers must hear of it
            log.exception("the client's IO thread stopped")
            self._cause = error
        finally:
            self._shut()

    def _serve(self) -> None:
        channel, session, clock = self._channel, self._session, time.monotonic
        while not self._closed:
            with self._lock:
                now = clock()
                reading = self._take_back(now)
                deadline = session.deadline()
            if not reading:
                deadline = min(deadline or math.inf, now + LEND_CHECK)
            look = channel.next_look  # an address file is looked at now and then, also while idle
            if look is not None:
                deadline = look if deadline is None else min(deadline, look)
            channel.wait(deadline, clock(), reading, kicks=False)
            now = clock()
            watch = channel.handshake_news()
            with self._lock:  # a reconnect under the lock: a request is in the resend, or goes to the new socket
                actions, self._handoff = self._handoff, []  # what a lent reader left comes first
                if watch is not None:
                    actions += self._handshake(watch)
                if self._role is ReaderRole.IO:  # lent: the IO thread neither reads nor ticks
                    channel.consume_kicks()
                    for frames in channel.recv_batch(READ_BATCH):
                        actions += self._fed(frames, now)
                    actions += self._ticked(now)  # heartbeats queue behind a backlog: the broker answers in turn
                    if channel.moved(now):
                        actions += session.moved("the broker moved", now)
                    actions = channel.perform(actions)
                calling = not all(isinstance(a, Resolve) or _silent(a) for a in actions)
                self._calling = calling  # no lent reader until these callbacks ran: partial results stay in order
            self._deliver(actions)
            if calling:
                with self._lock:
                    self._calling = False

    def _fed(self, frames: list[bytes], now: float) -> list[Action[Call]]:
        """The session's actions for one message from the broker, inside the barrier (lock held)."""
        try:
            return self._session.receive(frames, now)
        except Exception:
            self._barrier.caught("a message from the broker", now)
            return []

    def _ticked(self, now: float) -> list[Action[Call]]:
        """The session's actions for the time ``now``, inside the barrier (lock held)."""
        try:
            return self._session.tick(now)
        except Exception:
            self._barrier.caught("a tick", now)
            return []

    def _handshake(self, watch: HandshakeWatch) -> list[Action[Call]]:
        """Follow the socket monitor (lock held): a failed handshake fails what is outstanding, and what is
        submitted until a handshake succeeds, with :class:`HandshakeFailed`."""
        failure = watch.failure
        if failure is not None and failure.kind == UNREACHABLE and not self._fails_unreachable():
            failure = None  # waited for: libzmq goes on trying
        if failure is None:
            self._refused = None
            return []
        if self._refused is None or str(self._refused) != failure.cause:
            log.info("%s", failure.cause)  # the callers' HandshakeFailed says it
        cause = failure.cause + (WAIT_HINT if failure.kind == UNREACHABLE else "")
        self._refused = BrokerUnreachable.of(failure.kind, cause)
        return self._session.close(failure.cause)

    def _fails_unreachable(self) -> bool:
        """Whether nothing accepting connections fails requests: asked for, no broker answered yet, and one
        endpoint given (several, an address file or a beacon: the client moves on or waits)."""
        where = self._channel.locator.where
        return self.fail_unreachable and self._session.instance is None and len(where.endpoints) == 1

    def _take_back(self, now: float) -> bool:
        """True if the IO thread holds the reader role, taking back a lent one nobody uses (lock held)."""
        if self._role is ReaderRole.LENT:
            deadline = self._session.deadline()
            if self._reads == self._seen or (deadline is not None and deadline <= now):
                self._role = _TAKEN_BACK[self._role]
        self._seen = self._reads
        return self._role is ReaderRole.IO

    def _deliver(self, actions: list[Action[Call]]) -> None:
        """Resolve futures and call back (IO thread, no lock held). A callback's BaseException (not an
        Exception) stops the IO thread, once the futures this round decided are resolved."""
        fatal: BaseException | None = None
        for action in actions:
            if isinstance(action, Resolve):
                self._resolve_guarded(action)
            elif isinstance(action, Fail):  # the handshake failed (see _handshake)
                with contextlib.suppress(InvalidStateError):
                    action.token.future.set_exception(self._refused or ClientClosed(action.reason))
            elif isinstance(action, Progress) and action.token.on_partial is not None and fatal is None:
                try:
                    action.token.on_partial(partial(action))
                except Exception:  # a faulty callback must not stop the IO thread
                    log.exception("on_partial callback failed")
                except BaseException as error:
                    fatal = error
        if fatal is not None:
            raise fatal

    def _resolve_guarded(self, action: Resolve[Call]) -> None:
        """Resolve a request's future, inside the barrier: if that fails, the future gets the error instead."""
        try:
            self._resolve(action)
        except Exception as error:
            with self._lock:
                self._barrier.caught("a reply", time.monotonic())
            with contextlib.suppress(InvalidStateError):
                action.token.future.set_exception(error)

    _resolve = staticmethod(resolve)  # (an attribute: a test makes a reply's delivery fail)

    def _say_farewell(self) -> None:
        """Before the socket closes, make sure the CANCELs sent have reached the broker (IO thread): a process
        that exits right after closing would otherwise lose what libzmq had not written yet. The session's
        farewell HEARTBEAT follows them; wait for its answer, at most :data:`CLOSE_CONFIRM` seconds, delivering
        what else arrives. Nothing to wait for when no CANCEL was sent or no connection was ever made."""
        watch = self._channel.handshake
        if self._cause is not None or (watch is not None and not watch.ever_succeeded):
            return
        with self._lock:
            farewell = self._session.farewell(self._ids(REQUEST_ID_BYTES))
        if not farewell:
            return
        connection, clock = self._channel.connection, time.monotonic
        for action in farewell:
            if isinstance(action, ToBroker):
                connection.write(action.frames)
        end = clock() + CLOSE_CONFIRM
        while not self._session.farewell_heard and (now := clock()) < end:
            connection.flush(woken=False)
            if connection.wait_readable(min(end - now, LEND_CHECK * 10)):
                connection.consume_kicks()
            with self._lock:
                actions: list[Action[Call]] = []
                for frames in connection.recv_batch(READ_BATCH):
                    actions += self._fed(frames, clock())
            self._deliver([a for a in actions if not isinstance(a, ToBroker | Reconnect)])

    def _shut(self) -> None:
        """Close the socket; fail what is outstanding (IO thread, last)."""
        with self._lock:
            self._closed = True
            for _ in range(SHUT_WAITS):  # a lent reader sees the close at its next step
                if not self._reading:
                    break
                self._channel.connection.kick()
                self._released.wait(0.1)
        try:
            self._say_farewell()
        except Exception:  # a terminated context, say: close anyway
            log.debug("the farewell failed", exc_info=True)
        with self._lock:
            failed = self._session.close("closed")
        self._channel.close(linger_ms=CLOSE_LINGER_MS)
        for action in failed:
            if isinstance(action, Fail):
                error = self.closed_error() if self._cause else ClientClosed("closed before the reply came")
                with contextlib.suppress(InvalidStateError):
                    action.token.future.set_exception(error)

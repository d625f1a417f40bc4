"""A peer's side of its relation with the broker, without IO: the client's and the worker's session.

Rules:
- A session is fed what arrives (``receive(frames, now)``), the passing of time (``tick(now)``) and what its
  user does (a client submits and cancels; a worker finishes a task or stops). Each call returns the actions
  for its IO shell to carry out in order: :class:`ToBroker`: send these frames; :class:`Reconnect` (a new socket, to
  where the broker is now as far as the shell knows; later frames go to it); and for the user:
  :class:`Resolve`, :class:`Progress` or :class:`Fail` a client's request, :class:`RunTask` in a worker. The
  shell says when the broker moved (its address file changed): ``moved(reason, now)``.
- Both peers keep a :class:`Pulse`: a heartbeat every interval (a shell may hold them back while its socket
  is backlogged; the worker does, so they do not pile up for a gone broker), and the broker presumed gone
  after ``liveness`` intervals unheard, counted while the peer ticks (a paused peer did not listen: the
  silence counts from when it ticks again).
- Client: a request is outstanding from submit to its final reply, which is resolved once; a later reply
  with its id is dropped and counted. Outstanding requests are sent again, with their ids, only when the
  broker answers as a new instance, after a reconnect (silence while requests are outstanding), or when the
  broker says it does not know one that it was asked about after it was last sent. Each heartbeat asks about
  the requests outstanding longer than the re-ask age since last sent or asked about, oldest first, 64 per
  heartbeat (up to 16 heartbeats at once, so a mass loss is recovered quickly). A request with a deadline
  is sent again with the time then left (never a fresh one), and a request not to be dispatched before a time
  with the delay then left (so a broker that restarted holds it until the same time). The broker answers an asked
  id it keeps an answer for with that answer: if the first one crossed the heartbeat, the second is counted
  as repeated, not as a duplicate. A cancelled request is forgotten and the broker told (CANCEL). A *fetch*
  waits for the answer to a request sent earlier (by this session or another, with the same key): it is
  outstanding without a request to send, asked about at once and whenever a request would be sent again; a
  broker that does not know the id resolves it ``404``.
- Worker: READY on start and after each reconnect (silence, or DISCONNECT from the broker), whose peer info
  names the worker the same way on every socket (the shell draws the name), and before it, unless a task runs or
  the broker refused the old socket, DISCONNECT there (a broker still hearing it lets that registration go); one
  task at a time (the transition table :data:`WORKER_SESSION`), whose result goes back inside the next READY (a task's
  deadline, if the broker gave one, becomes a time on the caller's clock; a CANCEL of the running task is passed
  on, and its result still goes back: that is how the broker knows the worker is free); while it runs only
  heartbeats and partial results go out and silence is not held against the broker (the shell reads its
  messages after the task); once stopped, one DISCONNECT and nothing more. Stopping mid-task drops the
  result (the broker reissues the task at once), unless asked to finish it: then result, then DISCONNECT.
  A plain READY carries the worker's peer info (host, pid) if it has some. A DISCONNECT before the broker
  answered a READY is a refusal: the worker sends nothing until a wait is over (about 1 s, doubled after each
  refusal in a row up to 60 s, with jitter; one log line each), then registers again on a new socket, in the
  other READY form (a broker older than peer info takes one as malformed).
- Hand-over (a broker with a state directory, whose heartbeats name its instance and the results it took): a
  result is *held* from when it goes out until a heartbeat names its task as taken (at most
  :data:`HOLD_RESULTS` results and :data:`HOLD_BYTES` bytes, oldest dropped first). Registering again (a new
  socket), or hearing a new instance, sends every held result again in a HANDOVER; registering again while a
  task runs sends RESUME (the task's id) instead of nothing, so the new broker knows the task runs here (both
  unless the broker's heartbeats said it takes no hand-over; a task may come before the first heartbeat). A
  DISCONNECT before a RESUME was answered means the broker does not take it: that task's result then goes in
  READY as before. A broker whose heartbeats name no instance takes no hand-over: nothing is held.

It knows nothing of sockets, threads, clocks or futures: times are given, a request's caller is an opaque
token handed back in the actions about it.

The records that carry that token (:class:`Resolve`, :class:`Progress`, :class:`Fail`, and the session's own
record of a request) are generic in its type, and so are plain classes with ``__slots__`` and their own
``__init__``, not dataclasses: the compiled core (see generaldomo.compiled) builds a plain generic class natively,
and cannot make a generic dataclass at all. Their fields are ``Final``: ``mypy --strict`` keeps them immutable, so
does the compiled core at run time.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from collections.abc import Callable, Sequence
from typing import Any, Final, Generic, TypeVar

from generaldomo.sansio.config.settings import DEFAULT_MAX_MESSAGE, PeerSettings
from generaldomo.sansio.lograte import LogLimiter
from generaldomo.sansio.machine import Machine
from generaldomo.sansio.wire import protocol
from generaldomo.sansio.wire.events import Malformed
from generaldomo.sansio.wire.peer_events import (
    BrokerDisconnect,
    BrokerHeartbeat,
    FinalReply,
    HeartbeatAnswer,
    PartialReply,
    TaskCancel,
    TaskRequest,
)
from generaldomo.sansio.wire.ticket import nonce
from generaldomo.sansio.wire.tracecontext import TraceContext

log = logging.getLogger(__name__)
T = TypeVar("T")
LOG_EVERY = 10.0  # seconds between two log lines about dropped messages
DEFAULT_SETTINGS = PeerSettings()
ASKING_HEARTBEATS = 16  # heartbeats one tick may send to ask about old requests, 64 ids each
RETRY_WAIT_FIRST = 1.0  # seconds a refused worker waits before it registers again, the first time
RETRY_WAIT_MOST = 60.0  # the longest wait: each refusal in a row doubles it up to this
RETRY_WAIT_JITTER = 0.25  # each wait is drawn within this fraction of its step, either way
REMEMBER_ASKED = 4096  # answered ids, asked about before, whose kept answer may come again
HOLD_RESULTS = protocol.MAX_TAKEN  # results a worker holds until the broker says it took them
HOLD_BYTES = DEFAULT_MAX_MESSAGE  # and their bytes
_UNKNOWN = (
    b"the broker has no request with this id: never sent (with this key), answered longer ago than it keeps "
    b"answers (keep_answers), or it restarted since"
)

__all__ = ["ClientSession", "WorkerSession"]


@dataclasses.dataclass(slots=True, init=False, unsafe_hash=True)
class ToBroker:
    """Send these frames to the broker."""

    frames: Final[Sequence[bytes]]

    def __init__(self, frames: Sequence[bytes]) -> None:
        self.frames = frames


@dataclasses.dataclass(frozen=True, slots=True)
class Reconnect:
    """Close the socket and connect a new one; ``reason`` is for the log. ``silent``: the broker went silent, so
    the shell looks for it where it may be now (the next endpoint, its address file again), else the same
    endpoint. ``farewell``: a message to send on the old socket before it closes (within a short linger, for a
    broker that may still hear it)."""

    reason: str
    silent: bool = False
    farewell: tuple[bytes, ...] = ()


class Resolve(Generic[T]):
    """A request's final reply: status ``b"200"`` or an error; ``timing`` is ``(queued, served)`` if given."""

    __slots__ = ("body", "received", "request_id", "sent", "status", "timing", "token")

    def __init__(
        self,
        request_id: bytes,
        token: T,
        status: bytes,
        timing: tuple[float, float] | None,
        body: tuple[bytes, ...],
        sent: float,
        received: float,
    ) -> None:
        self.request_id: Final = request_id
        self.token: Final = token
        self.status: Final = status
        self.timing: Final = timing
        self.body: Final = body
        self.sent: Final = sent
        self.received: Final = received

    def __repr__(self) -> str:
        return _repr(self, ("request_id", "token", "status", "timing", "body", "sent", "received"))


class Progress(Generic[T]):
    """A partial result of an outstanding request."""

    __slots__ = ("body", "received", "request_id", "sent", "token")

    def __init__(self, request_id: bytes, token: T, body: tuple[bytes, ...], sent: float, received: float) -> None:
        self.request_id: Final = request_id
        self.token: Final = token
        self.body: Final = body
        self.sent: Final = sent
        self.received: Final = received

    def __repr__(self) -> str:
        return _repr(self, ("request_id", "token", "body", "sent", "received"))


class Fail(Generic[T]):
    """A request that will get no reply (the session was closed)."""

    __slots__ = ("reason", "request_id", "token")

    def __init__(self, request_id: bytes, token: T, reason: str) -> None:
        self.request_id: Final = request_id
        self.token: Final = token
        self.reason: Final = reason

    def __repr__(self) -> str:
        return _repr(self, ("request_id", "token", "reason"))


def _repr(record: object, names: tuple[str, ...]) -> str:
    fields = ", ".join(f"{name}={getattr(record, name)!r}" for name in names)
    return f"{type(record).__name__}({fields})"


@dataclasses.dataclass(slots=True, init=False, unsafe_hash=True)
class RunTask:
    """A worker's task to run now; report its result with :meth:`WorkerSession.finish`. ``deadline``: the time
    (on the clock the session is fed) after which nobody waits for the result, if the client set one."""

    task_id: Final[bytes]
    description: Final[bytes]
    body: Final[tuple[bytes, ...]]
    deadline: Final[float | None]
    trace: Final[TraceContext | None]  # the request's W3C trace context, if it carries one

    def __init__(
        self,
        task_id: bytes,
        description: bytes,
        body: tuple[bytes, ...],
        deadline: float | None = None,
        trace: TraceContext | None = None,
    ) -> None:
        self.task_id = task_id
        self.description = description
        self.body = body
        self.deadline = deadline
        self.trace = trace


@dataclasses.dataclass(frozen=True, slots=True)
class CancelTask:
    """Nobody waits for the running task's result any more (cancelled, or past its deadline)."""

    task_id: bytes


Action = ToBroker | Reconnect | Resolve[T] | Progress[T] | Fail[T] | RunTask | CancelTask


class Pulse:
    """Heartbeats every ``heartbeat_interval``; the broker presumed gone after ``expiry`` seconds unheard."""

    def __init__(self, settings: PeerSettings, now: float) -> None:
        self.interval = settings.heartbeat_interval
        self.expiry = settings.expiry
        self.heard = now
        self.due = now  # the next heartbeat
        self.looked = now  # the last time silence was looked at

    def restart(self, now: float) -> None:
        """Count silence from ``now``: after a reconnect, or a time in which nobody listened."""
        self.heard = now

    def beat(self, now: float, backlogged: bool) -> bool:
        """True (and the next one scheduled) when a heartbeat should go out now."""
        if now < self.due or backlogged:
            return False
        self.due = now + self.interval
        return True

    def silence(self, now: float) -> float | None:
        """Seconds the broker has been silent, if that is longer than the expiry. If this is asked more than
        the expiry after the last time, this peer was not running (paused, suspended), not listening: the
        broker's silence counts from now (what it sent meanwhile waits in the socket)."""
        if now - self.looked > self.expiry:
            self.heard = now
        self.looked = now
        quiet = now - self.heard
        return quiet if quiet > self.expiry else None

    def deadline(self) -> float:
        """When the next tick has something to do."""
        return min(self.due, self.heard + self.expiry)


class _Drops:
    """Counts dropped messages and logs them, at most one line per :data:`LOG_EVERY` seconds."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.count = 0
        self._lines = LogLimiter(log, LOG_EVERY)

    def drop(self, reason: str, now: float) -> None:
        self.count += 1
        self._lines.line("dropped", now, "%s dropped a message: %s", self.what, reason)


class _Outstanding(Generic[T]):
    """A request outstanding (or a fetch), as the client's session keeps it."""

    __slots__ = ("asked_seq", "deadline", "fields", "frames", "not_before", "sent", "sent_seq", "token", "touched")

    def __init__(
        self, frames: list[bytes], token: T, sent: float, touched: float, sent_seq: int, asked_seq: int = -1
    ) -> None:
        self.frames = frames  # the request as sent; empty for a fetch (nothing to send again)
        self.token: Final = token
        self.sent: Final = sent  # first sent, for the caller's timeline
        self.touched = touched  # last sent or asked about
        self.sent_seq = sent_seq  # order of the last send among this session's requests and heartbeats
        self.asked_seq = asked_seq
        self.deadline: float | None = None  # when the caller stops waiting (its clock), if the request says
        self.not_before: float | None = None  # when it may be dispatched (its clock), if the request says
        # tenant, priority, flags, trace context: a resend with the time left
        self.fields: tuple[str | None, int, int, TraceContext | None] = (None, 0, 0, None)


class ClientSession(Generic[T]):
    """One client's requests and its view of the broker; see the module docstring.

    Args:
        settings: the heartbeats to keep (use the broker's).
        now: the time, on the clock the session is fed.
        reask_after: the age at which an outstanding request is asked about (default: the liveness expiry).

    Example:
        >>> from generaldomo.sansio.wire import protocol
        >>> from generaldomo.sansio.peer.session import ClientSession, Resolve
        >>> session = ClientSession(now=0.0)
        >>> frames = session.submit(b"r1", b"echo", [b"hi"], "caller", 0.0)  # send these to the broker
        >>> reply = [protocol.GDP_CLIENT, b"\\x03", b"r1", protocol.OK, b"", b"hi"]  # what it answers
        >>> [(a.token, a.body) for a in session.receive(reply, 0.1) if isinstance(a, Resolve)]
        [('caller', (b'hi',))]
    """

    def __init__(
        self, settings: PeerSettings = DEFAULT_SETTINGS, now: float = 0.0, reask_after: float | None = None
    ) -> None:
        self.pulse = Pulse(settings, now)
        self.reask_after = settings.expiry if reask_after is None else reask_after
        self.instance: bytes | None = None  # the broker's, once it answered a heartbeat
        self.outstanding: dict[bytes, _Outstanding[T]] = {}  # ordered by when last sent or asked about
        self.replies_dropped = 0
        self.answers_repeated = 0  # kept answers the broker sent again for a re-ask that crossed the reply
        self._asked_and_answered: dict[bytes, None] = {}  # the latest such ids, oldest first
        self.resent = 0
        self.asked = 0
        self.drops = _Drops("client")
        self._seq = 0
        self._cancels_unconfirmed = 0  # CANCELs sent that no broker answer has followed yet
        self._probe: bytes | None = None  # the id the farewell HEARTBEAT asks about, until the broker answers it

    def submit(
        self, request_id: bytes, description: bytes, body: Sequence[bytes], token: T, now: float, *,
        deadline: float | None = None, tenant: str | None = None, priority: int = 0, flags: int = 0,
        not_before: float | None = None, trace: TraceContext | None = None,
    ) -> list[bytes]:  # fmt: skip
        """Make a request outstanding; returns its frames, to be sent. ``deadline`` and ``not_before`` (times on
        the clock ``now`` reads), ``tenant``, ``priority``, ``flags`` and ``trace`` go in its fields (ValueError on
        a bad one).

        Args:
            request_id: the request's id (16 random bytes, unique).
            description: the request description.
            body: the payload frames.
            token: what the actions about this request carry back (the caller's future, say).
            now: the time.
            deadline: see above.
            tenant: see above.
            priority: see above.
            flags: see above (``protocol.FLAG_*``).
            not_before: see above: the broker dispatches it no earlier.
            trace: the W3C trace context of the caller's span.
        """
        if request_id in self.outstanding:
            raise ValueError(f"request id {request_id.hex()} is outstanding already")
        fields = protocol.request_fields(
            None if deadline is None else deadline - now, tenant, priority, flags,
            None if not_before is None else not_before - now, trace,
        )  # fmt: skip
        if not self.outstanding:
            self.pulse.restart(now)  # nobody listened while nothing was asked
        frames = protocol.gdp_request(request_id, description, body, fields)
        self._seq += 1
        entry = _Outstanding(frames, token, now, now, self._seq)
        if deadline is not None or not_before is not None:
            entry.deadline, entry.not_before, entry.fields = deadline, not_before, (tenant, priority, flags, trace)
        self.outstanding[request_id] = entry
        return frames

    def fetch(self, request_id: bytes, token: T, now: float) -> list[bytes]:
        """Wait for the answer to request ``request_id``, sent earlier: returns the heartbeat that asks the
        broker about it, to be sent. The broker sends its kept answer, or the answer of the live request when
        it comes; if it knows neither, the fetch resolves ``404``.

        Args:
            request_id: the id of the request whose answer is wanted.
            token: what the actions about it carry back.
            now: the time.
        """
        if request_id in self.outstanding:
            raise ValueError(f"request id {request_id.hex()} is outstanding already")
        if not self.outstanding:
            self.pulse.restart(now)
        self._seq += 1
        self.outstanding[request_id] = _Outstanding([], token, now, now, -1, asked_seq=self._seq)
        self.asked += 1
        return protocol.gdp_client_heartbeat(ids=[request_id])

    def cancel(self, request_id: bytes) -> list[Action[T]]:
        """Forget an outstanding request; returns the CANCEL to send (nothing if it was not outstanding, or was a
        fetch: the request it waits for runs on, and can be fetched again).

        Args:
            request_id: the request's id.
        """
        entry = self.outstanding.pop(request_id, None)
        if entry is None or not entry.frames:
            return []
        self._cancels_unconfirmed += 1
        return [ToBroker(protocol.gdp_cancel(request_id))]

    def farewell(self, probe: bytes) -> list[Action[T]]:
        """Before the socket closes: if CANCELs were sent since the broker last answered, a HEARTBEAT asking
        about ``probe`` (an id no request has), to be sent after them. The broker reads a connection's messages
        in order and lists an id it does not know in its answer, so once :attr:`farewell_heard` the CANCELs have
        reached it; the caller waits for that (bounded) before closing, rather than lose them with the socket.

        Args:
            probe: a fresh random id.
        """
        if not self._cancels_unconfirmed:
            return []
        self._probe = probe
        return [ToBroker(protocol.gdp_client_heartbeat(ids=[probe]))]

    @property
    def farewell_heard(self) -> bool:
        """Whether the broker answered the :meth:`farewell` HEARTBEAT (True when none is awaited)."""
        return self._probe is None

    def receive(self, frames: Sequence[bytes], now: float) -> list[Action[T]]:
        """Act on a message from the broker.

        Args:
            frames: the message's frames.
            now: the time.
        """
        self.pulse.restart(now)
        message = protocol.read_client_message(frames)
        if isinstance(message, FinalReply):  # (typed: a compiled call, where a table's is a Python one)
            return self._on_final(message, now)
        if isinstance(message, PartialReply):
            return self._on_partial(message, now)
        if isinstance(message, HeartbeatAnswer):
            return self._on_heartbeat(message, now)
        return self._on_malformed(message, now)

    def tick(self, now: float, backlogged: bool = False) -> list[Action[T]]:
        """Heartbeat (asking about old requests) or reconnect, as the time says; nothing while idle.

        Args:
            now: the time.
            backlogged: the socket holds messages it could not send yet (heartbeats wait).
        """
        if not self.outstanding:
            return []
        quiet = self.pulse.silence(now)
        if quiet is not None:
            self.pulse.restart(now)
            return [Reconnect(f"broker silent for {quiet:.1f} s", silent=True), *self._resend_all(now)]
        if not self.pulse.beat(now, backlogged):
            return []
        asked = self._ask(now)
        batches = [asked[n : n + protocol.MAX_REASKED] for n in range(0, len(asked), protocol.MAX_REASKED)] or [[]]
        return [ToBroker(protocol.gdp_client_heartbeat(ids=batch)) for batch in batches]

    def moved(self, reason: str, now: float) -> list[Action[T]]:
        """The broker is elsewhere now (its address file changed, says ``reason``, at ``now``): a new socket, and
        every outstanding request sent again there."""
        self.pulse.restart(now)
        return [Reconnect(reason), *self._resend_all(now)]

    def deadline(self) -> float | None:
        """When :meth:`tick` next has something to do; None while nothing is outstanding."""
        return self.pulse.deadline() if self.outstanding else None

    def close(self, reason: str) -> list[Action[T]]:
        """Fail every outstanding request.

        Args:
            reason: why, for the Fail actions.
        """
        failed: list[Action[T]] = [Fail(rid, entry.token, reason) for rid, entry in self.outstanding.items()]
        self.outstanding.clear()
        return failed

    def _on_final(self, message: FinalReply, now: float) -> list[Action[T]]:
        entry = self.outstanding.pop(message.request_id, None)
        if entry is None:
            if message.request_id in self._asked_and_answered:
                self.answers_repeated += 1
            else:
                self.replies_dropped += 1  # a duplicate, or the answer to a cancelled request
            return []
        if entry.asked_seq >= 0:  # a heartbeat asking about it may be on its way: its answer is no duplicate
            self._asked_and_answered[message.request_id] = None
            if len(self._asked_and_answered) > REMEMBER_ASKED:
                del self._asked_and_answered[next(iter(self._asked_and_answered))]
        timing = protocol.parse_timing(message.timing)
        return [Resolve(message.request_id, entry.token, message.status, timing, message.body, entry.sent, now)]

    def _on_partial(self, message: PartialReply, now: float) -> list[Action[T]]:
        entry = self.outstanding.get(message.request_id)
        if entry is None:
            return []
        return [Progress(message.request_id, entry.token, message.body, entry.sent, now)]

    def _on_heartbeat(self, message: HeartbeatAnswer, now: float) -> list[Action[T]]:
        previous, self.instance = self.instance, message.instance
        if self._probe is not None and self._probe in message.unknown:
            self._probe, self._cancels_unconfirmed = None, 0
        if previous is not None and previous != message.instance:
            log.warning("the broker restarted; sending %d requests again", len(self.outstanding))
            return self._resend_all(now)
        resent: list[Action[T]] = []
        for request_id in message.unknown:
            entry = self.outstanding.get(request_id)
            if entry is None or entry.asked_seq <= entry.sent_seq:  # sent again since asked about
                continue
            if entry.frames:
                resent.append(self._resend(request_id, entry, now))
            else:  # a fetch: nothing to send again
                del self.outstanding[request_id]
                resent.append(Resolve(request_id, entry.token, protocol.NOT_FOUND, None, (_UNKNOWN,), entry.sent, now))
        return resent

    def _on_malformed(self, message: Malformed, now: float) -> list[Action[T]]:
        self.drops.drop(message.reason, now)
        return []

    def _ask(self, now: float) -> list[bytes]:
        horizon = now - self.reask_after
        asked: list[bytes] = []
        for request_id, entry in self.outstanding.items():
            if entry.touched > horizon or len(asked) == protocol.MAX_REASKED * ASKING_HEARTBEATS:
                break
            asked.append(request_id)
        self._seq += 1
        for request_id in asked:
            entry = self.outstanding.pop(request_id)
            entry.touched, entry.asked_seq = now, self._seq
            self.outstanding[request_id] = entry
        self.asked += len(asked)
        return asked

    def _resend_all(self, now: float) -> list[Action[T]]:
        return [self._resend(rid, entry, now) for rid, entry in list(self.outstanding.items())]

    def _resend(self, request_id: bytes, entry: _Outstanding[T], now: float) -> ToBroker:
        if not entry.frames:  # a fetch: ask again
            self._seq += 1
            entry.touched, entry.asked_seq = now, self._seq
            self.asked += 1
            return ToBroker(protocol.gdp_client_heartbeat(ids=[request_id]))
        deadline, not_before = entry.deadline, entry.not_before
        if deadline is not None or not_before is not None:  # the times left now, not those it had when first sent
            tenant, priority, flags, trace = entry.fields
            fields = protocol.request_fields(
                None if deadline is None else deadline - now, tenant, priority, flags,
                None if not_before is None else not_before - now, trace,
            )  # fmt: skip
            entry.frames = [*entry.frames[:4], fields, *entry.frames[5:]]
        self._seq += 1
        entry.touched, entry.sent_seq = now, self._seq
        del self.outstanding[request_id]
        self.outstanding[request_id] = entry  # order by when last sent
        self.resent += 1
        return ToBroker(entry.frames)


class WorkerSessionState(enum.Enum):
    """Where a worker's session is in its life (the broker's record of a worker has
    :class:`~generaldomo.sansio.broker.states.WorkerState`)."""

    # members are singletons: the C identity hash serves, not Enum's own (it hashes the name in Python at every dict
    # or set lookup); without both enums here, a worker's calling thread costs 8,800 instructions more per request,
    # 8 % (``python -m bench.peer_instructions --role worker``, 2026-12-07)
    __hash__ = object.__hash__

    READY = "ready"  # registered, or registering: waiting for a task
    BUSY = "busy"  # a task runs
    LEAVING = "leaving"  # a task runs; its result goes out, then DISCONNECT
    STOPPED = "stopped"  # said DISCONNECT; sends nothing more


class WorkerSessionEvent(enum.Enum):
    """What happens to a worker's session: the broker sends a task; its user finishes it or stops."""

    __hash__ = object.__hash__  # (as WorkerSessionState's)

    TASK = "task"
    FINISH = "finish"
    STOP = "stop"
    STOP_AFTER_TASK = "stop after the task"


_WS, _WE = WorkerSessionState, WorkerSessionEvent
# (state, event) -> the next state. An event the table has no move for in a state is ignored by the session's
# own choice, said where it comes (a task while one runs is dropped; stopping twice does nothing), never
# applied: applying it would raise IllegalTransition.
WORKER_SESSION: Final[Machine[WorkerSessionState, WorkerSessionEvent]] = Machine(
    "worker session",
    {
        (_WS.READY, _WE.TASK): _WS.BUSY,
        (_WS.BUSY, _WE.FINISH): _WS.READY,
        (_WS.LEAVING, _WE.FINISH): _WS.STOPPED,
        (_WS.READY, _WE.STOP): _WS.STOPPED,
        (_WS.BUSY, _WE.STOP): _WS.STOPPED,
        (_WS.LEAVING, _WE.STOP): _WS.STOPPED,
        (_WS.READY, _WE.STOP_AFTER_TASK): _WS.STOPPED,
        (_WS.BUSY, _WE.STOP_AFTER_TASK): _WS.LEAVING,
    },
)
RUNNING = (_WS.BUSY, _WS.LEAVING)


class RetryWait:
    """Waits that grow: :data:`RETRY_WAIT_FIRST` seconds, twice that after each wait in a row, at most
    :data:`RETRY_WAIT_MOST`; each drawn within :data:`RETRY_WAIT_JITTER` of its step by ``uniform()`` (a number in
    [0, 1): peers refused together do not come back together). :meth:`reset` starts again from the first."""

    def __init__(self, uniform: Callable[[], float]) -> None:
        self._uniform = uniform
        self._step = RETRY_WAIT_FIRST

    def next(self) -> float:
        """The next wait, in seconds."""
        step, self._step = self._step, min(RETRY_WAIT_MOST, self._step * 2)
        return min(RETRY_WAIT_MOST, step * (1.0 - RETRY_WAIT_JITTER + 2 * RETRY_WAIT_JITTER * self._uniform()))

    def reset(self) -> None:
        self._step = RETRY_WAIT_FIRST


class WorkerSession:
    """One worker's registration with the broker; see the module docstring.

    Args:
        description: the service description to register.
        settings: the heartbeats to keep (use the broker's).
        now: the time, on the clock the session is fed.
        info: the peer info its READY carries (host, pid, features), if any.
        uniform: draws the jitter of the waits after refusals (a number in [0, 1); the default, 0.5, none).

    Example:
        >>> from generaldomo.sansio.peer.session import ToBroker, WorkerSession
        >>> session = WorkerSession(b"echo", now=0.0)
        >>> [list(a.frames) for a in session.start() if isinstance(a, ToBroker)]  # READY
        [[b'GDPW01', b'\\x01', b'echo']]
    """

    def __init__(
        self,
        description: bytes,
        settings: PeerSettings = DEFAULT_SETTINGS,
        now: float = 0.0,
        info: bytes | None = None,
        uniform: Callable[[], float] = lambda: 0.5,
    ) -> None:
        self.description = description
        self.info = info  # the peer-info frame of each plain READY (protocol.worker_info), if any
        self.plain = False  # the next READY goes without it
        self.pulse = Pulse(settings, now)
        self.pulse.beat(now, backlogged=False)  # READY goes out first; the first heartbeat an interval later
        self.state = WorkerSessionState.READY
        self.heard = False  # the broker has spoken since this worker last registered
        self.task_id: bytes | None = None
        self.tasks_done = 0
        self.drops = _Drops("worker")
        self.wait = RetryWait(uniform)
        self.retry_at: float | None = None  # refused: when to register again
        self.refusals = 0  # READYs the broker answered with DISCONNECT
        self.instance: bytes | None = None  # of the broker, as its heartbeats name it (hand-over brokers)
        self.handover: bool | None = None  # the broker takes hand-overs (None: not known yet)
        self.held: dict[bytes, list[bytes]] = {}  # HANDOVER frames of results not known to be taken, by nonce
        self.held_bytes = 0
        self.resumed = False  # this registration began with RESUME
        self.resume = True  # RESUME may be tried for the running task (a DISCONNECT answering one: no)
        self.unsent = False  # held results this registration has not had yet

    def _can(self, event: WorkerSessionEvent) -> bool:
        """Whether :data:`WORKER_SESSION` has a move for ``event`` in this state."""
        return WORKER_SESSION.allows(self.state, event)

    def _apply(self, event: WorkerSessionEvent) -> None:
        self.state = WORKER_SESSION.apply(self.state, event)

    def start(self) -> list[Action[Any]]:
        """READY, to register."""
        return [ToBroker(self._ready())]

    def _ready(self) -> list[bytes]:
        return protocol.gdp_ready(self.description, info=None if self.plain else self.info)

    def receive(self, frames: Sequence[bytes], now: float) -> list[Action[Any]]:
        """Act on a message from the broker.

        Args:
            frames: the message's frames.
            now: the time.
        """
        self.pulse.restart(now)
        message = protocol.read_worker_message(frames)
        if isinstance(message, TaskRequest | BrokerHeartbeat):
            self.heard, self.retry_at = True, None
            self.wait.reset()  # registered: a later refusal waits the first step again
        if isinstance(message, TaskRequest):
            if not self._can(_WE.TASK):  # the broker sent a task while one runs, or after DISCONNECT
                self.drops.drop(f"a task while {self.state.value}", now)
                return []
            self._apply(_WE.TASK)
            self.task_id, self.resume = message.task_id, True
            deadline = None if message.deadline is None else now + message.deadline
            return [RunTask(message.task_id, message.description, message.body, deadline, message.trace)]
        if isinstance(message, TaskCancel):
            running = self.state in RUNNING and message.task_id == self.task_id
            return [CancelTask(message.task_id)] if running else []
        if isinstance(message, BrokerHeartbeat):
            return self._on_heartbeat(message)
        if isinstance(message, BrokerDisconnect) and self.state is not WorkerSessionState.STOPPED:
            if self.retry_at is not None:
                return []  # refused already: the wait goes on
            if not self.heard and self.resumed:  # that RESUME was refused: this task's result goes in READY
                self.resume = False
            elif not self.heard and self.state is WorkerSessionState.READY:
                return self._refused(now)
            return self._register_again("broker sent DISCONNECT", now)
        if isinstance(message, Malformed):
            self.drops.drop(message.reason, now)
        return []  # a DISCONNECT once stopped: nothing to do

    def _on_heartbeat(self, message: BrokerHeartbeat) -> list[Action[Any]]:
        """Results the broker took are no longer held; a new instance gets the others again."""
        if message.instance is None:  # a broker that takes no hand-over: holding results is for nothing
            self.handover = False
            self.held.clear()
            self.held_bytes = 0
            return []
        self.handover = True
        for taken in message.taken:
            frames = self.held.pop(taken, None)
            if frames is not None:
                self.held_bytes -= _size(frames)
        previous, self.instance = self.instance, message.instance
        if self.state is WorkerSessionState.STOPPED:
            return []
        if previous is not None and previous != message.instance and self.held:
            log.warning("the broker restarted; handing over %d results it may not have", len(self.held))
            self.unsent = True
        return self._handovers()  # (also those a new socket has not had, now that the broker says it takes them)

    def tick(self, now: float, backlogged: bool = False) -> list[Action[Any]]:
        """Heartbeat, or register again after a silence, as the time says.

        Args:
            now: the time.
            backlogged: the socket holds messages it could not send yet (heartbeats wait).
        """
        if self.state is WorkerSessionState.STOPPED:
            return []
        if self.retry_at is not None:
            if now < self.retry_at:
                return []  # refused: nothing goes out until the wait is over
            self.retry_at = None
            return self._register_again("registering again after the refusal", now, goodbye=False)
        quiet = self.pulse.silence(now) if self.state is WorkerSessionState.READY else None
        if quiet is not None:
            return self._register_again(f"broker silent for {quiet:.1f} s", now, silent=True)
        if self.pulse.beat(now, backlogged):
            return [ToBroker(protocol.gdp_worker_command(protocol.HEARTBEAT))]
        return []

    def partial(self, body: Sequence[bytes]) -> list[Action[Any]]:
        """A partial result of the running task (nothing once stopped).

        Args:
            body: the partial result's frames.
        """
        if self.state not in RUNNING or self.task_id is None:
            return []
        return [ToBroker(protocol.gdp_partial(self.task_id, body))]

    def finish(self, status: bytes, body: Sequence[bytes], now: float) -> list[Action[Any]]:
        """The running task's result, inside READY (nothing once stopped: the broker reissues the task); held
        until the broker says it took it.

        Args:
            status: the result's status (``protocol.OK``, or an error's).
            body: the result's frames.
            now: the time.
        """
        task_id, self.task_id = self.task_id, None
        leaving = self.state is WorkerSessionState.LEAVING
        if not self._can(_WE.FINISH):  # no task runs (stopped mid-task: the broker reissues it)
            return []
        self._apply(_WE.FINISH)
        if task_id is None:
            return []
        self.tasks_done += 1
        self.resumed = False
        self.pulse.restart(now)  # the broker's messages were not read while the task ran
        result: list[Action[Any]] = [ToBroker(protocol.gdp_ready(self.description, (task_id, status, body)))]
        result += self._handovers()  # held results a new socket has not had yet (this READY registers it)
        if self.handover is not False:
            self._hold(task_id, status, body)
        return [*result, ToBroker(protocol.gdp_worker_command(protocol.DISCONNECT))] if leaving else result

    def _handovers(self) -> list[Action[Any]]:
        """HANDOVER each held result, if this registration has not had them yet (and the broker's heartbeats have
        not said that it takes no hand-over)."""
        if not self.unsent or self.handover is False:
            return []
        self.unsent = False
        return [ToBroker(frames) for frames in self.held.values()]

    def _hold(self, task_id: bytes, status: bytes, body: Sequence[bytes]) -> None:
        frames = protocol.gdp_handover(task_id, status, body)
        size = _size(frames)
        if size > HOLD_BYTES:
            return
        self.held[nonce(task_id)] = frames
        self.held_bytes += size
        while len(self.held) > HOLD_RESULTS or self.held_bytes > HOLD_BYTES:
            self.held_bytes -= _size(self.held.pop(next(iter(self.held))))

    def stop(self, finish: bool = False) -> list[Action[Any]]:
        """DISCONNECT, once; with ``finish``, a running task's result goes out first (see :meth:`finish`)."""
        event = _WE.STOP_AFTER_TASK if finish else _WE.STOP
        if not self._can(event):  # stopped already, or leaving once its task is done
            return []
        self._apply(event)
        if self.state is WorkerSessionState.LEAVING:
            return []
        return [ToBroker(protocol.gdp_worker_command(protocol.DISCONNECT))]

    def deadline(self) -> float | None:
        """When :meth:`tick` next has something to do; None once stopped."""
        if self.state is WorkerSessionState.STOPPED:
            return None
        if self.retry_at is not None:
            return self.retry_at
        return self.pulse.due if self.state in RUNNING else self.pulse.deadline()

    def _refused(self, now: float) -> list[Action[Any]]:
        """The broker answered READY with DISCONNECT: wait (a growing step, with jitter) before trying again, in
        the other READY form if there are two (a broker older than peer info takes one as malformed)."""
        if self.info is not None:
            self.plain = not self.plain
        wait = self.wait.next()
        self.refusals += 1
        self.retry_at = now + wait
        log.warning(
            "the broker refused this worker's READY for %r (DISCONNECT; the broker's log says why: its key's role "
            "or services, or the description); registering again in %.1f s",
            self.description[:64], wait,
        )  # fmt: skip
        return []

    def moved(self, reason: str, now: float) -> list[Action[Any]]:
        """The broker is elsewhere now (its address file changed, says ``reason``, at ``now``): register there
        (nothing once stopped)."""
        return [] if self.state is WorkerSessionState.STOPPED else self._register_again(reason, now)

    def _register_again(self, reason: str, now: float, silent: bool = False, goodbye: bool = True) -> list[Action[Any]]:
        """A new socket: READY (or, while a task runs, RESUME for a hand-over broker, or nothing: the result will
        go inside READY), then the results held; with a ``goodbye``, DISCONNECT on the old one first unless a task
        runs."""
        self.pulse.restart(now)
        self.heard = False
        self.resumed = False
        self.unsent = bool(self.held)
        # a running task stays this worker's (RESUME says so on the new socket): no DISCONNECT to reissue it
        goodbye = goodbye and self.state not in RUNNING
        farewell = tuple(protocol.gdp_worker_command(protocol.DISCONNECT)) if goodbye else ()
        actions: list[Action[Any]] = [Reconnect(reason, silent, farewell)]
        if self.state not in RUNNING:
            actions.append(ToBroker(self._ready()))
        elif self.handover is not False and self.resume and self.task_id is not None:
            self.resumed = True
            info = None if self.plain else self.info
            actions.append(ToBroker(protocol.gdp_resume(self.description, self.task_id, info)))
        else:
            return actions  # unregistered until the result goes in READY: the held results go after it
        return [*actions, *self._handovers()]


def _size(frames: Sequence[bytes]) -> int:
    return sum(map(len, frames))

"""The client API: one :class:`Client` shared by any number of threads.

This module is the IO shell around :class:`generaldomo.sansio.peer.session.ClientSession`, which owns request ids,
heartbeats, re-asking, resending and duplicate suppression. Threads: the caller's thread checks the payload,
registers the request in the session and sends it; one IO thread per client heartbeats, re-asks and
reconnects as the session says. One lock guards the session; no user code runs under it.

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
(:attr:`Client.internal_errors`) and logged, rate-limited; a reply whose delivery raises fails its own future
with that error. It knows nothing of workers or services beyond the descriptions it passes on.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, InvalidStateError
from concurrent.futures._base import CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED
from typing import Any, Final, TypeVar

import attrs
import zmq

import generaldomo.errors as errors
from generaldomo.compat import moved_names
from generaldomo.io.connection import BrokerChannel, Curve
from generaldomo.io.locator import Where
from generaldomo.io.randomness import RandomPool
from generaldomo.io.transport import Transport
from generaldomo.peers.reader_role import READER_ROLE, ReaderEvent, ReaderRole
from generaldomo.sansio.barrier import Barrier
from generaldomo.sansio.broker.report import StatusQuery
from generaldomo.sansio.config.settings import HEARTBEAT_INTERVAL, LIVENESS, PeerSettings
from generaldomo.sansio.peer.handshake import UNREACHABLE, HandshakeWatch
from generaldomo.sansio.peer.session import Action, ClientSession, Fail, Progress, Resolve, ToBroker
from generaldomo.sansio.wire import protocol, wirejson

# the errors' old paths here: the same classes, with a DeprecationWarning (they live in generaldomo.errors)
__getattr__ = moved_names(
    __name__,
    "generaldomo",
    [
        "BrokerUnreachable",
        "ClientClosed",
        "HandshakeFailed",
        "NotFound",
        "RequestExpired",
        "RequestFailed",
        "RequestRejected",
        "RequestTimeout",
        "ServiceUnavailable",
        "WorkerError",
    ],
)

__all__ = [
    "CLOSE_LINGER_MS",
    "DEADLINE_PASSED",
    "DEFAULT",
    "DEFAULT_TIMEOUT",
    "LEND_CHECK",
    "MAX_PAUSE",
    "MAX_RESENDS",
    "READ_BATCH",
    "REQUEST_ID_BYTES",
    "SHUT_WAITS",
    "WAIT_HINT",
    "Client",
    "Keys",
    "OnPartial",
    "Payload",
    "Reply",
    "RequestFuture",
    "as_bytes",
    "as_frames",
    "fetch_timeout",
    "named",
]

log = logging.getLogger(__name__)
X = TypeVar("X")

Payload = bytes | bytearray | memoryview | Sequence[bytes | bytearray | memoryview]
OnPartial = Callable[["Reply"], None]
Keys = tuple[str | bytes, str | bytes]
DEFAULT_TIMEOUT: Final = 60.0  # seconds request() waits when not told
MAX_RESENDS: Final = 10_000  # times request() sends a request again after a 429 with retry_after, at most
DEADLINE_PASSED: Final = "the request's deadline"  # how the broker's 504 for a passed deadline begins (core)
WAIT_HINT: Final = " (to wait for a broker that starts later: Client(..., fail_unreachable=False), --wait-for-broker)"
MAX_PAUSE: Final = 30.0  # seconds request() waits after a 429 at most, whatever its retry_after says
CLOSE_LINGER_MS: Final = 200  # libzmq sends CANCELs queued at close in the background for this long
READ_BATCH: Final = 256  # messages read per round before the session's clock is looked at again
REQUEST_ID_BYTES: Final = 16  # random bytes per request id: unique across clients, and unpredictable
# the reader role's moves, each one dict lookup (a move its table lacks raises IllegalTransition)
_CLAIMED, _KEPT = READER_ROLE.row(ReaderEvent.CLAIM), READER_ROLE.row(ReaderEvent.KEEP)
_GIVEN_BACK, _TAKEN_BACK = READER_ROLE.row(ReaderEvent.GIVE_BACK), READER_ROLE.row(ReaderEvent.TAKE_BACK)
LEND_CHECK: Final = 0.005  # seconds between the IO thread's looks at a reader role lent to a caller
SHUT_WAITS: Final = 50  # tenths of a second the closing IO thread waits for a lent reader to leave
_DONE_STATES: Final = frozenset((CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED))  # a Future's, once it is done


class _Default:
    """The type of :data:`DEFAULT`: "not given", where None means "no limit"."""


DEFAULT: Final = _Default()


@attrs.frozen(slots=True)
class Reply:
    """A successful result: the frames the worker returned, and where the time went.

    ``queued``: seconds the request waited in the broker before a worker got it (including earlier attempts
    when it was reissued); ``served``: seconds from dispatch to result. ``sent`` and ``received`` are this
    client's ``time.monotonic()`` when the request left and the reply arrived. Together they draw a timeline.

    Args:
        frames: the result's frames (``payload`` is the one frame of a one-frame result).
        queued: see above; None when the broker sent no timing.
        served: see above; None when the broker sent no timing.
        sent: see above.
        received: see above.
        partial: True for a partial result a streaming worker sent before its final one.
        request_id: the id of the request this answers (``Future.request_id``).

    Example::

        reply = client.request("echo", b"hello", timeout=10)
        reply.payload, reply.queued, reply.served, reply.request_id.hex()
    """

    frames: tuple[bytes, ...]
    queued: float | None = None
    served: float | None = None
    sent: float | None = None
    received: float | None = None
    partial: bool = False
    request_id: bytes | None = None  # the id of the request this answers (see Future.request_id)

    @property
    def payload(self) -> bytes:
        """The result when it is one frame (the usual case)."""
        if len(self.frames) != 1:
            raise ValueError(f"the reply has {len(self.frames)} frames; read .frames")
        return self.frames[0]


def as_frames(payload: object, what: str = "payload") -> tuple[bytes, ...]:
    """One frame for bytes, or the given frames; ``TypeError`` for anything else (``str`` included)."""
    if isinstance(payload, bytes):
        return (payload,)
    if isinstance(payload, bytearray | memoryview):
        return (bytes(payload),)
    if isinstance(payload, str | dict) or not isinstance(payload, Sequence):
        raise TypeError(
            f"the {what} is a {type(payload).__name__}; it must be bytes or a sequence of bytes frames "
            "(encode text yourself, e.g. text.encode())"
        )
    frames = tuple(payload)
    for n, frame in enumerate(frames):
        if not isinstance(frame, bytes | bytearray | memoryview):
            raise TypeError(f"frame {n} of the {what} is a {type(frame).__name__}; frames must be bytes")
    return tuple(bytes(frame) for frame in frames)


def named(description: object) -> str:
    """A description as messages name it, whether given as text or bytes: ``'square'`` (bytes that are not
    UTF-8 keep their ``b'...'`` form)."""
    if isinstance(description, bytes):
        try:
            return repr(description.decode())
        except UnicodeDecodeError:
            return repr(description)
    return repr(description)


def as_bytes(text: str | bytes) -> bytes:
    """UTF-8 for text; bytes as they are (descriptions)."""
    return text.encode() if isinstance(text, str) else text


def _silent(action: Action[Any]) -> bool:
    """A partial result nobody listens to: a lent reader may drop it as the IO thread would."""
    return isinstance(action, Progress) and action.token.on_partial is None


def fetch_timeout(request_id: bytes, timeout: float | None) -> errors.RequestTimeout:
    """The :class:`RequestTimeout` of a fetch of ``request_id`` left unanswered for ``timeout`` seconds."""
    return errors.RequestTimeout(f"no answer to request {request_id.hex()} within {timeout} s")


class RequestFuture(Future[Reply]):
    """A request's future (a ``concurrent.futures.Future`` of its :class:`Reply`) with its ``request_id``; a
    thread waiting for it reads the socket itself while it may (module docstring)."""

    def __init__(self, client: Client, request_id: bytes) -> None:
        super().__init__()
        self._client = client
        self._request_id = request_id

    @property
    def request_id(self) -> bytes:
        """The request's id, as the broker and its kept answers know it (the ``Reply`` carries it too)."""
        return self._request_id

    def done(self) -> bool:
        """Whether the request was answered or cancelled: ``Future.done``'s test without its condition's lock (one
        attribute read needs none; the lock's Python ``__enter__``/``__exit__`` are two calls more per look, and a
        round trip looks twice)."""
        return self._state in _DONE_STATES

    def cancel(self) -> bool:
        """Withdraw the request (CANCEL to the broker) unless it is answered already."""
        if not super().cancel():
            return False
        self._client._cancel(self._request_id)
        return True

    def result(self, timeout: float | None = None) -> Reply:
        if self.done():
            return super().result()
        return self._client._await(self, timeout, super().result)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if self.done():
            return super().exception()
        return self._client._await(self, timeout, super().exception)


@attrs.frozen(slots=True)
class _Call:
    """Who waits for a request: its future and partial-result callback."""

    future: Future[Reply]
    on_partial: OnPartial | None


class Client:
    """Sends requests to a broker from any thread; each caller gets its own reply.

    While requests are outstanding the client heartbeats the broker every ``heartbeat_interval`` seconds,
    asking about requests outstanding longer than ``reask_after`` (default: ``liveness`` intervals) and sending
    again those the broker does not know. When the broker answers as a new instance (it restarted) the client
    sends every outstanding request again; when it stays silent for ``liveness`` intervals the client
    reconnects on a new socket and does the same. Resent requests keep their ids, so a broker that still has
    them does not run them twice, and a reply that arrives twice is delivered once. A cancelled future, or a
    :meth:`request` that times out, withdraws its request (CANCEL). ``endpoint`` may be several endpoints (on
    silence the client moves to the next), or a :class:`generaldomo.io.locator.Where` (an address file, a
    beacon, which the client follows when the broker moves). Without an ``endpoint`` the client finds its
    broker as :func:`generaldomo.io.beacon.find_broker` does, in this order: the ``GENERALDOMO_BROKER``
    environment variable; the broker address file named by ``GENERALDOMO_BROKER_FILE`` (waited for, and
    followed); a broker's UDP beacon (5 s; listened for again when the broker falls silent). A refused
    handshake fails requests with :class:`HandshakeFailed` within about a second, and so does an endpoint where
    nothing accepts connections (:class:`~generaldomo.BrokerUnreachable`, a wrong host, port or path, or no broker
    running) while no broker has answered this client yet, unless ``fail_unreachable=False`` (a client that starts
    before its broker; a client given several endpoints or a :class:`~generaldomo.io.locator.Where` waits
    too). Each future has its
    ``request_id``, and each :class:`Reply` the id it answers. ``server_key`` (the broker's CURVE public key,
    Z85 text or 32 bytes) turns on CURVE, with ``keys=(public, secret)`` or a fresh key pair.

    Each request may carry a deadline, a tenant and a priority (see :meth:`submit`): :meth:`request` sends its
    timeout as the deadline (unless ``deadlines=False``: for a broker older than request fields, which drops
    such requests), and ``tenant`` is the default tenant of this client's requests (without one, and without
    CURVE, the broker shares its queues fairly per connection). Requests fail at once with :class:`NotFound`
    (whose message lists the services that have workers and the nearest name) when the broker has no worker for
    their service and had none recently; ``fail_unknown=False`` makes them wait for one instead (a client that
    starts before its workers; per request: ``submit(fail_unknown=...)``). :meth:`fetch` gets the answer to a request
    by its id later, from this client or another one with the same CURVE key.

    Args:
        endpoint: the broker's endpoint (``tcp://HOST:PORT``, ``ipc://PATH``, ``inproc://NAME``), several (tried
            in turn on silence), a :class:`~generaldomo.io.locator.Where`, or None: found as described above.
        transport: ``router`` (a DEALER socket) or ``server`` (a CLIENT socket; needs draft sockets).
        context: the ZeroMQ context to use (the process's shared one by default; ``inproc://`` needs the broker's).
        heartbeat_interval: seconds between heartbeats while requests are outstanding (use the broker's).
        liveness: heartbeat intervals of silence after which the client reconnects.
        default_timeout: the seconds :meth:`request` waits when given no timeout (None: no limit).
        reask_after: the age at which an outstanding request is asked about (default: ``liveness`` intervals).
        server_key: the broker's CURVE public key (Z85 text or 32 bytes); None: plaintext.
        keys: this client's CURVE key pair ``(public, secret)`` (default: a fresh one).
        tenant: the tenant of this client's requests (see :meth:`submit`).
        deadlines: send :meth:`request`'s timeout as the request's deadline (False for a broker older than fields).
        fail_unknown: fail requests at once for a service nobody serves (:class:`NotFound`); False: wait for a
            worker.
        fail_unreachable: fail requests within about a second when nothing accepts connections at the endpoint
            and no broker has answered yet (:class:`~generaldomo.BrokerUnreachable`); False: wait for a broker.
        backpressure: :meth:`request` waits and sends again a request answered ``429`` with a ``retry_after``,
            within its timeout; False: raise the ``429`` (:class:`RequestRejected`) at once.

    Example:
        >>> from generaldomo import Broker, Client, Worker
        >>> import threading
        >>> broker = Broker("router", ["inproc://doc-client"]).start()
        >>> worker = Worker("inproc://doc-client", "echo", lambda payload: payload)
        >>> threading.Thread(target=worker.serve, daemon=True).start()
        >>> with Client("inproc://doc-client") as client:
        ...     client.request("echo", b"hello", timeout=30).payload
        b'hello'
        >>> worker.stop(); broker.stop()
    """

    def __init__(
        self,
        endpoint: str | Sequence[str] | Where | None = None,
        transport: str = "router",
        *,
        context: zmq.Context[Any] | None = None,
        heartbeat_interval: float = HEARTBEAT_INTERVAL,
        liveness: int = LIVENESS,
        default_timeout: float | None = DEFAULT_TIMEOUT,
        reask_after: float | None = None,
        server_key: str | bytes | None = None,
        keys: Keys | None = None,
        tenant: str | None = None,
        deadlines: bool = True,
        fail_unknown: bool = True,
        fail_unreachable: bool = True,
        backpressure: bool = True,
    ) -> None:
        self.transport = Transport.of(transport)
        self.context = context or zmq.Context.instance()
        self.heartbeat_interval = heartbeat_interval
        self.liveness = liveness
        self.default_timeout = default_timeout
        protocol.request_fields(tenant=tenant)  # ValueError now for a tenant the broker would refuse
        self.tenant = tenant
        self.deadlines = deadlines
        self.fail_unknown = fail_unknown
        self.fail_unreachable = fail_unreachable
        self.backpressure = backpressure
        settings = PeerSettings(heartbeat_interval, liveness)
        self._session: ClientSession[_Call] = ClientSession(settings, time.monotonic(), reask_after)
        self._channel = BrokerChannel(endpoint, self.transport, self.context, Curve.of(server_key, keys))
        self._ids = RandomPool()  # request ids: 16 unpredictable bytes each, drawn under the lock
        self._lock = threading.Lock()  # guards the session, the reader role, and the channel while it reconnects
        self._released = threading.Condition(self._lock)  # a lent reader left its read loop
        self._role = ReaderRole.IO  # who reads the socket (see generaldomo.peers.reader_role)
        self._reads = 0  # batches lent readers read (the IO thread sees whether a lent role is still used)
        self._seen = -1  # that count at the IO thread's last look
        self._waiting = 0  # threads waiting for a reply that someone else reads
        self._handoff: list[Action[_Call]] = []  # what a lent reader left for the IO thread to deliver, in order
        self._calling = False  # the IO thread is delivering partial results (callbacks)
        self._closed = False
        self._refused: errors.HandshakeFailed | None = None  # the connection's handshake failed (until one succeeds)
        self._cause: BaseException | None = None  # why the IO thread stopped, if not close()
        self._barrier = Barrier(log, "the client")  # around each message from the broker (lock held)
        self._thread = threading.Thread(target=self._run, name="generaldomo-client", daemon=True)
        self._thread.start()

    @property
    def _reading(self) -> bool:
        """A caller holds the reader role and is in its read loop."""
        return self._role is ReaderRole.READING

    @property
    def endpoint(self) -> str:
        """The broker endpoint the client is connected (or connecting) to now."""
        return self._channel.endpoint

    @property
    def replies_dropped(self) -> int:
        """Replies dropped: duplicates, and answers to cancelled requests."""
        return self._session.replies_dropped

    @property
    def internal_errors(self) -> int:
        """Messages from the broker (or replies) whose handling raised an unexpected error: dropped, logged."""
        return self._barrier.count

    @property
    def malformed(self) -> int:
        """Messages from the broker that were not a valid reply (a field outside its bounds, an unknown command),
        dropped."""
        return self._session.drops.count

    @property
    def answers_repeated(self) -> int:
        """Kept answers the broker sent again for a re-ask that crossed the first (not duplicates)."""
        return self._session.answers_repeated

    @property
    def resent(self) -> int:
        """Requests sent again (broker restarts, reconnects, ids the broker did not know)."""
        return self._session.resent

    @property
    def reconnects(self) -> int:
        """New sockets made after the broker went silent."""
        return self._channel.reconnects

    @property
    def broker_answered(self) -> bool:
        """True once a broker has answered this client at the endpoint (it knows the broker's instance)."""
        return self._session.instance is not None

    @property
    def connection_refused(self) -> bool:
        """True while the latest connection attempts found nothing listening at the endpoint (tcp, ipc)."""
        watch = self._channel.handshake
        return watch is not None and watch.refused

    def submit(
        self, description: str | bytes, payload: Payload = b"", on_partial: OnPartial | None = None, *,
        deadline: float | None = None, tenant: str | None = None, priority: int = 0,
        fail_unknown: bool | None = None, detached: bool = False,
    ) -> RequestFuture:  # fmt: skip
        """Send a request; the future gives its :class:`Reply` or raises :class:`RequestFailed`.

        ``payload`` is bytes (one frame) or a sequence of bytes frames; anything else, ``str`` included, raises
        ``TypeError`` here, before anything is sent. ``on_partial`` is called with each partial result (a
        :class:`Reply` with ``partial=True``) that a streaming worker sends before the final one; it runs on the
        client's IO thread, so keep it short. Cancelling the future withdraws the request.

        ``deadline``: seconds from now after which the answer is of no use: the broker answers ``504``
        (:class:`RequestExpired`) instead of dispatching it later, and tells a worker running it then.
        ``tenant`` (default: the client's) names whose share of the service the request takes (ignored on a
        CURVE link, where the client's key is its tenant); ``priority`` (-5 to 5, default 0) orders it among the
        same tenant's requests, higher first. ValueError for a bad tenant or priority.

        ``fail_unknown`` (default: the client's) asks the broker to answer ``404`` (:class:`NotFound`) at once
        if no worker serves the service and none did within its ``served_memory``, rather than queue the
        request. ``detached=True`` asks it to keep the request queued even while this client is silent (it
        exits, say): the answer is then fetched by its id (``future.request_id``, :meth:`fetch`) within the
        broker's ``keep_answers`` seconds of being ready. A broker older than these flags ignores them.

        Args:
            description: the request description (a service name with the default resolver; ``str`` is UTF-8).
            payload: bytes, or a sequence of bytes frames.
            on_partial: called with each partial result, on the IO thread.
            deadline: see above.
            tenant: see above.
            priority: see above.
            fail_unknown: see above.
            detached: see above.
        """
        body, name = as_frames(payload), as_bytes(description)
        now = time.monotonic()
        tenant = self.tenant if tenant is None else tenant
        fail = self.fail_unknown if fail_unknown is None else fail_unknown
        flags = (protocol.FLAG_KNOWN_SERVICE if fail else 0) | (protocol.FLAG_DETACHED if detached else 0)
        with self._lock:
            if self._closed:
                raise self._closed_error()
            request_id = self._ids(REQUEST_ID_BYTES)
            future = RequestFuture(self, request_id)
            if self._refused is not None:
                future.set_exception(self._refused)
                return future
            idle = not self._session.outstanding and self._role is ReaderRole.IO  # (a lent role is looked at often)
            frames = self._session.submit(
                request_id, name, body, _Call(future, on_partial), now,
                deadline=None if deadline is None else now + deadline, tenant=tenant, priority=priority,
                flags=flags,
            )  # fmt: skip
        self._channel.send(frames)
        if idle:
            self._channel.wake()  # the IO thread starts heartbeating
        return future

    def fetch(self, request_id: bytes | str, timeout: float | _Default | None = DEFAULT) -> Reply:
        """The answer to the request ``request_id`` (bytes, or its hex text), sent earlier by this client or by
        another with the same CURVE key (without CURVE, by anyone holding the id: keep it as you would a
        password): the broker's kept answer (within its ``keep_answers`` seconds), or, while the request is
        queued or running, its answer when it comes. Waits up to ``timeout`` seconds (default:
        ``default_timeout``; None: no limit).

        Raises :class:`NotFound` when the broker has no such request (never sent with this key, answered too
        long ago, or the broker restarted), :class:`RequestTimeout` when the wait ends (the request itself runs
        on, and may be fetched again), and what the request's answer raises (:class:`RequestFailed`).

        Args:
            request_id: the request's id, as ``Future.request_id`` (bytes) or ``generaldomo client --no-wait`` (hex)
                give it.
            timeout: seconds to wait (default: ``default_timeout``; None: no limit).
        """
        wait = self.default_timeout if isinstance(timeout, _Default) else timeout
        future = self.submit_fetch(request_id)
        try:
            return future.result(wait)
        except TimeoutError:
            if not future.cancel() and future.done():  # the answer came just now
                return future.result()
            raise fetch_timeout(future.request_id, wait) from None
        except BaseException:
            future.cancel()  # stops waiting; the request runs on
            raise

    def submit_fetch(self, request_id: bytes | str) -> RequestFuture:
        """Ask for the answer to the request ``request_id`` as :meth:`fetch` does, without waiting: the future
        gives it (or raises what :meth:`fetch` raises but the timeout); cancelling it stops waiting, the
        request runs on (and may be fetched again).

        Args:
            request_id: the request's id (bytes, or its hex text).
        """
        rid = bytes.fromhex(request_id) if isinstance(request_id, str) else bytes(request_id)
        future = RequestFuture(self, rid)
        with self._lock:
            if self._closed:
                raise self._closed_error()
            if self._refused is not None:
                raise self._refused
            idle = not self._session.outstanding and self._role is ReaderRole.IO
            frames = self._session.fetch(rid, _Call(future, None), time.monotonic())
        self._channel.send(frames)
        if idle:
            self._channel.wake()
        return future

    def request(
        self, description: str | bytes, payload: Payload = b"", timeout: float | _Default | None = DEFAULT, *,
        tenant: str | None = None, priority: int = 0, fail_unknown: bool | None = None,
    ) -> Reply:  # fmt: skip
        """Send a request and wait up to ``timeout`` seconds (default: ``default_timeout``; None: no limit),
        which is also the request's deadline (see :meth:`submit`) unless the client was made with
        ``deadlines=False``.

        A ``429`` that says when to try again (its ``retry_after``: the broker's or a bridge's bound is reached
        for now) is backpressure, not a failure: the request is sent again after that many seconds, as often as
        the timeout allows (unless the client was made with ``backpressure=False``); the ``429`` is raised when
        the next try would come after the timeout.

        Raises :class:`RequestTimeout` (a ``TimeoutError``) when the timeout passes, after withdrawing the
        request, whether the client's wait ended first or the broker's ``504`` for the deadline came first (its
        reason is then in the message, the :class:`RequestExpired` the ``__cause__``); an interrupted wait
        (Ctrl-C) withdraws it too; :class:`RequestExpired` for the broker's other ``504`` (its
        ``queue_timeout``).

        Args:
            description: the request description (a service name with the default resolver).
            payload: bytes, or a sequence of bytes frames.
            timeout: seconds to wait (default: ``default_timeout``; None: no limit).
            tenant: as for :meth:`submit`.
            priority: as for :meth:`submit`.
            fail_unknown: as for :meth:`submit`.
        """
        wait = self.default_timeout if isinstance(timeout, _Default) else timeout
        end = None if wait is None else time.monotonic() + wait
        left = wait
        for _ in range(MAX_RESENDS + 1):
            future = self.submit(
                description, payload, deadline=left if self.deadlines else None, tenant=tenant, priority=priority,
                fail_unknown=fail_unknown,
            )  # fmt: skip
            try:
                return self._answer(future, description, left, wait)
            except errors.RequestFailed as error:  # (RequestExpired is a TimeoutError too: this comes first)
                time.sleep(self.pause_after(error, description, wait, end))  # backpressure: then send it again
                left = None if end is None else end - time.monotonic()
        raise self.timeout_error(description, wait)

    def stream(self, description: str | bytes, payload: Payload = b"", timeout: float | None = None) -> Iterator[Reply]:
        """Send a request and yield its partial results as they come, then the final :class:`Reply`.

        Raises :class:`RequestTimeout` (a ``TimeoutError``) when nothing arrives for ``timeout`` seconds,
        :class:`RequestFailed` on an error.
        Args:
            description: the request description.
            payload: bytes, or a sequence of bytes frames.
            timeout: the longest wait between two results (None: no limit).
        """
        arrivals: queue.SimpleQueue[Reply | None] = queue.SimpleQueue()
        future = self.submit(description, payload, on_partial=arrivals.put)
        future.add_done_callback(lambda _: arrivals.put(None))
        try:
            while (item := arrivals.get(timeout=timeout)) is not None:
                yield item
        except queue.Empty:
            future.cancel()
            raise errors.RequestTimeout(f"nothing from {named(description)} for {timeout} s") from None
        finally:
            future.cancel()  # the caller stopped reading (or a timeout): withdraw the request, if still open
        yield future.result()

    def status(self, timeout: float | None = 10.0, **query: Any) -> dict[str, Any]:
        """The broker's status report (``mmi.status``): the broker's totals, and a page of its services and
        workers: the first ones, or those ``query`` asks for (``limit``, ``services_after``, ``workers_after``,
        ``service``, ``order``; see :class:`~generaldomo.sansio.broker.report.StatusQuery`). The report's ``next``
        has the cursors of the next page.

        Args:
            timeout: seconds to wait for the report.
            query: what ``mmi.status`` takes to page its report (see docs/protocol.rst).
        """
        body = [StatusQuery(**query).to_json()] if query else []
        report: dict[str, Any] = wirejson.loads(self.request("mmi.status", body, timeout).payload, None)
        return report

    def flow(self, service: str, timeout: float | None = 10.0, **limits: object) -> dict[str, Any]:
        """Read the flow limits of ``service`` or, given ``rate``, ``burst``, ``concurrency``,
        ``bytes_in_flight``, ``adaptive`` (``{"min": 1, "max": 64}``) and/or ``tenants`` (``{"alice": {"weight":
        3, "concurrency": 8}, "bob": None}``: the tenants named change, None forgets one's), change them (None
        lifts a limit). Returns the limits now in force (``mmi.flow``).

        Args:
            service: the service's name.
            timeout: seconds to wait for the broker's answer.
            limits: the limits to change, as above (none: only read them).
        """
        body = [service.encode()] + ([json.dumps(limits).encode()] if limits else [])
        answer: dict[str, Any] = wirejson.loads(self.request("mmi.flow", body, timeout).payload, None)
        return answer

    def close(self) -> None:
        """Stop the IO thread; requests still waiting fail with :class:`ClientClosed`."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._channel.wake()
        self._thread.join()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _cancel(self, request_id: bytes) -> None:
        with self._lock:
            actions = self._session.cancel(request_id)
            if self._reading:
                self._channel.connection.kick()  # a lent reader may be waiting for this one
        for action in actions:
            if isinstance(action, ToBroker):
                self._channel.send(action.frames)

    def _closed_error(self) -> errors.ClientClosed:
        if self._cause is None:
            return errors.ClientClosed("the client is closed")
        error = errors.ClientClosed(f"the client's IO thread stopped: {self._cause!r}")
        error.__cause__ = self._cause
        return error

    def _answer(self, future: RequestFuture, description: object, left: float | None, wait: float | None) -> Reply:
        """``future``'s reply within ``left`` seconds (it raises what the reply raises), else the request is
        withdrawn and :class:`RequestTimeout` raised (for a request that waited ``wait``)."""
        try:
            return future.result(left)
        except errors.RequestFailed:
            raise
        except TimeoutError:
            if not future.cancel() and future.done():  # the answer came just now (it may raise RequestFailed)
                return future.result()
            raise self.timeout_error(description, wait) from None
        except BaseException:
            future.cancel()
            raise

    def pause_after(
        self, error: errors.RequestFailed, description: object, timeout: float | None, end: float | None
    ) -> float:
        """What :meth:`request` (and :class:`~generaldomo.AsyncClient`) does with an error answer to a request to
        ``description`` sent with ``timeout`` (ending at ``end``, monotonic): a ``429`` with a ``retry_after``
        the timeout leaves room for gives the seconds to wait before sending the request again; the broker's
        ``504`` for the deadline (which is the timeout) raises the :class:`RequestTimeout` the client's own wait
        would; anything else raises ``error``."""
        deadline = self.deadlines and end is not None
        if isinstance(error, errors.RequestExpired) and deadline and error.reason.startswith(DEADLINE_PASSED):
            raise self.timeout_error(description, timeout, error.reason) from error
        pause = error.retry_after if self.backpressure and error.status == 429 else None
        if pause is None or (end is not None and time.monotonic() + pause >= end):
            raise error
        return min(pause, MAX_PAUSE)

    def timeout_error(
        self, description: object, timeout: float | None, said: str | None = None
    ) -> errors.RequestTimeout:
        """The :class:`RequestTimeout` for a request to ``description`` left unanswered for ``timeout`` seconds,
        as :meth:`request` raises it (and :class:`~generaldomo.AsyncClient`): its message says when no broker
        ever answered at the endpoint, or that nothing accepts connections there; ``said``: the broker's reason,
        when its ``504`` for the deadline came first."""
        message = f"no reply to {named(description)} within {timeout} s"
        if said is not None:
            return errors.RequestTimeout(f"{message} (the broker: {said})")
        if self.broker_answered:
            return errors.RequestTimeout(message)
        nobody = f"{message}; no broker has answered at {self.endpoint} over the {self.transport} transport"
        if self.connection_refused:
            return errors.RequestTimeout(f"{nobody}: nothing accepts connections there (is a broker running?)")
        other = next(t for t in Transport if t is not self.transport)
        return errors.RequestTimeout(f"{nobody} (is one running there? does it serve the {other} transport instead?)")

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

    def _resolve_all(self, actions: list[Resolve[_Call]], future: Future[Reply]) -> bool:
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

    def _receive(self, messages: list[list[bytes]], now: float) -> list[Resolve[_Call]] | None:
        """Feed the session a lent reader's batch (lock held): the replies it resolves, or None when the batch
        brought something else, which is left whole for the IO thread."""
        actions: list[Action[_Call]] = []
        for frames in messages:
            actions += self._fed(frames, now)
        rest = self._channel.perform(actions)  # resends; a receive never reconnects
        resolved: list[Resolve[_Call]] = []
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

    def _fed(self, frames: list[bytes], now: float) -> list[Action[_Call]]:
        """The session's actions for one message from the broker, inside the barrier (lock held)."""
        try:
            return self._session.receive(frames, now)
        except Exception:
            self._barrier.caught("a message from the broker", now)
            return []

    def _ticked(self, now: float) -> list[Action[_Call]]:
        """The session's actions for the time ``now``, inside the barrier (lock held)."""
        try:
            return self._session.tick(now)
        except Exception:
            self._barrier.caught("a tick", now)
            return []

    def _handshake(self, watch: HandshakeWatch) -> list[Action[_Call]]:
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
        self._refused = errors.BrokerUnreachable.of(failure.kind, cause)
        return self._session.close(failure.cause)

    def _fails_unreachable(self) -> bool:
        """Whether nothing accepting connections fails requests: asked for, no broker answered yet, and one
        endpoint given (several, an address file or a beacon: the client moves on or waits)."""
        where = self._channel.locator.where
        return self.fail_unreachable and not self.broker_answered and len(where.endpoints) == 1

    def _take_back(self, now: float) -> bool:
        """True if the IO thread holds the reader role, taking back a lent one nobody uses (lock held)."""
        if self._role is ReaderRole.LENT:
            deadline = self._session.deadline()
            if self._reads == self._seen or (deadline is not None and deadline <= now):
                self._role = _TAKEN_BACK[self._role]
        self._seen = self._reads
        return self._role is ReaderRole.IO

    def _deliver(self, actions: list[Action[_Call]]) -> None:
        """Resolve futures and call back (IO thread, no lock held). A callback's BaseException (not an
        Exception) stops the IO thread, once the futures this round decided are resolved."""
        fatal: BaseException | None = None
        for action in actions:
            if isinstance(action, Resolve):
                self._resolve_guarded(action)
            elif isinstance(action, Fail):  # the handshake failed (see _handshake)
                with contextlib.suppress(InvalidStateError):
                    action.token.future.set_exception(self._refused or errors.ClientClosed(action.reason))
            elif isinstance(action, Progress) and action.token.on_partial is not None and fatal is None:
                reply = Reply(
                    action.body, sent=action.sent, received=action.received, partial=True, request_id=action.request_id
                )
                try:
                    action.token.on_partial(reply)
                except Exception:  # a faulty callback must not stop the IO thread
                    log.exception("on_partial callback failed")
                except BaseException as error:
                    fatal = error
        if fatal is not None:
            raise fatal

    def _resolve_guarded(self, action: Resolve[_Call]) -> None:
        """Resolve a request's future, inside the barrier: if that fails, the future gets the error instead."""
        try:
            self._resolve(action)
        except Exception as error:
            with self._lock:
                self._barrier.caught("a reply", time.monotonic())
            with contextlib.suppress(InvalidStateError):
                action.token.future.set_exception(error)

    @staticmethod
    def _resolve(action: Resolve[_Call]) -> None:
        future = action.token.future
        try:  # (not contextlib.suppress: three Python calls per reply)
            if action.status == protocol.OK:
                queued, served = action.timing or (None, None)
                reply = Reply(action.body, queued, served, action.sent, action.received, request_id=action.request_id)
                future.set_result(reply)
            else:
                reason = action.body[0].decode(errors="replace") if action.body else ""
                retry = protocol.parse_retry_after(action.body) if action.status == protocol.OVER_BUDGET else None
                future.set_exception(errors.RequestFailed.of(action.status, reason, retry))
        except InvalidStateError:  # the caller may have cancelled it
            pass

    def _shut(self) -> None:
        """Close the socket; fail what is outstanding (IO thread, last)."""
        with self._lock:
            self._closed = True
            for _ in range(SHUT_WAITS):  # a lent reader sees the close at its next step
                if not self._reading:
                    break
                self._channel.connection.kick()
                self._released.wait(0.1)
            failed = self._session.close("closed")
        self._channel.close(linger_ms=CLOSE_LINGER_MS)
        for action in failed:
            if isinstance(action, Fail):
                error = self._closed_error() if self._cause else errors.ClientClosed("closed before the reply came")
                with contextlib.suppress(InvalidStateError):
                    action.token.future.set_exception(error)

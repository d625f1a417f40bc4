"""The client API: one :class:`Client` shared by any number of threads.

This module owns what callers ask and how long they wait: it checks a request's arguments, fills in the
client's defaults (timeout, tenant, deadline, flags), waits for the answer within the timeout, sends again a
request the broker turned away for now (``429`` with a ``retry_after``), and says why a wait ended. The
session, the socket, the IO thread and who reads (:mod:`generaldomo.peers.client_io`), the reply and its future
(:mod:`generaldomo.peers.reply`), and the payload checks shared with the worker (:mod:`generaldomo.peers.payload`)
live beside it. It knows nothing of workers or services beyond the descriptions it passes on.
"""

from __future__ import annotations

import datetime
import json
import math
import queue
import time
from collections.abc import Iterator, Sequence
from typing import Any, Final

import zmq

import generaldomo.errors as errors
from generaldomo.compat import moved_names
from generaldomo.io.peer.connection import BrokerChannel, Curve
from generaldomo.io.peer.locator import Where
from generaldomo.io.transport import Transport
from generaldomo.peers.client_io import ClientIO
from generaldomo.peers.payload import Keys as Keys
from generaldomo.peers.payload import Payload as Payload
from generaldomo.peers.payload import as_bytes, as_frames
from generaldomo.peers.payload import named as named
from generaldomo.peers.reply import Call
from generaldomo.peers.reply import OnPartial as OnPartial
from generaldomo.peers.reply import Reply as Reply
from generaldomo.peers.reply import RequestFuture as RequestFuture
from generaldomo.peers.reply import fetch_timeout as fetch_timeout
from generaldomo.peers.tracing import as_trace
from generaldomo.sansio.broker.report import StatusQuery
from generaldomo.sansio.config.settings import HEARTBEAT_INTERVAL, LIVENESS, PeerSettings
from generaldomo.sansio.peer.session import ClientSession
from generaldomo.sansio.wire import protocol, wirejson
from generaldomo.sansio.wire.tracecontext import TraceContext

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

__all__ = ["DEADLINE_PASSED", "DEFAULT", "DEFAULT_TIMEOUT", "MAX_PAUSE", "MAX_RESENDS", "Client"]

DEFAULT_TIMEOUT: Final = 60.0  # seconds request() waits when not told
MAX_RESENDS: Final = 10_000  # times request() sends a request again after a 429 with retry_after, at most
DEADLINE_PASSED: Final = "the request's deadline"  # how the broker's 504 for a passed deadline begins (core)
MAX_PAUSE: Final = 30.0  # seconds request() waits after a 429 at most, whatever its retry_after says


class _Default:
    """The type of :data:`DEFAULT`: "not given", where None means "no limit"."""


DEFAULT: Final = _Default()


class Client:
    """Sends requests to a broker from any thread; each caller gets its own reply.

    While requests are outstanding the client heartbeats the broker every ``heartbeat_interval`` seconds,
    asking about requests outstanding longer than ``reask_after`` (default: ``liveness`` intervals) and sending
    again those the broker does not know. When the broker answers as a new instance (it restarted) the client
    sends every outstanding request again; when it stays silent for ``liveness`` intervals the client
    reconnects on a new socket and does the same. Resent requests keep their ids, so a broker that still has
    them does not run them twice, and a reply that arrives twice is delivered once. A cancelled future, or a
    :meth:`request` that times out, withdraws its request (CANCEL). ``endpoint`` may be several endpoints (on
    silence the client moves to the next), or a :class:`generaldomo.io.peer.locator.Where` (an address file, a
    beacon, which the client follows when the broker moves). Without an ``endpoint`` the client finds its
    broker as :func:`generaldomo.io.beacon.find_broker` does, in this order: the ``GENERALDOMO_BROKER``
    environment variable; the broker address file named by ``GENERALDOMO_BROKER_FILE`` (waited for, and
    followed); a broker's UDP beacon (5 s; listened for again when the broker falls silent). A refused
    handshake fails requests with :class:`HandshakeFailed` within about a second, and so does an endpoint where
    nothing accepts connections (:class:`~generaldomo.BrokerUnreachable`, a wrong host, port or path, or no broker
    running) while no broker has answered this client yet, unless ``fail_unreachable=False`` (a client that starts
    before its broker; a client given several endpoints or a :class:`~generaldomo.io.peer.locator.Where` waits
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
            in turn on silence), a :class:`~generaldomo.io.peer.locator.Where`, or None: found as described above.
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
        self.backpressure = backpressure
        settings = PeerSettings(heartbeat_interval, liveness)
        self._session: ClientSession[Call] = ClientSession(settings, time.monotonic(), reask_after)
        self._channel = BrokerChannel(endpoint, self.transport, self.context, Curve.of(server_key, keys))
        self._io = ClientIO(self._session, self._channel, fail_unreachable)  # starts the IO thread

    @property
    def fail_unreachable(self) -> bool:
        """Whether requests fail when nothing accepts connections at the endpoint (see the class's Args)."""
        return self._io.fail_unreachable

    @fail_unreachable.setter
    def fail_unreachable(self, value: bool) -> None:
        self._io.fail_unreachable = value

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
        return self._io.internal_errors

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
        fail_unknown: bool | None = None, detached: bool = False, delay: float | None = None,
        not_before: float | datetime.datetime | None = None, trace: TraceContext | str | bool | None = None,
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

        ``delay`` (seconds from now) or ``not_before`` (a time: seconds since the epoch, as ``time.time()``, or
        an aware ``datetime``) asks the broker not to dispatch the request before then; it is held apart from
        the service's queue meanwhile, so it holds no other request back, and counts against its deadline (a
        deadline that passes first answers it ``504``). Sent again (a broker restart), it carries the delay
        then left. ValueError for both at once, or a value that is not a finite number or an aware datetime.

        ``trace``: the W3C trace context the request carries to its worker, whose handler runs in a child span
        of it: by default (None) the current OpenTelemetry span's, when ``opentelemetry`` is installed and a
        span is current; a :class:`TraceContext` or a ``traceparent`` text (ValueError when malformed) given
        explicitly; False for none.

        Args:
            description: the request description (a service name with the default resolver; ``str`` is UTF-8).
            payload: bytes, or a sequence of bytes frames.
            on_partial: called with each partial result, on the IO thread.
            deadline: see above.
            tenant: see above.
            priority: see above.
            fail_unknown: see above.
            detached: see above.
            delay: see above.
            not_before: see above.
            trace: see above.
        """
        body, name = as_frames(payload), as_bytes(description)
        context = as_trace(trace)
        now = time.monotonic()
        due = _not_before(now, delay, not_before)
        tenant = self.tenant if tenant is None else tenant
        fail = self.fail_unknown if fail_unknown is None else fail_unknown
        flags = (protocol.FLAG_KNOWN_SERVICE if fail else 0) | (protocol.FLAG_DETACHED if detached else 0)
        return self._io.submit(
            name, body, on_partial, now, deadline=None if deadline is None else now + deadline, tenant=tenant,
            priority=priority, flags=flags, not_before=due, trace=context,
        )  # fmt: skip

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
        return self._io.fetch(rid)

    def request(
        self, description: str | bytes, payload: Payload = b"", timeout: float | _Default | None = DEFAULT, *,
        tenant: str | None = None, priority: int = 0, fail_unknown: bool | None = None,
        trace: TraceContext | str | bool | None = None,
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
            trace: as for :meth:`submit`.
        """
        wait = self.default_timeout if isinstance(timeout, _Default) else timeout
        end = None if wait is None else time.monotonic() + wait
        context = as_trace(trace)  # the caller's span now, the same for every send
        left = wait
        for _ in range(MAX_RESENDS + 1):
            future = self.submit(
                description, payload, deadline=left if self.deadlines else None, tenant=tenant, priority=priority,
                fail_unknown=fail_unknown, trace=context or False,
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
        """Read the flow limits of ``service`` or, given some (``mmi.flow``'s keys, as the guide's table of flow
        limits lists them: ``rate``, ``concurrency``, ``adaptive`` as ``{"min": 1, "max": 64}``, ``tenants`` as
        ``{"alice": {"weight": 3, "concurrency": 8}, "bob": None}``: the tenants named change, None forgets
        one's, ...), change them (None lifts a limit). Returns the limits now in force (``mmi.flow``).

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
        self._io.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

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


def _not_before(now: float, delay: float | None, not_before: float | datetime.datetime | None) -> float | None:
    """The time (on the clock that read ``now``, monotonic) before which a request is not dispatched: ``delay``
    seconds from ``now``, or the wall-clock time ``not_before``; None for neither. ValueError for both, or for
    a value that is not a finite number (an aware datetime)."""
    if delay is None and not_before is None:
        return None
    if delay is not None and not_before is not None:
        raise ValueError("give a request's delay or its not_before time, not both")
    if isinstance(not_before, datetime.datetime):
        if not_before.tzinfo is None:
            raise ValueError(f"a not_before datetime needs a time zone (naive: {not_before.isoformat()})")
        not_before = not_before.timestamp()
    seconds = delay if not_before is None else not_before - time.time()
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds):
        raise ValueError(f"a request's delay or not_before is a finite number of seconds, not {seconds!r}")
    return now + max(seconds, 0.0)

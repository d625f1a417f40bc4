"""The client API: one :class:`Client` shared by any number of threads.

This module is the IO shell around :class:`generaldomo.sansio.session.ClientSession`, which owns request ids,
heartbeats, re-asking, resending and duplicate suppression. Threads: the caller's thread checks the payload,
registers the request in the session and sends it; one IO thread per client owns the socket's reading (and,
over ``router``, its writing), feeds the session what arrives and the time, carries out its actions and
resolves the callers' futures. One lock guards the session; no user code runs under it. It knows nothing of
workers or services beyond the descriptions it passes on.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, InvalidStateError
from typing import Any, Final

import attrs
import zmq

from generaldomo.io.beacon import find_broker
from generaldomo.io.connection import BrokerLink, Curve
from generaldomo.io.transport import Transport
from generaldomo.sansio import protocol
from generaldomo.sansio.session import Action, ClientSession, Fail, Progress, Resolve, Send
from generaldomo.sansio.settings import HEARTBEAT_INTERVAL, LIVENESS, PeerSettings

log = logging.getLogger(__name__)

Payload = bytes | bytearray | memoryview | Sequence[bytes | bytearray | memoryview]
OnPartial = Callable[["Reply"], None]
Keys = tuple[str | bytes, str | bytes]
DEFAULT_TIMEOUT: Final = 60.0  # seconds request() waits when not told
CLOSE_LINGER_MS: Final = 200  # libzmq sends CANCELs queued at close in the background for this long
READ_BATCH: Final = 256  # messages read per round before the session's clock is looked at again


class _Default:
    """The type of :data:`DEFAULT`: "not given", where None means "no limit"."""


DEFAULT: Final = _Default()


@attrs.frozen(slots=True)
class Reply:
    """A successful result: the frames the worker returned, and where the time went.

    ``queued``: seconds the request waited in the broker before a worker got it (including earlier attempts
    when it was reissued); ``served``: seconds from dispatch to result. ``sent`` and ``received`` are this
    client's ``time.monotonic()`` when the request left and the reply arrived. Together they draw a timeline.
    """

    frames: tuple[bytes, ...]
    queued: float | None = None
    served: float | None = None
    sent: float | None = None
    received: float | None = None
    partial: bool = False

    @property
    def payload(self) -> bytes:
        """The result when it is one frame (the usual case)."""
        if len(self.frames) != 1:
            raise ValueError(f"the reply has {len(self.frames)} frames; read .frames")
        return self.frames[0]


class RequestFailed(Exception):
    """The broker or the worker answered the request with an error status (``.status``, an int)."""

    def __init__(self, status: bytes | int, reason: str) -> None:
        self.status_bytes = status if isinstance(status, bytes) else str(status).encode()
        self.status = int(self.status_bytes) if self.status_bytes.isdigit() else 0
        self.reason = reason
        super().__init__(f"{self.status_bytes.decode(errors='replace')}: {reason}")

    @staticmethod
    def of(status: bytes, reason: str) -> RequestFailed:
        """The exception for ``status``: the subclass of its family, or this class for other codes."""
        family = _FAMILIES.get(status) or (RequestRejected if status[:1] == b"4" else RequestFailed)
        return family(status, reason)


class RequestRejected(RequestFailed):
    """4xx: the broker refused the request (bad description 400, forbidden 403, too large 413, over budget 429)."""


class WorkerError(RequestFailed):
    """500: the worker's handler raised, or returned something that cannot be sent."""


class ServiceUnavailable(RequestFailed):
    """503: the task could not be served (its workers kept disappearing: ``max_attempts`` reached)."""


class RequestExpired(RequestFailed):
    """504: the request waited in the broker's queue longer than its ``queue_timeout``."""


_FAMILIES: dict[bytes, type[RequestFailed]] = {
    protocol.WORKER_ERROR: WorkerError,
    protocol.UNAVAILABLE: ServiceUnavailable,
    protocol.EXPIRED: RequestExpired,
}


class ClientClosed(RuntimeError):
    """The client was closed, or its IO thread stopped (``__cause__`` says why), before the request was answered."""


class RequestTimeout(TimeoutError):
    """No reply within the time; the message says whether a broker ever answered at the endpoint."""


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


def as_bytes(text: str | bytes) -> bytes:
    """UTF-8 for text; bytes as they are (descriptions)."""
    return text.encode() if isinstance(text, str) else text


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
    :meth:`request` that times out, withdraws its request (CANCEL). Without an ``endpoint`` the client uses
    ``GENERALDOMO_BROKER`` or, failing that, listens for a broker's beacon
    (:func:`generaldomo.io.beacon.find_broker`). ``server_key`` (the broker's CURVE public key, Z85 text or 32
    bytes) turns on CURVE, with ``keys=(public, secret)`` or a fresh key pair.
    """

    def __init__(
        self,
        endpoint: str | None = None,
        transport: str = "router",
        *,
        context: zmq.Context[Any] | None = None,
        heartbeat_interval: float = HEARTBEAT_INTERVAL,
        liveness: int = LIVENESS,
        default_timeout: float | None = DEFAULT_TIMEOUT,
        reask_after: float | None = None,
        server_key: str | bytes | None = None,
        keys: Keys | None = None,
    ) -> None:
        self.transport = Transport.of(transport)
        self.endpoint = find_broker(self.transport, endpoint)
        self.context = context or zmq.Context.instance()
        self.heartbeat_interval = heartbeat_interval
        self.liveness = liveness
        self.default_timeout = default_timeout
        settings = PeerSettings(heartbeat_interval, liveness)
        self._session: ClientSession[_Call] = ClientSession(settings, time.monotonic(), reask_after)
        self._link = BrokerLink(self.endpoint, self.transport, self.context, Curve.of(server_key, keys))
        self._prefix = os.urandom(8)  # request ids are unique across clients
        self._serial = itertools.count(1)
        self._lock = threading.Lock()  # guards the session, and the link while it reconnects
        self._closed = False
        self._cause: BaseException | None = None  # why the IO thread stopped, if not close()
        self._thread = threading.Thread(target=self._run, name="generaldomo-client", daemon=True)
        self._thread.start()

    @property
    def replies_dropped(self) -> int:
        """Replies dropped: duplicates, and answers to cancelled requests."""
        return self._session.replies_dropped

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
        return self._link.reconnects

    def submit(
        self, description: str | bytes, payload: Payload = b"", on_partial: OnPartial | None = None
    ) -> Future[Reply]:
        """Send a request; the future gives its :class:`Reply` or raises :class:`RequestFailed`.

        ``payload`` is bytes (one frame) or a sequence of bytes frames; anything else, ``str`` included, raises
        ``TypeError`` here, before anything is sent. ``on_partial`` is called with each partial result (a
        :class:`Reply` with ``partial=True``) that a streaming worker sends before the final one; it runs on the
        client's IO thread, so keep it short. Cancelling the future withdraws the request.
        """
        body, name = as_frames(payload), as_bytes(description)
        request_id = self._prefix + next(self._serial).to_bytes(8, "big")
        future: Future[Reply] = Future()
        now = time.monotonic()
        with self._lock:
            if self._closed:
                raise self._closed_error()
            idle = not self._session.outstanding
            frames = self._session.submit(request_id, name, body, _Call(future, on_partial), now)
        future.add_done_callback(lambda done: self._cancel(request_id) if done.cancelled() else None)
        self._link.send(frames)
        if idle:
            self._link.wake()  # the IO thread starts heartbeating
        return future

    def request(
        self, description: str | bytes, payload: Payload = b"", timeout: float | _Default | None = DEFAULT
    ) -> Reply:
        """Send a request and wait up to ``timeout`` seconds (default: ``default_timeout``; None: no limit).

        Raises :class:`RequestTimeout` (a ``TimeoutError``), after withdrawing the request; an interrupted
        wait (Ctrl-C) withdraws it too."""
        wait = self.default_timeout if isinstance(timeout, _Default) else timeout
        future = self.submit(description, payload)
        try:
            return future.result(wait)
        except TimeoutError:
            if not future.cancel() and future.done():  # the reply came just now
                return future.result()
            raise RequestTimeout(self._timeout_message(description, wait)) from None
        except BaseException:
            future.cancel()
            raise

    def stream(self, description: str | bytes, payload: Payload = b"", timeout: float | None = None) -> Iterator[Reply]:
        """Send a request and yield its partial results as they come, then the final :class:`Reply`.

        Raises ``TimeoutError`` when nothing arrives for ``timeout`` seconds, :class:`RequestFailed` on an error.
        """
        arrivals: queue.SimpleQueue[Reply | None] = queue.SimpleQueue()
        future = self.submit(description, payload, on_partial=arrivals.put)
        future.add_done_callback(lambda _: arrivals.put(None))
        try:
            while (item := arrivals.get(timeout=timeout)) is not None:
                yield item
        except queue.Empty:
            future.cancel()
            raise RequestTimeout(f"nothing from {description!r} for {timeout} s") from None
        finally:
            future.cancel()  # the caller stopped reading (or a timeout): withdraw the request, if still open
        yield future.result()

    def status(self, timeout: float | None = 10.0) -> dict[str, Any]:
        """The broker's status report (``mmi.status``): broker, services and workers."""
        report: dict[str, Any] = json.loads(self.request("mmi.status", [], timeout).payload)
        return report

    def flow(self, service: str, timeout: float | None = 10.0, **limits: object) -> dict[str, Any]:
        """Read the flow limits of ``service`` or, given ``rate``, ``burst``, ``concurrency``,
        ``bytes_in_flight`` and/or ``adaptive`` (``{"min": 1, "max": 64}``), change them (None lifts a limit).
        Returns the limits now in force (``mmi.flow``)."""
        body = [service.encode()] + ([json.dumps(limits).encode()] if limits else [])
        answer: dict[str, Any] = json.loads(self.request("mmi.flow", body, timeout).payload)
        return answer

    def close(self) -> None:
        """Stop the IO thread; requests still waiting fail with :class:`ClientClosed`."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._link.wake()
        self._thread.join()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _cancel(self, request_id: bytes) -> None:
        with self._lock:
            actions = self._session.cancel(request_id)
        for action in actions:
            if isinstance(action, Send):
                self._link.send(action.frames)

    def _closed_error(self) -> ClientClosed:
        if self._cause is None:
            return ClientClosed("the client is closed")
        error = ClientClosed(f"the client's IO thread stopped: {self._cause!r}")
        error.__cause__ = self._cause
        return error

    def _timeout_message(self, description: str | bytes, timeout: float | None) -> str:
        message = f"no reply to {description!r} within {timeout} s"
        if self._session.instance is not None:
            return message
        other = next(t for t in Transport if t is not self.transport)
        return (
            f"{message}; no broker has answered at {self.endpoint} over the {self.transport} transport "
            f"(is one running there? does it serve the {other} transport instead?)"
        )

    # ---------------------------------------------------------------------------------------- IO thread

    def _run(self) -> None:
        try:
            self._link.adopt()
            self._serve()
        except BaseException as error:  # anything: the callers must hear of it
            log.exception("the client's IO thread stopped")
            self._cause = error
        finally:
            self._shut()

    def _serve(self) -> None:
        link, session, clock = self._link, self._session, time.monotonic
        while not self._closed:
            with self._lock:
                deadline = session.deadline()
            link.wait(deadline, clock())
            messages: list[list[bytes]] = []
            while len(messages) < READ_BATCH and (frames := link.recv()) is not None:
                messages.append(frames)
            now = clock()
            with self._lock:  # a reconnect under the lock: a request is in the resend, or goes to the new socket
                actions: list[Action[_Call]] = []
                for frames in messages:
                    actions += session.receive(frames, now)
                actions += session.tick(now)  # heartbeats queue behind a backlog: the broker answers them in turn
                actions = link.perform(actions)
            self._deliver(actions)

    def _deliver(self, actions: list[Action[_Call]]) -> None:
        """Resolve futures and call back (IO thread, no lock held). A callback's BaseException (not an
        Exception) stops the IO thread, once the futures this round decided are resolved."""
        fatal: BaseException | None = None
        for action in actions:
            if isinstance(action, Resolve):
                self._resolve(action)
            elif isinstance(action, Progress) and action.token.on_partial is not None and fatal is None:
                reply = Reply(action.body, sent=action.sent, received=action.received, partial=True)
                try:
                    action.token.on_partial(reply)
                except Exception:  # a faulty callback must not stop the IO thread
                    log.exception("on_partial callback failed")
                except BaseException as error:
                    fatal = error
        if fatal is not None:
            raise fatal

    @staticmethod
    def _resolve(action: Resolve[_Call]) -> None:
        future = action.token.future
        with contextlib.suppress(InvalidStateError):  # the caller may have cancelled it
            if action.status == protocol.OK:
                queued, served = action.timing or (None, None)
                future.set_result(Reply(action.body, queued, served, action.sent, action.received))
            else:
                reason = action.body[0].decode(errors="replace") if action.body else ""
                future.set_exception(RequestFailed.of(action.status, reason))

    def _shut(self) -> None:
        """Close the socket; fail what is outstanding (IO thread, last)."""
        with self._lock:
            self._closed = True
            failed = self._session.close("closed")
        self._link.close(linger_ms=CLOSE_LINGER_MS)
        for action in failed:
            if isinstance(action, Fail):
                error = self._closed_error() if self._cause else ClientClosed("closed before the reply came")
                with contextlib.suppress(InvalidStateError):
                    action.token.future.set_exception(error)

"""The dashboard's feed: one thread asks the broker for its status every interval and hands the frame to every
page watching.

Rules of this module:

- One broker client and one ``mmi.status`` request per interval, however many pages watch: pages cost the
  broker nothing. A report slow to come (a broker with many services takes longer to build it) is asked for
  less often: at most one request per :data:`SHARE` times the typical round trip of ``mmi.status`` (the median
  of the last :data:`ROUND_TRIPS`; the request alone, not the parsing and framing after it), so the dashboard
  keeps the broker's loop busy for at most about 1/SHARE of the time while one slow answer (a pause of this
  process, a busy moment of the broker's) changes nothing. The frame says how long until the next one.
  A request that times out, fails or returns something that is not a status report becomes a ``trouble``
  message for the pages (the broker is never asked faster because of it).
- **One shared feed for all streams**: each message is encoded once (a server-sent event, bytes) and the last
  :data:`KEPT` are kept for every stream to read; the history a page starts from is built at most once per
  message, whatever the number of pages. A stream holds only the number of the last message it sent: nothing
  is queued per stream, and what it sends goes out in pieces of at most :data:`PIECE` bytes, each after the
  client took the previous one (the server's flow control), so a client that does not read holds at most one
  piece. A stream further behind than :data:`KEPT` messages gets the history again. Each event loop with
  streams has one bell the feed rings once per message; every stream on that loop waits on it.
- **Streams are bounded**: at most :data:`MAX_STREAMS` open at once, and at most :data:`MAX_STREAMS_PER_CLIENT`
  from one client address; beyond that :meth:`Feed.open_stream` says no (the app answers ``503``). A stream
  that ends (its client went away, or the feed stopped) frees its place and everything it held.
- Messages carry a sequence number: a page gets the history up to the last message published and then every
  later one, none twice (publishing and reading take the same lock).
- Under CURVE, the feed asks the broker once whether its key may change flow limits (an ``mmi.flow`` change of
  nothing, for a service name only the broker may have, so it changes nothing; a key without the admin role
  is counted ``forbidden`` once). Controls are on with ``allow_control`` or when the answer is yes.
- Threads and clocks live here; what a frame holds is :mod:`generaldomo.dashboard.frames`'; HTTP is
  :mod:`generaldomo.dashboard.app`'s.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import statistics
import threading
import time
from collections import Counter, deque
from collections.abc import AsyncIterator
from typing import Any, Final

import generaldomo.errors as errors
from generaldomo.compat import moved_names
from generaldomo.dashboard.frames import Framer
from generaldomo.errors import HandshakeFailed, RequestFailed
from generaldomo.peers.client import Client
from generaldomo.sansio.broker.report import MAX_PAGE, StatusReport
from generaldomo.sansio.wire.statuses import FORBIDDEN

# the errors' old paths here: the same classes, with a DeprecationWarning (they live in generaldomo.errors)
__getattr__ = moved_names(__name__, "generaldomo", ["TooManyStreams"])

__all__ = [
    "INTERVAL",
    "KEEPALIVE",
    "KEEPALIVE_EVENT",
    "KEPT",
    "MAX_STREAMS",
    "MAX_STREAMS_PER_CLIENT",
    "PIECE",
    "PROBE_SERVICE",
    "ROUND_TRIPS",
    "SHARE",
    "TIMEOUT",
    "Feed",
    "SentEvent",
    "Stream",
    "event",
]

log = logging.getLogger(__name__)

INTERVAL: Final = 1.0  # seconds between two status requests
TIMEOUT: Final = 5.0  # seconds a status request may take before the pages are told the broker does not answer
KEPT: Final = 30  # messages kept for streams a little behind; further behind, a stream gets the history again
SHARE: Final = 50  # the next request waits at least this many times the typical round trip
ROUND_TRIPS: Final = 5  # round trips the typical one is the median of
MAX_STREAMS: Final = 64  # event streams open at once, all clients together
MAX_STREAMS_PER_CLIENT: Final = 8  # event streams open at once from one client address
PIECE: Final = 64 * 1024  # bytes a stream hands the server at a time
KEEPALIVE: Final = 15.0  # seconds of silence after which a stream sends a comment
PROBE_SERVICE: Final = "mmi.dashboard"  # no worker may serve an mmi. name: a change of nothing for it is harmless

SentEvent = tuple[int, bytes]  # sequence number, the server-sent event (``event: KIND``, ``data: JSON``)
KEEPALIVE_EVENT: Final = b": keep-alive\n\n"


def event(kind: str, text: str) -> bytes:
    """A server-sent event of ``kind`` with the JSON ``text`` (which has no newline in it)."""
    return f"event: {kind}\ndata: {text}\n\n".encode()


class _Bell:
    """Rings every stream of one event loop awake: a future that completes at the next message."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.streams = 0
        self.future: asyncio.Future[None] = loop.create_future()

    def ring(self) -> None:  # on its loop
        if not self.future.done():
            self.future.set_result(None)
        self.future = self.loop.create_future()


class Stream:
    """One page's event stream: the messages it has not sent yet, read from the feed's shared ones."""

    def __init__(self, feed: Feed, bell: _Bell, client: str) -> None:
        self._feed, self._bell, self.client = feed, bell, client
        self.sent = -1  # the sequence number of the last message sent (-1: none, the history comes first)
        self.closed = False

    async def events(self) -> AsyncIterator[bytes]:
        """The pieces of the events to send, history first, until the feed stops (:meth:`close` frees the place
        when the response ends)."""
        while not self._feed.stopped:
            waiter = self._bell.future
            due = self._feed.since(self.sent)
            if not due:
                done, _ = await asyncio.wait({waiter}, timeout=KEEPALIVE)
                if not done:
                    yield KEEPALIVE_EVENT
                continue
            for seq, data in due:
                self.sent = seq  # (a stream cut in the middle of a message is over)
                view = memoryview(data)
                for at in range(0, len(data), PIECE):
                    yield bytes(view[at : at + PIECE]) if len(data) > PIECE else data

    def close(self) -> None:
        """Free this stream's place (once)."""
        if not self.closed:
            self.closed = True
            self._feed.close_stream(self)


class Feed:
    """The thread that polls the broker, and the pages it feeds; see the module docstring."""

    def __init__(
        self,
        client: Client,
        framer: Framer | None = None,
        *,
        interval: float = INTERVAL,
        timeout: float = TIMEOUT,
        allow_control: bool = False,
        curve: bool = False,
        max_streams: int = MAX_STREAMS,
        max_streams_per_client: int = MAX_STREAMS_PER_CLIENT,
    ) -> None:
        if not (0 < interval < math.inf and 0 < timeout < math.inf):
            raise ValueError("the interval and the timeout must be positive and finite")
        if max_streams < 1 or max_streams_per_client < 1:
            raise ValueError("the caps on event streams must be positive")
        self.client = client
        self.interval, self.timeout = interval, timeout
        self.allow_control = allow_control
        self.max_streams, self.max_streams_per_client = max_streams, min(max_streams_per_client, max_streams)
        self._admin: bool | None = None if curve else False  # None: not asked yet
        self._framer = framer or Framer()
        self._lock = threading.Lock()
        self._seq = 0
        self._kept: deque[SentEvent] = deque(maxlen=KEPT)
        self._history_message: SentEvent | None = None  # built at most once per message
        self._bells: dict[asyncio.AbstractEventLoop, _Bell] = {}
        self._clients: Counter[str] = Counter()  # open streams per client address
        self._round_trips: deque[float] = deque(maxlen=ROUND_TRIPS)
        self.every = interval  # seconds between two requests now (longer when the reports are slow to come)
        self._latest: dict[str, Any] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def control(self) -> bool:
        """True when the pages may change flow limits."""
        return self.allow_control or bool(self._admin)

    def start(self) -> None:
        """Start polling (once; later calls do nothing)."""
        with self._lock:
            if self._thread is not None or self._stop.is_set():
                return
            self._thread = threading.Thread(target=self._run, name="generaldomo-dashboard-feed", daemon=True)
            self._thread.start()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def stop(self) -> None:
        """Stop polling, and end every page's stream (closing the client too ends a poll under way)."""
        self._stop.set()
        with self._lock:
            self._ring_locked()

    def join(self, timeout: float = 10.0) -> None:
        """Wait for the polling thread to end."""
        if self._thread is not None:
            self._thread.join(timeout)

    def close(self, timeout: float = 10.0) -> None:
        """:meth:`stop`, then :meth:`join` (the client is the caller's to close)."""
        self.stop()
        self.join(timeout)

    def latest(self) -> dict[str, Any] | None:
        """The last message published (a frame or a trouble report), None before the first."""
        return self._latest

    def open_stream(self, client: str) -> Stream:
        """A stream for a page of ``client`` (its address) on the running event loop: the history first, then
        every later message; :class:`TooManyStreams` at a cap (see the module docstring)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if sum(self._clients.values()) >= self.max_streams:
                raise errors.TooManyStreams(
                    f"{self.max_streams} event streams are open, the most this dashboard serves"
                )
            if self._clients[client] >= self.max_streams_per_client:
                raise errors.TooManyStreams(
                    f"{self.max_streams_per_client} event streams are open from {client}, the most"
                )
            self._clients[client] += 1
            bell = self._bells.get(loop)
            if bell is None:
                bell = self._bells[loop] = _Bell(loop)
            bell.streams += 1
            return Stream(self, bell, client)

    def close_stream(self, stream: Stream) -> None:
        """Free ``stream``'s place (:meth:`Stream.close` calls it)."""
        with self._lock:
            self._clients[stream.client] -= 1
            if self._clients[stream.client] <= 0:
                del self._clients[stream.client]
            bell = stream._bell
            bell.streams -= 1
            if bell.streams <= 0 and self._bells.get(bell.loop) is bell:
                del self._bells[bell.loop]

    def streams(self) -> int:
        """The event streams open now."""
        with self._lock:
            return sum(self._clients.values())

    def since(self, sent: int) -> list[SentEvent]:
        """The messages after the one numbered ``sent`` (-1: none yet): the kept ones, or the history when they
        do not reach back that far; [] when there is nothing new."""
        with self._lock:
            if sent == self._seq and sent >= 0:
                return []
            if sent >= 0 and self._kept and self._kept[0][0] <= sent + 1:
                return [message for message in self._kept if message[0] > sent]
            if self._history_message is None or self._history_message[0] != self._seq:
                self._history_message = (self._seq, event("history", json.dumps(self._framer.history())))
            return [self._history_message]

    def change_flow(self, service: str, limits: dict[str, Any]) -> dict[str, Any]:
        """Change ``service``'s flow limits (``mmi.flow``); the limits in force (RequestFailed, TimeoutError)."""
        return self.client.flow(service, timeout=self.timeout, **limits)

    def poll(self) -> None:
        """Ask the broker for its status once, and publish the frame (or the trouble)."""
        began = time.monotonic()
        try:
            page = self._framer.max_services, self._framer.max_workers  # a page with what a frame shows
            status = self.client.status(timeout=self.timeout, limit=min(MAX_PAGE, max(page)))
            self._round_trips.append(time.monotonic() - began)  # the request alone: parsing and framing are ours
            self.every = max(self.interval, SHARE * statistics.median(self._round_trips))
            report = StatusReport.from_dict(status)
        except TimeoutError:
            self._publish("trouble", {"error": f"the broker did not answer mmi.status within {self.timeout:g} s"})
            return
        except (RequestFailed, HandshakeFailed, ValueError) as error:  # HandshakeFailed: e.g. nothing listens there
            self._publish("trouble", {"error": f"the broker's status could not be read: {error}"})
            return
        arrived = time.time()
        if self._admin is None:
            self._admin = self._may_change_flow()
        with self._lock:
            frame = self._framer.frame(report, arrived, self.control, self.every)
            self._publish_locked("frame", frame)

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                self.poll()
            except Exception:  # a bug here must not silence the pages for good: log it, poll again
                if self._stop.is_set():
                    return  # the client was closed under the poll
                log.exception("the dashboard's feed failed to poll the broker")
            self._stop.wait(max(0.0, self.every - (time.monotonic() - began)))

    def _may_change_flow(self) -> bool | None:
        """Whether the broker lets this key change flow limits (None: no answer, ask again later)."""
        try:
            self.client.request("mmi.flow", [PROBE_SERVICE.encode(), b"{}"], self.timeout)
        except RequestFailed as error:
            if error.status_bytes != FORBIDDEN:
                log.warning("the broker did not say whether this key may change flow limits (%s): controls off", error)
            else:
                log.info("the dashboard's key may not change flow limits: controls are off")
            return False
        except TimeoutError:
            return None
        return True

    def _publish(self, kind: str, data: dict[str, Any]) -> None:
        with self._lock:
            self._publish_locked(kind, {"kind": kind, "at": round(time.time(), 3), **data})

    def _publish_locked(self, kind: str, data: dict[str, Any]) -> None:
        self._seq += 1
        self._latest = data
        self._kept.append((self._seq, event(kind, json.dumps(data))))
        self._ring_locked()

    def _ring_locked(self) -> None:
        for loop, bell in list(self._bells.items()):
            try:
                loop.call_soon_threadsafe(bell.ring)
            except RuntimeError:  # its loop is closed: its pages are gone
                del self._bells[loop]

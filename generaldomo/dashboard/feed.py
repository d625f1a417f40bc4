"""The dashboard's feed: one thread asks the broker for its status every interval and hands the frame to every
page watching.

Rules of this module:

- One broker client and one ``mmi.status`` request per interval, however many pages watch: pages cost the
  broker nothing. A report slow to come (a broker with many services takes longer to build it) is asked for
  less often: at most one request per :data:`SHARE` times the last one's round trip, so the dashboard keeps
  the broker's loop busy for at most about 1/SHARE of the time. A request that times out, fails or returns
  something that is not a status report becomes a ``trouble`` message for the pages (the broker is never asked
  faster because of it).
- Messages carry a sequence number. A page that subscribes gets the history up to the last message published
  and then every later one, none twice: publishing and subscribing take the same lock, and a page's stream
  skips what its history already held. A page that does not keep up (:data:`QUEUED` messages behind) is sent
  a fresh history instead of what it missed.
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
import threading
import time
from typing import Any, Final

from generaldomo.dashboard.frames import Framer
from generaldomo.peers.client import Client, HandshakeFailed, RequestFailed
from generaldomo.sansio.protocol import FORBIDDEN
from generaldomo.sansio.report import MAX_PAGE, StatusReport

log = logging.getLogger(__name__)

INTERVAL: Final = 1.0  # seconds between two status requests
TIMEOUT: Final = 5.0  # seconds a status request may take before the pages are told the broker does not answer
QUEUED: Final = 30  # messages a page may fall behind before it is sent a fresh history instead
SHARE: Final = 50  # the next request waits at least this many times the last one's round trip
PROBE_SERVICE: Final = "mmi.dashboard"  # no worker may serve an mmi. name: a change of nothing for it is harmless

Message = tuple[int, str, str]  # sequence number, SSE event name, JSON text
END: Final[Message] = (0, "end", "")  # wakes a stream whose feed stopped


class Subscription:
    """The messages for one page, queued on its event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queue: asyncio.Queue[Message] = asyncio.Queue(QUEUED)
        self.overrun = False
        self.ended = False  # the feed stopped: the page's stream ends

    def offer(self, message: Message) -> None:
        """Queue ``message`` (on the page's loop); a full queue marks the page as overrun."""
        try:
            self.queue.put_nowait(message)
        except asyncio.QueueFull:
            self.overrun = not self.ended


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
    ) -> None:
        if interval <= 0 or timeout <= 0:
            raise ValueError("the interval and the timeout must be positive")
        self.client = client
        self.interval, self.timeout = interval, timeout
        self.allow_control = allow_control
        self._admin: bool | None = None if curve else False  # None: not asked yet
        self._framer = framer or Framer()
        self._lock = threading.Lock()
        self._subscriptions: set[Subscription] = set()
        self._seq = 0
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

    def stop(self) -> None:
        """Stop polling, and end every page's stream (closing the client too ends a poll under way)."""
        self._stop.set()
        with self._lock:
            for subscription in self._subscriptions:
                subscription.ended = True
                self._tell(subscription, END)

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

    def subscribe(self, loop: asyncio.AbstractEventLoop) -> tuple[Message, Subscription]:
        """The history so far, and a subscription to every message after it."""
        subscription = Subscription(loop)
        subscription.ended = self._stop.is_set()
        with self._lock:
            self._subscriptions.add(subscription)
            return self._history(), subscription

    def resync(self, subscription: Subscription) -> Message:
        """A fresh history for an overrun ``subscription``, whose queue is emptied."""
        with self._lock:
            while not subscription.queue.empty():
                subscription.queue.get_nowait()
            subscription.overrun = False
            return self._history()

    def unsubscribe(self, subscription: Subscription) -> None:
        with self._lock:
            self._subscriptions.discard(subscription)

    def change_flow(self, service: str, limits: dict[str, Any]) -> dict[str, Any]:
        """Change ``service``'s flow limits (``mmi.flow``); the limits in force (RequestFailed, TimeoutError)."""
        return self.client.flow(service, timeout=self.timeout, **limits)

    def poll(self) -> None:
        """Ask the broker for its status once, and publish the frame (or the trouble)."""
        try:
            page = self._framer.max_services, self._framer.max_workers  # a page with what a frame shows
            report = StatusReport.from_dict(self.client.status(timeout=self.timeout, limit=min(MAX_PAGE, max(page))))
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
            took = time.monotonic() - began
            self.every = max(self.interval, SHARE * took)
            self._stop.wait(max(0.0, self.every - took))

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
        message = (self._seq, kind, json.dumps(data))
        for subscription in list(self._subscriptions):
            self._tell(subscription, message)

    def _tell(self, subscription: Subscription, message: Message) -> None:
        try:
            subscription.loop.call_soon_threadsafe(subscription.offer, message)
        except RuntimeError:  # its loop is closed: the page is gone
            self._subscriptions.discard(subscription)

    def _history(self) -> Message:
        return (self._seq, "history", json.dumps(self._framer.history()))

"""The dashboard's web app: one page, its static files, a stream of frames and one control.

Routes (all behind :class:`~generaldomo.dashboard.guard.Guard`):

- ``GET /``: the page (its CSRF token and the fields of its flow form, made from the flow limits' declarations,
  in ``<meta>`` tags; no inline script or style);
- ``GET /static/...``: the page's script and style, and the chart library shipped with the package;
- ``GET /events``: server-sent events: ``history`` first, then a ``frame`` per status report (or ``trouble``
  when the broker does not answer), about once a second; ``503`` beyond the feed's caps on open streams (in
  all and per client address);
- ``GET /api/status``: the last frame as JSON, for scripts;
- ``POST /api/flow``: ``{"service": NAME, "limits": {...}}`` changes a service's flow limits (``mmi.flow``; the
  keys are ``mmi.flow``'s, ``null`` lifts a limit), only when the controls are on; the answer is the limits in
  force, or ``{"error": ...}`` with the broker's status.

It owns how the routes answer; what a frame holds is :mod:`generaldomo.dashboard.frames`', the polling
:mod:`generaldomo.dashboard.feed`'s, who may ask :mod:`generaldomo.dashboard.guard`'s.
"""

from __future__ import annotations

import contextlib
import html
import json
import logging
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from string import Template
from typing import Any, Final

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

import generaldomo
from generaldomo.dashboard.feed import INTERVAL, MAX_STREAMS, MAX_STREAMS_PER_CLIENT, TIMEOUT, Feed, Stream
from generaldomo.dashboard.frames import MAX_SERVICES, MAX_WORKERS, Framer
from generaldomo.dashboard.guard import ASGIApp, Guard, Policy
from generaldomo.errors import RequestFailed, TooManyStreams
from generaldomo.io import files
from generaldomo.peers.client import Client, Keys
from generaldomo.sansio.broker.flow.declaration import controls
from generaldomo.sansio.broker.flow.flow import LIMIT_NAMES, LIMITS
from generaldomo.sansio.wire import wirejson

__all__ = [
    "CONTROLS_OFF",
    "MAX_BODY",
    "MAX_NAME",
    "NO_STORE",
    "PAGE",
    "RETRY",
    "STATIC",
    "Dashboard",
    "create_app",
    "create_wsgi_app",
]

log = logging.getLogger(__name__)

STATIC: Final = Path(__file__).parent / "static"
PAGE: Final = files.FileKind("dashboard page template", 1024 * 1024)
MAX_BODY: Final = 4096  # bytes of a POST body
MAX_NAME: Final = 1024  # characters of a service name to change
RETRY: Final = {"retry-after": "10"}  # seconds a page refused a stream waits before it asks again
NO_STORE: Final = {"cache-control": "no-store"}
CONTROLS: Final = html.escape(json.dumps(controls(LIMITS)))  # the flow form's fields, as the page reads them
CONTROLS_OFF: Final = "the controls are off: start the dashboard with --allow-control, or with an admin key under CURVE"


class Dashboard:
    """The broker's live dashboard: a :class:`Feed` of its status and the web app that shows it.

    ``endpoint``, ``transport``, ``server_key`` and ``keys`` are those of the :class:`~generaldomo.Client` it
    makes (``endpoint`` None: found as the other commands find it). ``allow_control`` turns the flow controls
    on (under CURVE they are also on when the broker gives the key the admin role). ``token`` (None: none) is
    needed by every request; ``hosts`` are the host names the page may be reached by besides the loopback ones.
    :meth:`asgi` and :meth:`wsgi` give the app to mount; polling starts with the first request (or the ASGI
    server's startup) and stops with :meth:`close` (or its shutdown).

    Args:
        endpoint: see above.
        transport: see above.
        server_key: see above.
        keys: see above.
        interval: seconds between two frames of the page (each an ``mmi.status``).
        timeout: seconds to wait for each status report.
        allow_control: see above.
        token: see above.
        hosts: see above.
        max_services: services shown at most (the totals count them all).
        max_workers: workers shown at most.
        max_streams: event streams (pages) open at once, all clients together.
        max_streams_per_client: event streams open at once from one client address.

    Example::

        dashboard = Dashboard("tcp://127.0.0.1:5555", interval=1.0, allow_control=False)
        app = dashboard.asgi()  # mount it in an ASGI server; dashboard.wsgi() for a WSGI one
        dashboard.close()
    """

    def __init__(
        self,
        endpoint: str | None = None,
        transport: str = "router",
        *,
        server_key: str | bytes | None = None,
        keys: Keys | None = None,
        interval: float = INTERVAL,
        timeout: float = TIMEOUT,
        allow_control: bool = False,
        token: str | None = None,
        hosts: Iterable[str] = (),
        max_services: int = MAX_SERVICES,
        max_workers: int = MAX_WORKERS,
        max_streams: int = MAX_STREAMS,
        max_streams_per_client: int = MAX_STREAMS_PER_CLIENT,
    ) -> None:
        self.policy = Policy.of(hosts, token)
        self.client = Client(endpoint, transport, server_key=server_key, keys=keys)
        curve = server_key is not None
        framer = Framer(max_services, max_workers)
        self.feed = Feed(
            self.client,
            framer,
            interval=interval,
            timeout=timeout,
            allow_control=allow_control,
            curve=curve,
            max_streams=max_streams,
            max_streams_per_client=max_streams_per_client,
        )
        self._page = Template(files.read(STATIC / "index.html", PAGE).decode("utf-8"))

    def close(self) -> None:
        """Stop polling, end the pages' streams and close the client."""
        self.feed.stop()
        self.client.close()  # a poll under way ends now
        self.feed.join()

    def asgi(self) -> ASGIApp:
        """The ASGI app (Starlette), guarded."""

        @contextlib.asynccontextmanager
        async def lifespan(app: Starlette) -> AsyncIterator[None]:
            self.feed.start()
            yield
            await run_in_threadpool(self.close)

        routes = [
            Route("/", self._index),
            Route("/events", self._events),
            Route("/api/status", self._status),
            Route("/api/flow", self._flow, methods=["POST"]),
            Mount("/static", StaticFiles(directory=STATIC), name="static"),
        ]
        return Guard(Starlette(routes=routes, lifespan=lifespan), self.policy)

    def wsgi(self) -> Callable[..., Iterable[bytes]]:
        """The same app for a WSGI server (through a2wsgi); the server must allow long responses (the stream)."""
        from a2wsgi import ASGIMiddleware

        return ASGIMiddleware(self.asgi())  # type: ignore[arg-type]

    # ------------------------------------------------------------------------------------------- routes

    async def _index(self, request: Request) -> Response:
        self.feed.start()
        text = self._page.substitute(
            csrf=html.escape(self.policy.csrf), version=html.escape(generaldomo.__version__), limits=CONTROLS
        )
        return HTMLResponse(text, headers=NO_STORE)

    async def _status(self, request: Request) -> Response:
        self.feed.start()
        latest = self.feed.latest()
        if latest is None:
            return JSONResponse({"error": "no status from the broker yet"}, 503, headers=NO_STORE)
        return JSONResponse(latest, headers=NO_STORE)

    async def _events(self, request: Request) -> Response:
        self.feed.start()
        try:
            stream = self.feed.open_stream(request.client.host if request.client else "?")
        except TooManyStreams as error:
            return _error(503, f"{error}: close another page of this dashboard, or try again later", RETRY)
        return _EventStream(stream)

    async def _flow(self, request: Request) -> Response:
        if not self.feed.control:
            return _error(403, CONTROLS_OFF)
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            return _error(415, "send JSON")
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_BODY:
                return _error(413, f"at most {MAX_BODY} bytes")
        try:
            service, limits = _flow_change(wirejson.loads(body, MAX_BODY))
        except ValueError as error:
            return _error(400, str(error))
        try:
            answer = await run_in_threadpool(self.feed.change_flow, service, limits)
        except RequestFailed as error:
            return _error(error.status if 400 <= error.status < 600 else 502, error.reason)
        except TimeoutError:
            return _error(504, "the broker did not answer mmi.flow in time")
        client = request.client.host if request.client else "?"
        log.info("flow limits of %r changed from the dashboard (%s): %s", service, client, limits)
        return JSONResponse(answer, headers=NO_STORE)


def _flow_change(data: Any) -> tuple[str, dict[str, Any]]:
    """The service and the limits of a POST /api/flow body; ValueError when it is not one (the broker checks
    the values)."""
    if not isinstance(data, dict) or set(data) != {"service", "limits"}:
        raise ValueError('send {"service": NAME, "limits": {...}}')
    service, limits = data["service"], data["limits"]
    if not isinstance(service, str) or not 0 < len(service) <= MAX_NAME:
        raise ValueError(f"the service must be a name of 1 to {MAX_NAME} characters")
    if not isinstance(limits, dict) or not limits or not set(limits) <= set(LIMIT_NAMES):
        raise ValueError(f"the limits must be an object with some of {', '.join(LIMIT_NAMES)}")
    return service, limits


def _error(status: int, text: str, headers: dict[str, str] | None = None) -> Response:
    return JSONResponse({"error": text}, status, headers={**NO_STORE, **(headers or {})})


class _EventStream(StreamingResponse):
    """A page's event stream: its place among the feed's streams is freed when the response ends, however."""

    def __init__(self, stream: Stream) -> None:
        super().__init__(stream.events(), media_type="text/event-stream", headers=NO_STORE)
        self._stream = stream

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._stream.close()


def create_app(endpoint: str | None = None, transport: str = "router", **options: Any) -> ASGIApp:
    """An ASGI app showing the broker at ``endpoint`` (default: as the other commands find it: see
    :class:`Dashboard` for the options), e.g. ``uvicorn --factory generaldomo.dashboard:create_app``.

    Args:
        endpoint: the broker's endpoint (None: found).
        transport: ``router`` or ``server``.
        options: what :class:`Dashboard` takes.

    Example::

        # uvicorn --factory generaldomo.dashboard:create_app --port 8077
        app = create_app("tcp://127.0.0.1:5555", interval=2.0)
    """
    return Dashboard(endpoint, transport, **options).asgi()


def create_wsgi_app(endpoint: str | None = None, transport: str = "router", **options: Any) -> Any:
    """The same as :func:`create_app` for a WSGI server (threads; the event stream holds one).

    Args:
        endpoint: the broker's endpoint (None: found).
        transport: ``router`` or ``server``.
        options: what :class:`Dashboard` takes.

    Example::

        # gunicorn --threads 8 'generaldomo.dashboard:create_wsgi_app()'
        app = create_wsgi_app("tcp://127.0.0.1:5555")
    """
    return Dashboard(endpoint, transport, **options).wsgi()

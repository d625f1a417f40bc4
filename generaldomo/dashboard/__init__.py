"""The broker's live dashboard: a web page of its services, workers, queues and flow, fed by ``mmi.status``.

``generaldomo dashboard --connect ENDPOINT`` serves it (README, "Dashboard"); to mount it in an ASGI or WSGI
server of your own, use :func:`create_app` or :func:`create_wsgi_app` (or :class:`Dashboard` for both and
its :meth:`~Dashboard.close`). It needs the ``generaldomo[dashboard]`` extra (Starlette, uvicorn, a2wsgi).

Layout: :mod:`~generaldomo.dashboard.frames` (IO-free: what the page is sent), :mod:`~generaldomo.dashboard.feed`
(the thread that polls the broker), :mod:`~generaldomo.dashboard.guard` (host, token and cross-site checks),
:mod:`~generaldomo.dashboard.app` (the routes), ``static/`` (the page, its script and the chart library).
"""

from __future__ import annotations

try:
    from generaldomo.dashboard.app import Dashboard, create_app, create_wsgi_app
except ImportError as error:  # pragma: no cover - only without the extra
    raise ImportError(f"the dashboard needs the generaldomo[dashboard] extra ({error})") from error

__all__ = ["Dashboard", "create_app", "create_wsgi_app"]

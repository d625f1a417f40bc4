"""The broker's live dashboard: a web page of its services, workers, queues and flow, fed by ``mmi.status``.

``generaldomo dashboard --connect ENDPOINT`` serves it (docs/howto/dashboard.rst); to mount it in an ASGI or WSGI
server of your own, use :func:`create_app` or :func:`create_wsgi_app` (or :class:`Dashboard` for both and
its :meth:`~Dashboard.close`). It needs the ``generaldomo[dashboard]`` extra (Starlette, uvicorn, a2wsgi).

Layout: :mod:`~generaldomo.dashboard.frames` (IO-free: what the page is sent), :mod:`~generaldomo.dashboard.feed`
(the thread that polls the broker), :mod:`~generaldomo.dashboard.guard` (host, token and cross-site checks),
:mod:`~generaldomo.dashboard.app` (the routes), ``static/`` (the page, its script and the chart library).

The chart library is uPlot 1.6.32 as the npm registry ships it (``npm pack uplot@1.6.32``: its
``dist/uPlot.iife.min.js``, ``dist/uPlot.min.css`` and ``LICENSE``, MIT, kept as ``static/uPlot.*``);
``tests/dashboard/test_dashboard_frames.py`` checks their digests, so a change to them is a deliberate one.
"""

from __future__ import annotations

try:
    from generaldomo.dashboard.app import Dashboard, create_app, create_wsgi_app
except ModuleNotFoundError as error:  # only without the extra
    if error.name not in ("starlette", "anyio"):
        raise
    raise ModuleNotFoundError(
        f"the dashboard needs the generaldomo[dashboard] extra: pip install 'generaldomo[dashboard]' ({error})",
        name=error.name,
    ) from error

__all__ = ["Dashboard", "create_app", "create_wsgi_app"]

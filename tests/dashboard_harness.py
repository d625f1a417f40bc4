"""A broker, workers and a dashboard as real processes, and plain HTTP requests to the dashboard."""

from __future__ import annotations

import http.client
import json
import subprocess
from typing import Any
from urllib.parse import urlsplit

from cli_processes import expect, lines, spawn
from waiting import served_at

HEARTBEAT = "0.5"  # seconds: a killed worker is forgotten within 1.5 s


def start_broker(processes: list[subprocess.Popen[str]], *extra: str) -> str:
    """A ``generaldomo broker`` on an ephemeral loopback port; its endpoint."""
    broker = spawn(processes, "broker", "--bind", "tcp://127.0.0.1:*", "--heartbeat", HEARTBEAT, *extra)
    return expect(lines(broker.stdout), "generaldomo broker: router tcp://").split()[-1]


def start_worker(processes: list[subprocess.Popen[str]], endpoint: str, *extra: str) -> subprocess.Popen[str]:
    """A ``generaldomo worker`` (the echo worker unless told otherwise), once the broker answers that its service
    has a worker (a request sent next is not answered 404)."""
    worker = spawn(processes, "worker", "--connect", endpoint, "--heartbeat", HEARTBEAT, *extra)
    served_at(endpoint, extra[extra.index("--service") + 1] if "--service" in extra else "echo")
    return worker


def start_dashboard(processes: list[subprocess.Popen[str]], endpoint: str, *extra: str) -> str:
    """A ``generaldomo dashboard`` on an ephemeral loopback port; the address it prints."""
    dashboard = spawn(processes, "dashboard", "--connect", endpoint, "--http", "127.0.0.1:0", *extra)
    line = expect(lines(dashboard.stdout), "generaldomo dashboard: http://")
    return line.split()[2]


def request(
    url: str, path: str, method: str = "GET", headers: dict[str, str] | None = None, body: Any = None
) -> tuple[int, dict[str, str], bytes]:
    """One HTTP request to the dashboard at ``url``: status, headers (lower-case names) and body. ``body``:
    JSON-ready data (sent as JSON) or bytes. The Host header is the URL's unless ``headers`` says otherwise."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    sent = {"content-type": "application/json"} if data is not None else {}
    try:
        connection.request(method, path, body=data, headers={**sent, **(headers or {})})
        answer = connection.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    finally:
        connection.close()


def latest(url: str, headers: dict[str, str] | None = None) -> dict[str, Any] | None:
    """The dashboard's last frame (None before its first)."""
    status, _, body = request(url, "/api/status", headers=headers)
    return json.loads(body) if status == 200 else None


def origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"

"""``generaldomo dashboard`` over real HTTP, against a real broker and worker (processes over loopback): its page,
files, frames and event stream; the Host, token and cross-site checks; the controls (``--allow-control``, or an
admin key under CURVE); and the same app in a WSGI server. The page in a real browser: test_dashboard_browser.py.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import re
import socket
import socketserver
import threading
import time
import wsgiref.simple_server
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urljoin, urlsplit

import pytest
from cli_processes import run
from dashboard_harness import latest, origin, request, start_broker, start_dashboard, start_worker
from waiting import eventually

from generaldomo import Broker, Client
from generaldomo.cli import dashboard as cli_dashboard
from generaldomo.io import keys

if os.environ.get("CI"):
    import starlette  # CI installs the extra: these tests run there, never skipped
else:
    starlette = pytest.importorskip("starlette")

from generaldomo.dashboard import Dashboard
from generaldomo.dashboard.app import CONTROLS_OFF
from generaldomo.dashboard.feed import KEPT, MAX_STREAMS, MAX_STREAMS_PER_CLIENT, SHARE, Feed
from generaldomo.dashboard.frames import MAX_SERVICES, Framer
from generaldomo.dashboard.guard import is_loopback
from generaldomo.errors import TooManyStreams

CHANGE = {"service": "echo", "limits": {"concurrency": 2}}


@pytest.fixture
def broker(processes) -> str:
    """A broker with one echo worker; its endpoint."""
    endpoint = start_broker(processes)
    start_worker(processes, endpoint)
    return endpoint


def csrf_of(url: str, headers: dict[str, str] | None = None) -> str:
    status, _, page = request(url, "/", headers=headers)
    assert status == 200
    found = re.search(rb'<meta name="csrf-token" content="([^"]+)">', page)
    assert found is not None
    return found.group(1).decode()


def read_events(url: str, count: int) -> list[tuple[str, dict[str, Any]]]:
    """The first ``count`` server-sent events of the dashboard's stream: (event name, data)."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        connection.request("GET", "/events")
        answer = connection.getresponse()
        assert answer.status == 200 and answer.getheader("content-type").startswith("text/event-stream")
        events: list[tuple[str, dict[str, Any]]] = []
        kind = ""
        while len(events) < count:
            line = answer.readline().decode().rstrip("\n")
            assert line or events or kind, "the stream ended"
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                events.append((kind, json.loads(line[6:])))
        return events
    finally:
        connection.close()


def echo_of(frame: dict[str, Any]) -> dict[str, Any] | None:
    """The echo service in a frame (None: not shown yet)."""
    return next((s for s in frame["services"] if s["name"] == "echo"), None)


def frame_where(url: str, condition: Any, what: str, headers: dict[str, str] | None = None) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        frame = latest(url, headers)
        return frame if frame is not None and frame["kind"] == "frame" and condition(frame) else None

    return eventually(check, 30, what)


def test_the_page_its_files_and_its_frames(processes, broker: str) -> None:
    url = start_dashboard(processes, broker)
    status, headers, page = request(url, "/")
    assert status == 200 and b'<meta name="csrf-token"' in page and b"<script>" not in page  # no inline script
    csp = headers["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and headers["x-frame-options"] == "DENY"
    for name in ("dashboard.js", "dashboard.css", "uPlot.iife.min.js", "uPlot.min.css", "uPlot.LICENSE"):
        assert request(url, f"/static/{name}")[0] == 200, name
    frame_where(url, lambda f: f["workers_total"] == 1 and not f["control"], "the worker on the dashboard")
    with Client(broker) as client:
        for _ in range(3):
            assert client.request("echo", b"hi", timeout=30).payload == b"hi"
        done = client.status()["services"][0]["completed"]
    frame = frame_where(url, lambda f: (echo_of(f) or {}).get("completed") == done, "the completions shown")
    assert frame["counters"]["totals"]["completed"] >= done
    assert sum(len(bars) for bars in frame_where(url, lambda f: True, "a frame")["bars"].values()) <= done


def test_the_event_stream_starts_with_the_history_then_sends_frames(processes, broker: str) -> None:
    url = start_dashboard(processes, broker, "--interval", "0.2")
    frame_where(url, lambda f: f["workers_total"] == 1, "a first frame")
    events = read_events(url, 3)
    assert [kind for kind, _ in events] == ["history", "frame", "frame"]
    history, first, second = (data for _, data in events)
    assert history["last"]["kind"] == "frame" and "echo" in history["samples"]
    assert history["last"]["at"] < first["at"] < second["at"]  # nothing twice


def test_other_host_names_are_refused(processes, broker: str) -> None:
    url = start_dashboard(processes, broker)
    port = url.rsplit(":", 1)[1].strip("/")
    assert request(url, "/", headers={"Host": f"attacker.example:{port}"})[0] == 400  # DNS rebinding
    assert request(url, "/api/status", headers={"Host": "attacker.example"})[0] == 400
    assert request(url, "/", headers={"Host": f"localhost:{port}"})[0] == 200
    assert is_loopback("127.0.0.2") and is_loopback("[::1]") and not is_loopback("0.0.0.0")
    assert not is_loopback("192.0.2.1") and not is_loopback("example.org")


def test_a_change_needs_the_pages_origin_and_csrf_token(processes, broker: str) -> None:
    url = start_dashboard(processes, broker, "--allow-control")
    frame_where(url, lambda f: f["control"], "controls on")
    csrf, own = csrf_of(url), origin(url)
    refused = [
        {},  # a form post from nowhere
        {"Origin": "http://attacker.example", "X-CSRF-Token": csrf},
        {"Origin": own, "X-CSRF-Token": csrf, "Sec-Fetch-Site": "cross-site"},
        {"Origin": own},
        {"Origin": own, "X-CSRF-Token": csrf[:-1] + ("x" if csrf[-1] != "x" else "y")},
    ]
    for headers in refused:
        assert request(url, "/api/flow", "POST", headers, CHANGE)[0] == 403, headers
    with Client(broker) as client:
        assert client.flow("echo")["concurrency"] is None
        good = {"Origin": own, "X-CSRF-Token": csrf}
        status, _, body = request(url, "/api/flow", "POST", good, CHANGE)
        assert status == 200 and json.loads(body)["concurrency"] == 2
        assert client.flow("echo")["concurrency"] == 2
        frame_where(url, lambda f: (echo_of(f) or {}).get("flow", {}).get("concurrency") == 2, "the new limit shown")
        bad = [
            ({"service": "echo", "limits": {"speed": 1}}, 400),
            ({"service": "echo", "limits": {"concurrency": 0}}, 400),  # the broker says no
            ({"service": "", "limits": {"rate": 1}}, 400),
            (b"not json", 400),
            ({"service": "echo", "limits": {"rate": 1}, "padding": "x" * 5000}, 413),
        ]
        for body_sent, expected in bad:
            assert request(url, "/api/flow", "POST", good, body_sent)[0] == expected, body_sent
        text = {**good, "content-type": "text/plain"}
        assert request(url, "/api/flow", "POST", text, json.dumps(CHANGE).encode())[0] == 415
        assert client.flow("echo")["concurrency"] == 2 and client.flow("echo")["rate"] is None


def test_the_controls_are_off_without_allow_control(processes, broker: str) -> None:
    url = start_dashboard(processes, broker)
    frame_where(url, lambda f: not f["control"], "a frame")
    headers = {"Origin": origin(url), "X-CSRF-Token": csrf_of(url)}
    status, _, body = request(url, "/api/flow", "POST", headers, CHANGE)
    assert status == 403 and json.loads(body)["error"] == CONTROLS_OFF
    with Client(broker) as client:
        assert client.flow("echo")["concurrency"] is None


def test_a_token_guards_every_request(processes, broker: str) -> None:
    token = "a-token-of-twenty-chars"
    url = start_dashboard(processes, broker, "--token", token)
    assert "token" not in url  # a token given is not printed
    for path in ("/", "/api/status", "/events", "/static/dashboard.js"):
        assert request(url, path)[0] == 401, path
    assert request(url, "/", headers={"Authorization": "Bearer wrong-token-of-twenty"})[0] == 401
    assert request(url, "/", headers={"Authorization": f"Bearer {token}"})[0] == 200
    status, headers, _ = request(url, f"/?token={token}")
    assert status == 303 and headers["location"] == "/"
    cookie = headers["set-cookie"].split(";")[0]
    assert "HttpOnly" in headers["set-cookie"] and "SameSite=Strict" in headers["set-cookie"]
    signed_in = {"Cookie": cookie}
    frame_where(url, lambda f: f["workers_total"] == 1, "a frame", signed_in)
    assert request(url, "/", headers={"Cookie": cookie[:-1] + "?"})[0] == 401
    csrf = csrf_of(url, signed_in)
    post = {**signed_in, "Origin": origin(url), "X-CSRF-Token": csrf}
    assert request(url, "/api/flow", "POST", post, CHANGE)[0] == 403  # signed in, but controls are off
    assert run("dashboard", "--connect", broker, "--http", "127.0.0.1:0", "--token", "short").returncode == 2


def test_a_token_with_spaces_and_any_printable_characters_signs_in(processes, broker: str) -> None:
    token = "correct horse, battery staple; ü=€"  # spaces, a comma, a semicolon, an equals sign, non-ASCII
    url = start_dashboard(processes, broker, "--token", token)
    assert request(url, "/")[0] == 401
    status, headers, _ = request(url, f"/?token={quote(token, safe='')}")
    assert status == 303 and headers["location"] == "/"
    assert quote(token, safe="") not in headers["set-cookie"] and "horse" not in headers["set-cookie"]
    signed_in = {"Cookie": headers["set-cookie"].split(";")[0]}
    frame_where(url, lambda f: f["workers_total"] == 1, "a frame through the cookie", signed_in)
    assert request(url, "/", headers={"Authorization": f"Bearer {token}".encode()})[0] == 200  # type: ignore[dict-item]
    assert request(url, f"/api/status?token={quote(token[:-1], safe='')}")[0] == 401
    for refused in (" a token with a space first", "a token with a tab\there", "a token with a space last "):
        answer = run("dashboard", "--connect", broker, "--http", "127.0.0.1:0", "--token", refused)
        assert answer.returncode == 2 and "printable characters" in answer.stderr, answer.stderr


def test_redirects_go_to_the_dashboards_own_paths_only(processes, broker: str) -> None:
    token = "a-token-of-twenty-chars"
    url = start_dashboard(processes, broker, "--token", token)
    signed_in = {"Cookie": request(url, f"/?token={token}")[1]["set-cookie"].split(";")[0]}
    for path, expected in [
        ("//evil.example/?token=anything", "/evil.example/"),
        ("///evil.example/x?token=anything&a=1", "/evil.example/x?a=1"),
        ("/\\evil.example/?token=anything", "/evil.example/"),
        ("/%5Cevil.example/?token=anything", "/evil.example/"),
        ("/static/dashboard.js?token=anything", "/static/dashboard.js"),
    ]:
        status, headers, _ = request(url, path, headers=signed_in)
        assert status == 303 and headers["location"] == expected, (path, headers.get("location"))
        assert urlsplit(urljoin(url, headers["location"])).netloc == urlsplit(url).netloc, path


def test_under_curve_the_controls_follow_the_keys_role(keydir: Path, processes) -> None:
    endpoint = start_broker(
        processes,
        "--curve-secret",
        str(keydir / "broker.key_secret"),
        *("--clients", str(keydir / "clients"), "--workers", str(keydir / "workers")),
        *("--admins", str(keydir / "admins")),
    )
    server = str(keydir / "broker.key")
    admin = start_dashboard(
        processes, endpoint, "--curve-server-key", server, "--curve-key", str(keydir / "admin.key_secret")
    )
    client = start_dashboard(
        processes, endpoint, "--curve-server-key", server, "--curve-key", str(keydir / "client.key_secret")
    )
    frame_where(admin, lambda f: f["control"], "controls on for the admin key")
    frame_where(client, lambda f: not f["control"], "controls off for a client key")
    for url, expected in ((client, 403), (admin, 200)):
        headers = {"Origin": origin(url), "X-CSRF-Token": csrf_of(url)}
        assert request(url, "/api/flow", "POST", headers, CHANGE)[0] == expected
    public, secret = keys.load_secret(keydir / "admin.key_secret")
    with Client(endpoint, server_key=keys.load_public(keydir / "broker.key"), keys=(public, secret)) as reader:
        assert reader.flow("echo")["concurrency"] == 2
        assert reader.status()["broker"]["counters"].get("forbidden") == 1  # the client key's dashboard asked once


class _ThreadingServer(socketserver.ThreadingMixIn, wsgiref.simple_server.WSGIServer):
    daemon_threads = True


class _QuietHandler(wsgiref.simple_server.WSGIRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def wsgi_server(brokers, workers) -> Iterator[tuple[str, str]]:
    """The dashboard's WSGI app in a threaded wsgiref server, on a broker with an echo worker."""
    broker: Broker = brokers("router", ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint("router", "tcp")
    workers(endpoint, "router")
    dashboard = Dashboard(endpoint, interval=0.2)
    server = wsgiref.simple_server.make_server(
        "127.0.0.1", 0, dashboard.wsgi(), server_class=_ThreadingServer, handler_class=_QuietHandler
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/", endpoint
    finally:
        server.shutdown()
        server.server_close()
        dashboard.close()


def test_the_wsgi_app_serves_the_same(wsgi_server: tuple[str, str]) -> None:
    url, _ = wsgi_server
    assert request(url, "/")[0] == 200  # the first request starts the feed
    frame = frame_where(url, lambda f: f["workers_total"] == 1, "a frame over WSGI")
    assert frame["services"][0]["name"] == "echo"
    assert request(url, "/", headers={"Host": "attacker.example"})[0] == 400
    assert [kind for kind, _ in read_events(url, 2)] == ["history", "frame"]


def test_every_stream_reads_one_shared_feed_and_one_behind_gets_the_history(brokers, workers) -> None:
    broker: Broker = brokers("router", ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint("router", "tcp")
    workers(endpoint, "router")

    def events(chunks: list[bytes]) -> list[tuple[str, dict[str, Any]]]:
        found = []
        for block in b"".join(chunks).decode().split("\n\n"):
            if block.startswith("event: "):
                kind, data = block.split("\n", 1)
                found.append((kind[7:], json.loads(data[6:])))
        return found

    async def take(stream, count: int) -> list[bytes]:
        taken: list[bytes] = []

        async def read() -> None:
            async for piece in stream.events():
                taken.append(piece)
                if piece.endswith(b"\n\n") and len(events(taken)) == count:
                    return

        await asyncio.wait_for(read(), 30)
        return taken

    async def scene(feed: Feed) -> None:
        feed.poll()
        late, prompt = feed.open_stream("127.0.0.1"), feed.open_stream("127.0.0.1")
        assert feed.streams() == 2
        first = events(await take(prompt, 1))
        assert [kind for kind, _ in first] == ["history"] and first[0][1]["last"]["kind"] == "frame"
        assert feed.since(prompt.sent) == []
        feed.poll()
        feed.poll()
        assert [kind for kind, _ in events(await take(prompt, 2))] == ["frame", "frame"]  # nothing twice, none lost
        assert feed.since(-1) == feed.since(-1) and feed.since(-1)[0] is feed.since(-1)[0]  # one history, shared
        for _ in range(KEPT - 1):
            feed.poll()
        caught_up = events(await take(prompt, KEPT - 1))  # a little behind: each frame kept for it
        assert [kind for kind, _ in caught_up] == ["frame"] * (KEPT - 1) and prompt.sent == KEPT + 2
        (kind, _), *rest = events(await take(late, 1))
        assert kind == "history" and not rest and late.sent == KEPT + 2
        for _ in range(KEPT + 1):
            feed.poll()
        (kind, _), *rest = events(await take(late, 1))  # too far behind: the history again, not KEPT frames
        assert kind == "history" and not rest and late.sent == 2 * KEPT + 3
        late.close()
        prompt.close()
        assert feed.streams() == 0 and not feed._bells

    with Client(endpoint) as client:
        feed = Feed(client)  # polled by hand here: its thread is never started
        asyncio.run(scene(feed))
        feed.stop()


def test_event_streams_are_capped_per_client_and_in_all(brokers, workers) -> None:
    broker: Broker = brokers("router", ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint("router", "tcp")
    workers(endpoint, "router")

    async def scene(feed: Feed) -> None:
        feed.poll()
        mine = [feed.open_stream("127.0.0.1") for _ in range(3)]
        with pytest.raises(TooManyStreams, match=r"from 127\.0\.0\.1"):
            feed.open_stream("127.0.0.1")
        others = [feed.open_stream(f"127.0.0.{n}") for n in (2, 2, 3)]
        with pytest.raises(TooManyStreams, match="6 event streams are open"):
            feed.open_stream("127.0.0.4")
        mine.pop().close()
        mine.append(feed.open_stream("127.0.0.4"))  # a place freed is a place again
        for stream in mine + others:
            stream.close()
            stream.close()  # once only
        assert feed.streams() == 0

    with Client(endpoint) as client:
        feed = Feed(client, max_streams=6, max_streams_per_client=3)
        asyncio.run(scene(feed))
        feed.stop()


def rss(pid: int) -> int:
    """The resident memory of process ``pid``, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def open_stream(url: str, source: str) -> tuple[socket.socket, int]:
    """A raw connection from the loopback address ``source`` asking for the event stream, never reading beyond
    its status line: the socket and the status."""
    parts = urlsplit(url)
    connection = socket.create_connection((parts.hostname, parts.port), timeout=30, source_address=(source, 0))
    connection.sendall(f"GET /events HTTP/1.1\r\nHost: {parts.netloc}\r\n\r\n".encode())
    status = b""
    while b"\r\n" not in status and len(status) < 100:
        piece = connection.recv(1)
        assert piece, "the dashboard closed the connection"
        status += piece
    return connection, int(status.split()[1])


def test_a_local_process_cannot_hold_more_than_its_share_of_event_streams(processes, broker: str) -> None:
    url = start_dashboard(processes, broker, "--interval", "0.2")
    dashboard = processes[-1]
    frame_where(url, lambda f: f["workers_total"] == 1, "a first frame")
    before = rss(dashboard.pid)
    opened: list[socket.socket] = []
    try:
        answers: dict[str, list[int]] = {}
        for n in range(1, 11):  # 10 loopback addresses, 12 streams from each
            source = f"127.0.0.{n}"
            for _ in range(12):
                connection, status = open_stream(url, source)
                opened.append(connection)
                answers.setdefault(source, []).append(status)
        assert answers["127.0.0.1"] == [200] * MAX_STREAMS_PER_CLIENT + [503] * (12 - MAX_STREAMS_PER_CLIENT)
        assert sum(a.count(200) for a in answers.values()) == MAX_STREAMS
        assert all(set(a) <= {200, 503} for a in answers.values())
        assert frame_where(url, lambda f: True, "an honest /api/status while the streams are open")
        assert rss(dashboard.pid) - before < 64 * 2**20  # nothing per stream grows while nobody reads
    finally:
        for connection in opened:
            connection.close()

    def place_freed() -> bool:
        connection, status = open_stream(url, "127.0.0.1")
        connection.close()
        return status == 200

    eventually(place_freed, 30, "a place freed when the streams closed")
    assert [kind for kind, _ in read_events(url, 2)] == ["history", "frame"]


def test_the_caps_on_event_streams_are_flags(processes, broker: str) -> None:
    assert (cli_dashboard.MAX_STREAMS, cli_dashboard.MAX_STREAMS_PER_CLIENT) == (MAX_STREAMS, MAX_STREAMS_PER_CLIENT)
    url = start_dashboard(processes, broker, "--streams", "3", "--streams-per-client", "2")
    frame_where(url, lambda f: f["workers_total"] == 1, "a first frame")
    opened = [open_stream(url, source) for source in ("127.0.0.1", "127.0.0.1", "127.0.0.1", "127.0.0.2", "127.0.0.3")]
    try:
        assert [status for _, status in opened] == [200, 200, 503, 200, 503]
    finally:
        for connection, _ in opened:
            connection.close()
    for flags in (["--streams", "0"], ["--streams-per-client", "-1"], ["--streams", "nan"]):
        answer = run("dashboard", "--connect", broker, "--http", "127.0.0.1:0", *flags)
        assert answer.returncode == 2 and "at least 1" in answer.stderr.splitlines()[-1], (flags, answer.stderr)


HICCUP = 1.0  # seconds of one pause of the dashboard's process


class _PausedFramer(Framer):
    """A framer that pauses once while building its fifth frame (as a process waiting for the GIL does)."""

    def frame(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self.made = getattr(self, "made", 0) + 1
        if self.made == 5:
            time.sleep(HICCUP)
        return super().frame(*args, **kwargs)


class _PausedClient(Client):
    """A client whose tenth status report comes back after a pause of this process."""

    def status(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self.asked = getattr(self, "asked", 0) + 1
        report = super().status(*args, **kwargs)
        if self.asked == 10:
            time.sleep(HICCUP)
        return report


def test_one_slow_poll_does_not_stop_the_frames(brokers, workers) -> None:
    broker: Broker = brokers("router", ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint("router", "tcp")
    workers(endpoint, "router")
    with _PausedClient(endpoint) as client:
        feed = Feed(client, _PausedFramer(), interval=0.1)
        feed.start()
        try:
            seen: list[dict[str, Any]] = []

            def frames(count: int) -> bool:
                latest = feed.latest()
                if latest is not None and latest["kind"] == "frame" and (not seen or seen[-1] is not latest):
                    seen.append(latest)
                return len(seen) >= count

            # one pause while framing (the 5th) and one in a round trip (the 10th): the frames go on at the
            # interval's pace (before, each pause alone meant 50 times it without a frame: 50 s)
            eventually(lambda: frames(12), 120, "twelve frames, past both pauses")
            assert max(frame["every"] for frame in seen) < SHARE * HICCUP / 2, [f["every"] for f in seen]
        finally:
            feed.close()


def test_a_broker_with_many_services_is_asked_less_often(brokers, workers) -> None:
    broker: Broker = brokers("router", ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint("router", "tcp")
    workers(endpoint, "router")
    askers = [Client(endpoint) for _ in range(10)]
    try:
        for n, asker in enumerate(askers):  # a request queued for each service keeps it in the report
            for m in range(150):
                asker.submit(f"waiting-{n}-{m}", b"")
        eventually(lambda: askers[0].status()["broker"]["service_count"] == 1501, 60, "1,500 services queued")
        with Client(endpoint) as client:
            feed = Feed(client, interval=0.2)
            feed.start()
            try:
                frame = eventually(lambda: (f := feed.latest()) and f["kind"] == "frame" and f, 60, "a frame")
                assert frame["services_total"] == 1501 and len(frame["services"]) == MAX_SERVICES
                assert frame["broker"]["services"] == 1501 and frame["broker"]["workers"] == 1  # the totals box
                # building, sending and reading a report this large takes well over 1/50 of the interval
                eventually(lambda: feed.every > 0.2, 60, "the feed to slow down")
            finally:
                feed.close()
    finally:
        for asker in askers:
            asker.close()

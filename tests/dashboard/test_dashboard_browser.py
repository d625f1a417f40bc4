"""The dashboard's page in a real browser: Debian's chromium driven by Playwright (the system browser, no
download), against a broker, workers and a dashboard in processes of their own and a client load.

It checks what an operator relies on: the numbers shown change with the load and, once it stops, are those of
``mmi.status``; a worker killed with SIGKILL leaves the page; a flow limit changed on the page is in force
(``mmi.flow`` says so, and the replies' queue times grow as it holds tasks back); the page raises no script
error and breaks no rule of its Content-Security-Policy. ``.ci/run`` installs chromium, so in CI this runs,
never skipped.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dashboard_harness import start_broker, start_dashboard, start_worker
from waiting import eventually

from generaldomo import Client
from generaldomo.sansio.broker.services.stats import RECENT

CHROMIUM = os.environ.get("GENERALDOMO_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
# Chromium as root on a machine without a network or a GPU (see .ci/run)
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WORK = "0.2"  # seconds each task takes
CALLERS = 3  # client threads, each with one request at a time

if os.environ.get("CI"):  # CI installs playwright and chromium: this runs there, never skipped
    from playwright.sync_api import Page, sync_playwright

    assert os.path.exists(CHROMIUM), f"CI must install chromium ({CHROMIUM})"
else:
    sync_api = pytest.importorskip("playwright.sync_api")
    Page, sync_playwright = sync_api.Page, sync_api.sync_playwright
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no chromium at {CHROMIUM} (apt install chromium)", allow_module_level=True)

pytestmark = pytest.mark.slow


class Load:
    """``CALLERS`` threads sending echo requests one after the other, each reply's queue time kept."""

    def __init__(self, endpoint: str) -> None:
        self.client = Client(endpoint)
        self.queued: list[tuple[float, float]] = []  # (when the reply came, its queue time)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> Load:
        self._stop.clear()
        self._threads = [threading.Thread(target=self._call, daemon=True) for _ in range(CALLERS)]
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)
            assert not thread.is_alive()

    def _call(self) -> None:
        while not self._stop.is_set():
            reply = self.client.request("echo", b"task", timeout=60)
            assert reply.queued is not None
            self.queued.append((time.monotonic(), reply.queued))

    def since(self, moment: float) -> list[float]:
        return [queued for when, queued in self.queued if when > moment]


@pytest.fixture
def page() -> Iterator[Page]:
    with sync_playwright() as playwright:  # a fresh, empty profile of its own
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            opened = browser.new_page(viewport={"width": 1400, "height": 1000})
            problems: list[str] = []
            opened.on("pageerror", lambda error: problems.append(f"script error: {error}"))
            opened.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            yield opened
            assert not problems, problems  # e.g. a script error, or a Content-Security-Policy violation
        finally:
            browser.close()


def shown(page: Page, selector: str) -> str | None:
    """The ``data-value`` of the element ``selector`` names (None: not on the page)."""
    found = page.query_selector(selector)
    return None if found is None else found.get_attribute("data-value")


def cell(page: Page, service: str, field: str) -> str | None:
    return shown(page, f'#services tr[data-service="{service}"] td[data-field="{field}"]')


def number(text: str | None) -> float | None:
    return None if text in (None, "") else float(text)  # type: ignore[arg-type]


def echo(client: Client) -> dict[str, Any]:
    return next(s for s in client.status()["services"] if s["name"] == "echo")


def test_the_page_follows_the_broker_and_changes_its_flow(page: Page, processes) -> None:
    endpoint = start_broker(processes)
    workers = [start_worker(processes, endpoint, "--sleep", WORK) for _ in range(3)]
    url = start_dashboard(processes, endpoint, "--allow-control")
    page.goto(url)
    page.wait_for_selector('#state[data-state="live"]', timeout=30_000)
    eventually(lambda: len(page.query_selector_all("#workers tbody tr")) == 3, 30, "three workers on the page")
    pids = {row.get_attribute("data-value") for row in page.query_selector_all('#workers td[data-field="pid"]')}
    assert pids == {str(w.pid) for w in workers}

    load = Load(endpoint).start()
    with load.client as client:
        # the numbers shown move with the load
        first = eventually(lambda: number(cell(page, "echo", "completed")), 30, "completions on the page")
        eventually(lambda: number(cell(page, "echo", "completed")) > first + 10, 30, "more completions shown")
        eventually(lambda: (number(cell(page, "echo", "in_flight")) or 0) > 0, 30, "tasks in flight shown")
        eventually(lambda: (number(cell(page, "echo", "observed_rate")) or 0) > 1, 30, "a completion rate shown")
        eventually(lambda: page.query_selector('[data-chart="echo"] canvas') is not None, 30, "a chart of echo")
        load.stop()

        # once the load stops, they are mmi.status's
        def settled() -> bool:
            status = echo(client)
            return (
                all(
                    number(cell(page, "echo", field)) == value
                    for field, value in [
                        ("completed", status["completed"]),
                        ("workers", status["workers"]),
                        ("in_flight", 0),
                        ("queued", 0),
                        ("queue_p50", status["queue_time"]["p50"]),
                        ("service_p99", status["service_time"]["p99"]),
                    ]
                )
                and number(shown(page, '#counters-totals li[data-counter="completed"]')) == status["completed"]
            )

        eventually(settled, 30, "the page to show mmi.status's numbers")
        assert number(cell(page, "echo", "completed")) == len(load.queued)

        # a worker killed disappears from the page
        killed = workers[0]
        killed.send_signal(signal.SIGKILL)
        killed.wait(10)
        gone = f'#workers td[data-field="pid"][data-value="{killed.pid}"]'
        eventually(lambda: page.query_selector(gone) is None, 30, "the killed worker to leave the page")
        eventually(lambda: number(cell(page, "echo", "workers")) == 2, 30, "two workers shown")
        assert len(page.query_selector_all("#workers tbody tr")) == 2

        # a flow limit changed on the page is in force
        assert client.flow("echo")["concurrency"] is None
        before = time.monotonic()
        load.start()
        eventually(lambda: len(load.since(before)) >= 30, 60, "replies with two workers")
        page.click('button[data-edit="echo"]')
        page.fill("#limit-concurrency", "1")
        page.click("#control-apply")
        page.wait_for_selector('#control-result[data-outcome="ok"]', timeout=30_000)
        changed = time.monotonic()
        assert client.flow("echo")["concurrency"] == 1
        eventually(lambda: number(cell(page, "echo", "cap")) == 1, 30, "the cap of 1 shown")
        assert "1 at once" in page.inner_text('#services tr[data-service="echo"] td[data-field="limits"]')
        eventually(lambda: len(load.since(changed + 2)) >= 15, 60, "replies under the new limit")
        load.stop()
        free = statistics.median(queued for when, queued in load.queued if before < when < changed)
        held = statistics.median(load.since(changed + 2))
        # three callers, one task at a time of 0.2 s: each waits for the other two (about 0.4 s)
        assert held > max(0.25, 2 * free), (free, held)
        assert echo(client)["flow"]["concurrency"] == 1


# Every uPlot chart the page makes, kept in window.__plots (the test's own hook: the page has none)
RECORD_PLOTS = """
(() => {
  let wrapped;
  Object.defineProperty(window, "uPlot", {
    configurable: true,
    get: () => wrapped,
    set: (real) => {
      wrapped = function (...args) {
        const made = new real(...args);
        (window.__plots = window.__plots || []).push(made);
        return made;
      };
      Object.assign(wrapped, real);
    },
  });
})();
"""

# Keeps the frame the page last drew (a "frame" message, or the last one of a "history"), for a check made with what
# the page shows: the caption and the frame it was drawn from are read in one script, between two messages
RECORD_FRAMES = """
(() => {
  const Real = window.EventSource;
  window.EventSource = class extends Real {
    constructor(...args) {
      super(...args);  // listened to before the page's own listeners: kept before the page draws it
      this.addEventListener("frame", (event) => { window.__frame = JSON.parse(event.data); });
      this.addEventListener("history", (event) => {
        const last = JSON.parse(event.data).last;
        if (last && last.kind === "frame") window.__frame = last;
      });
    }
  };
})();
"""

# Each chart's name and caption (pairs: a service may be named __proto__), and the frame the page drew them from
CAPTIONS = """
() => ({
  captions: [...document.querySelectorAll(".chart")].map(
    (chart) => [chart.dataset.chart, chart.querySelector(".caption").textContent]),
  frame: JSON.stringify(window.__frame),
})
"""

# What is wrong with the charts on the page now: a chart wider than its card, or two time labels that overlap
LAYOUT_PROBLEMS = """
() => {
  const problems = [];
  for (const panel of document.querySelectorAll(".chart")) {
    const card = panel.getBoundingClientRect();
    for (const canvas of panel.querySelectorAll("canvas")) {
      const box = canvas.getBoundingClientRect();
      if (box.left < card.left - 0.5 || box.right > card.right + 0.5) {
        problems.push(panel.dataset.chart + ": a chart " + box.width + " px wide in a card of " + card.width);
      }
    }
  }
  for (const u of window.__plots || []) {
    if (!u.root.isConnected) continue;
    const name = u.root.closest(".chart").dataset.chart, axis = u.axes[0];
    u.ctx.save();
    u.ctx.font = axis.font[0];
    const ratio = window.devicePixelRatio || 1, left = u.bbox.left / ratio, wide = u.over.parentNode.clientWidth;
    const labels = [];
    (axis._values || []).forEach((text, k) => {
      if (text === null || text === undefined || text === "") return;
      const x = left + u.valToPos(axis._splits[k], "x");
      const w = Math.max(...String(text).split("\\n").map((line) => u.ctx.measureText(line).width)) / ratio;
      labels.push([x - w / 2, x + w / 2, String(text)]);
    });
    u.ctx.restore();
    labels.sort((a, b) => a[0] - b[0]);
    for (let k = 1; k < labels.length; k++) {
      if (labels[k][0] < labels[k - 1][1] + 2) {
        const pair = JSON.stringify([labels[k - 1][2], labels[k][2]]);
        problems.push(name + ": time labels overlap: " + pair);
      }
    }
    if (!labels.length) problems.push(name + ": no time labels");
  }
  return problems;
}
"""


def test_the_charts_fit_their_cards_and_read_well_with_idle_sparse_and_busy_services(
    page: Page, processes, tmp_path
) -> None:
    endpoint = start_broker(processes)
    for _ in range(2):
        start_worker(processes, endpoint, "--service", "busy", "--sleep", "0.05")
    url = start_dashboard(processes, endpoint, "--interval", "0.5", "--allow-control")  # the form in the picture
    page.add_init_script(RECORD_PLOTS)
    page.add_init_script(RECORD_FRAMES)
    page.goto(url)
    page.wait_for_selector('#state[data-state="live"]', timeout=30_000)
    with Client(endpoint) as client:
        client.flow("busy", concurrency=1)  # a queue forms: both parts of the bars, and a cap
        stop = threading.Event()

        def call(service: str, pause: float) -> None:
            with Client(endpoint, fail_unknown=False) as caller:  # its worker may still be starting
                while not stop.is_set():
                    caller.request(service, b"task", timeout=60)
                    stop.wait(pause)

        callers = [threading.Thread(target=call, args=("busy", 0), daemon=True) for _ in range(3)]
        # services that appear while the page is open, one that never works, names a plain object has
        start_worker(processes, endpoint, "--service", "sparse", "--sleep", "0.3")
        start_worker(processes, endpoint, "--service", "idle")
        for name in ("constructor", "__proto__"):
            start_worker(processes, endpoint, "--service", name)
        callers += [threading.Thread(target=call, args=("sparse", 4.0), daemon=True)]
        callers += [
            threading.Thread(target=call, args=(name, 6.0), daemon=True) for name in ("constructor", "__proto__")
        ]
        for caller in callers:
            caller.start()
        try:
            names = ["__proto__", "busy", "constructor", "idle", "sparse"]
            eventually(lambda: len(page.query_selector_all("#services tbody tr")) == 5, 30, "five services shown")
            for name in names:  # chart them all (the first four are charted unless one chooses): a click in the
                # page itself, as the table is drawn again with each frame
                page.evaluate(
                    "(name) => { const box = [...document.querySelectorAll('#services tbody tr')]"
                    ".find((row) => row.dataset.service === name).querySelector('input');"
                    " if (!box.checked) box.click(); }",
                    name,
                )
            eventually(lambda: len(page.query_selector_all(".chart")) == 5, 30, "a chart per service")
            eventually(lambda: (number(cell(page, "sparse", "completed")) or 0) >= 2, 60, "sparse completions")
            eventually(lambda: (number(cell(page, "constructor", "completed")) or 0) >= 1, 60, "one constructor task")
            for width in (1400, 900, 1920):
                size = {"width": width, "height": 1000}
                page.set_viewport_size(size)
                page.wait_for_timeout(1500)  # a few frames at this size
                assert page.evaluate(LAYOUT_PROBLEMS) == [], size
            shown = page.evaluate(CAPTIONS)
            captions, drawn = dict(shown["captions"]), json.loads(shown["frame"])
            assert set(captions) == set(names)
            for name, caption in captions.items():
                assert caption.startswith(f"{name}: ") and "function" not in caption and "[object" not in caption
                missed = drawn["bars_missed"].get(name)
                if missed is None:  # every completion since the report before is drawn
                    assert "completions not drawn" not in caption, caption
                else:  # more completed between two reports than a report lists (reports come less often when the
                    # broker answers slowly): every one it listed is drawn, and the caption says how many were not
                    assert len(drawn["bars"][name]) == RECENT, (caption, drawn["bars"].get(name))
                    assert caption.endswith(f"last second: {missed} completions not drawn"), caption
            page.set_viewport_size({"width": 1400, "height": 1000})
            page.wait_for_timeout(1500)
            assert page.evaluate(LAYOUT_PROBLEMS) == []
            shot = Path(os.environ.get("GENERALDOMO_SCREENSHOT") or tmp_path / "dashboard.png")
            page.screenshot(path=str(shot), full_page=True)
            assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        finally:
            stop.set()
            for caller in callers:
                caller.join(60)


def test_the_page_shows_a_broker_pair_and_nothing_for_a_broker_alone(page: Page, processes, tmp_path: Path) -> None:
    alone = start_broker(processes)
    page.goto(start_dashboard(processes, alone))
    page.wait_for_selector('#state[data-state="live"]', timeout=30_000)
    assert page.text_content("#broker-pair") == "\u2013"  # the dash of nothing to show
    pair = [f"ipc://{tmp_path}/{name}.sock" for name in ("primary", "backup")]
    flags = ["--ha-role", "primary", "--ha-bind", pair[0], "--ha-peer", pair[1], "--ha-plaintext"]
    primary = start_broker(processes, *flags)
    page.goto(start_dashboard(processes, primary))
    page.wait_for_selector('#broker-pair[data-state="primary"]', timeout=30_000)  # undecided: its peer never heard
    assert page.text_content("#broker-pair") == "primary, primary; peer never heard"
    flags = ["--ha-role", "backup", "--ha-bind", pair[1], "--ha-peer", pair[0], "--ha-plaintext"]
    start_broker(processes, *flags)
    page.wait_for_selector('#broker-pair[data-state="active"]', timeout=30_000)  # it heard the backup
    eventually(
        lambda: "primary, active; peer passive, heard" in (page.text_content("#broker-pair") or ""),
        30,
        "the backup passive on the page",
    )
    eventually(  # the backup reports what it applied: the lag, and what the replicated state holds
        lambda: (
            "; replication lag 0 records, 0.0 s; replicated 0 requests, 0 answers"
            in (page.text_content("#broker-pair") or "")
        ),
        30,
        "the replication lag on the page",
    )

"""Take the README's screenshot of the dashboard: ``python tools/dashboard_screenshot.py [PNG]``.

Runs a flow-control experiment like the bench's timeline part, live (bursts of 10 requests every 3 s to ``nlu``,
limited to 5 dispatches a second and 10 in flight, 2.5 s of work each) beside a service with an adaptive cap
(``ocr``: three callers, 0.3 s of work, cap between 1 and 8), serves ``generaldomo dashboard`` on them, and
has Debian's chromium (through Playwright) take a picture of the page (default ``docs/dashboard.png``).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

from generaldomo import Broker, Client, ClientClosed, Worker

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"]
CHROMIUM_FLAGS += ["--disable-background-networking", "--disable-component-update", "--disable-sync"]
SECONDS = 30.0  # of load before the picture


def sleeper(seconds: float):  # type: ignore[no-untyped-def]
    def work(payload: bytes | tuple[bytes, ...]) -> bytes | tuple[bytes, ...]:
        time.sleep(seconds)
        return payload

    return work


def main(out: Path) -> None:
    broker = Broker("router", ["tcp://127.0.0.1:*"]).start()
    endpoint = broker.endpoint("router", "tcp")
    workers = [Worker(endpoint, "nlu", sleeper(2.5)) for _ in range(10)]
    workers += [Worker(endpoint, "ocr", sleeper(0.3)) for _ in range(4)]
    for worker in workers:
        threading.Thread(target=worker.serve, daemon=True).start()
    stop = threading.Event()
    client = Client(endpoint)
    client.flow("nlu", rate=5, burst=1, concurrency=10)
    client.flow("ocr", adaptive={"min": 1, "max": 8})

    def bursts() -> None:
        while not stop.is_set():
            for n in range(10):
                client.submit("nlu", b"doc-%d" % n)
            stop.wait(3.0)

    def caller() -> None:
        with contextlib.suppress(ClientClosed):  # at the end
            while not stop.is_set():
                client.request("ocr", b"page", timeout=60)

    threads = [threading.Thread(target=bursts, daemon=True)] + [
        threading.Thread(target=caller, daemon=True) for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    command = [sys.executable, "-m", "generaldomo", "dashboard", "--connect", endpoint, "--http", "127.0.0.1:0"]
    dashboard = subprocess.Popen([*command, "--allow-control"], stdout=subprocess.PIPE, text=True)
    try:
        assert dashboard.stdout is not None
        url = dashboard.stdout.readline().split()[2]
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_FLAGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(url)
            page.wait_for_timeout(SECONDS * 1000)
            page.screenshot(path=str(out), full_page=True)
            browser.close()
    finally:
        dashboard.terminate()
        dashboard.wait(10)
        stop.set()
        client.close()
        for worker in workers:
            worker.stop()
        broker.stop()
    print(f"wrote {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "dashboard.png")

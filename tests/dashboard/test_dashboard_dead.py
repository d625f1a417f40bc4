"""The dashboard's dead letters in a real browser (Debian's chromium driven by Playwright, as
``test_dashboard_browser.py``): none, one service's, and more services than the report names."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest
from dashboard_harness import start_broker, start_dashboard
from waiting import eventually, served

from generaldomo import Client, RequestFailed
from generaldomo.sansio.broker.report import DEAD_SERVICES

CHROMIUM = os.environ.get("GENERALDOMO_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
]

if os.environ.get("CI"):  # CI installs playwright and chromium: this runs there, never skipped
    from playwright.sync_api import Page, sync_playwright

    assert os.path.exists(CHROMIUM), f"CI must install chromium ({CHROMIUM})"
else:
    sync_api = pytest.importorskip("playwright.sync_api")
    Page, sync_playwright = sync_api.Page, sync_api.sync_playwright
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no chromium at {CHROMIUM} (apt install chromium)", allow_module_level=True)

pytestmark = pytest.mark.slow


@pytest.fixture
def page() -> Iterator[Page]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            opened = browser.new_page(viewport={"width": 1400, "height": 1000})
            problems: list[str] = []
            opened.on("pageerror", lambda error: problems.append(f"script error: {error}"))
            opened.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            yield opened
            assert not problems, problems
        finally:
            browser.close()


def poison(payload: bytes) -> bytes:
    raise ValueError("cannot take " + payload.decode())


def listed(page: Page) -> dict[str, str | None]:
    """The services the page lists with dead letters, and their counts."""
    return {
        item.get_attribute("data-dead-service") or "": item.get_attribute("data-value")
        for item in page.query_selector_all("#dead-services li[data-dead-service]")
    }


def total(page: Page) -> str | None:
    card = page.query_selector('#totals [data-field="dead_letters"]')
    return None if card is None else card.get_attribute("data-value")


def test_the_page_shows_none_one_and_many_services_with_dead_letters(page: Page, processes, workers) -> None:
    endpoint = start_broker(processes)
    url = start_dashboard(processes, endpoint, "--interval", "0.2")
    page.goto(url)
    eventually(lambda: total(page) == "0", 60, "the card of no dead letters")
    assert page.query_selector("#dead-services li.none") is not None and listed(page) == {}
    many = DEAD_SERVICES + 2
    with Client(endpoint) as client:
        for n in range(many):
            workers(endpoint, "router", f"poison-{n:02d}", poison)
            served(client, f"poison-{n:02d}")
        with pytest.raises(RequestFailed):
            client.request("poison-00", b"one", timeout=60)
        eventually(lambda: listed(page) == {"poison-00": "1"}, 60, "one service's dead letter")
        assert total(page) == "1" and page.inner_text("#dead-count") == ""
        for n in range(many):
            with pytest.raises(RequestFailed):
                client.request(f"poison-{n:02d}", b"more", timeout=60)
        eventually(lambda: total(page) == str(many + 1), 60, "every dead letter counted")
        shown = listed(page)
        assert len(shown) == DEAD_SERVICES and shown["poison-00"] == "2"  # the most first
        assert page.inner_text("#dead-count") == f"({DEAD_SERVICES} of {many} services)"

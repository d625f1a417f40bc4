"""The dashboard's dead letters in a real browser (Debian's chromium driven by Playwright, as
``test_dashboard_browser.py``): none, one service's, and more services than the report names."""

from __future__ import annotations

import pytest
from dashboard_harness import start_broker, start_dashboard
from test_dashboard_browser import Page, page  # noqa: F401 (the page fixture: chromium, or the module is skipped)
from waiting import eventually, served

from generaldomo import Client, RequestFailed
from generaldomo.sansio.broker.report import DEAD_SERVICES

pytestmark = pytest.mark.slow


def poison(payload: bytes) -> bytes:
    raise ValueError("cannot take " + payload.decode())


def listed(shown: Page) -> dict[str, str | None]:
    """The services the page lists with dead letters, and their counts."""
    return {
        item.get_attribute("data-dead-service") or "": item.get_attribute("data-value")
        for item in shown.query_selector_all("#dead-services li[data-dead-service]")
    }


def total(shown: Page) -> str | None:
    card = shown.query_selector('#totals [data-field="dead_letters"]')
    return None if card is None else card.get_attribute("data-value")


def test_the_page_shows_none_one_and_many_services_with_dead_letters(
    page: Page,  # noqa: F811 (the fixture imported above)
    processes,
    workers,
) -> None:
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

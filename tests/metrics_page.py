"""A broker's Prometheus metrics page, read over loopback HTTP."""

from __future__ import annotations

import urllib.request

from waiting import eventually


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return response.read().decode()


def wait_for(port: int, needle: str) -> str:
    """The metrics page once it shows ``needle``."""

    def page_with_needle() -> str:
        text = scrape(port)
        return text if needle in text else ""

    return eventually(page_with_needle, what=f"{needle!r} in the metrics")

"""Bounded waiting for conditions that other threads and processes bring about."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from generaldomo import Client

T = TypeVar("T")


def eventually(condition: Callable[[], T], timeout: float = 20.0, what: str = "the condition") -> T:
    """Poll ``condition`` until it returns something true, and return that; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.01)
    return result


def served(client: Client, service: str, timeout: float = 60.0) -> None:
    """Wait until the broker ``client`` talks to answers ``mmi.service`` 200 for ``service`` (a worker of it is
    registered there), so that a request sent next is not answered 404 by a broker that has not heard the
    worker's READY yet; fail after ``timeout`` seconds."""

    def known() -> bool:
        answer = client.request("mmi.service", service.encode(), timeout=timeout, fail_unknown=False)
        return bytes(answer.payload) == b"200"

    eventually(known, timeout, f"a worker of {service!r} registered at the broker")


def served_at(endpoint: str, service: str, transport: str = "router", timeout: float = 60.0, **kwargs: Any) -> None:
    """:func:`served` through a client of its own to the broker at ``endpoint`` (``kwargs``: its keys)."""
    with Client(endpoint, transport, **kwargs) as client:
        served(client, service, timeout)

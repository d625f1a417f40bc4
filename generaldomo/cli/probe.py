"""Asking a broker directly, on a connection of one's own: is anything there, and what does MMI say.

This module owns the CLI's diagnostics: a client HEARTBEAT (answered by any generaldomo broker or bridge, with
its instance) and one management request (``mmi.service``, ``mmi.status``), each bounded in time, each on a
fresh connection (with the command's CURVE settings, if any) that is closed afterwards. Every frame is built
and read by :mod:`generaldomo.sansio.wire.protocol`.
It knows nothing of the client library's session.
"""

from __future__ import annotations

import difflib
import math
import os
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from generaldomo.io.peer.connection import Curve, connect
from generaldomo.io.transport import Transport, draft_available
from generaldomo.sansio.broker.report import StatusQuery
from generaldomo.sansio.wire import protocol, wirejson

__all__ = [
    "BUSIEST",
    "TIMEOUT",
    "answers_over",
    "ask",
    "broker_instance",
    "management",
    "nearest",
    "nobody_answered",
    "served",
    "services",
    "transport_hint",
    "unserved",
]

T = TypeVar("T")
TIMEOUT = 3.0  # seconds a diagnostic question waits for its answer, unless told otherwise
_BURST = 100  # messages read per wake-up, at most
BUSIEST = StatusQuery(limit=1000, order="busy")  # the services a typo is looked for among


def ask(
    endpoint: str,
    transport: str,
    frames: Sequence[bytes],
    answer: Callable[[list[bytes]], T | None],
    timeout: float,
    curve: Curve | None = None,
) -> T | None:
    """Send ``frames``; the first non-None ``answer(reply)`` within ``timeout`` seconds, else None."""
    connection = connect(endpoint, transport, curve=curve)
    poller = connection.adopt()
    deadline = time.monotonic() + timeout
    try:
        connection.send(frames)
        while (left := deadline - time.monotonic()) > 0:
            poller.poll(math.ceil(left * 1000))
            connection.flush()
            for _ in range(_BURST):
                reply = connection.recv()
                if reply is None:
                    break
                found = answer(reply)
                if found is not None:
                    return found
        return None
    finally:
        connection.close()


def broker_instance(endpoint: str, transport: str, timeout: float, curve: Curve | None = None) -> bytes | None:
    """The instance of the broker that answers a client HEARTBEAT at ``endpoint``, or None if none does."""
    return ask(endpoint, transport, protocol.gdp_client_heartbeat(), protocol.parse_broker_instance, timeout, curve)


def management(
    endpoint: str, transport: str, service: str, body: Sequence[bytes], timeout: float, curve: Curve | None = None
) -> tuple[bytes, tuple[bytes, ...]] | None:
    """``(status, body)`` of the final answer to a management request (``mmi.*``), or None if none came."""
    request_id = os.urandom(8)

    def final(frames: list[bytes]) -> tuple[bytes, tuple[bytes, ...]] | None:
        parsed = protocol.parse_client_reply(frames)
        if parsed is None or parsed[0] != request_id or parsed[1] is None:
            return None
        return parsed[1], parsed[3]

    return ask(endpoint, transport, protocol.gdp_request(request_id, service.encode(), body), final, timeout, curve)


def served(endpoint: str, transport: str, service: str, timeout: float, curve: Curve | None = None) -> bool | None:
    """What ``mmi.service`` says: True (a worker serves it), False (404), None (no answer)."""
    answer = management(endpoint, transport, "mmi.service", [service.encode()], timeout, curve)
    if answer is None:
        return None
    status, body = answer
    return status == protocol.OK and body[:1] == (protocol.OK,)


def services(endpoint: str, transport: str, timeout: float, curve: Curve | None = None) -> list[str]:
    """The services with workers in the broker's ``mmi.status`` report, those with the most first (a page of
    them; empty if it gives none)."""
    answer = management(endpoint, transport, "mmi.status", [BUSIEST.to_json()], timeout, curve)
    if answer is None or answer[0] != protocol.OK or not answer[1]:
        return []
    try:
        report = wirejson.loads(answer[1][0], None)["services"]
        return sorted(str(service["name"]) for service in report if service["workers"])
    except (ValueError, KeyError, TypeError):
        return []


def nearest(name: str, names: Sequence[str]) -> str | None:
    """The name in ``names`` closest to ``name`` (a likely typo), or None if none is close."""
    close = difflib.get_close_matches(name, names, n=1)
    return close[0] if close else None


def answers_over(endpoint: str, transport: str, timeout: float = TIMEOUT, curve: Curve | None = None) -> bool:
    """Whether a broker answers a heartbeat at ``endpoint`` over ``transport`` (False without draft sockets)."""
    if transport == Transport.SERVER and not draft_available():
        return False
    return broker_instance(endpoint, transport, timeout, curve) is not None


def transport_hint(endpoint: str, transport: str, timeout: float = TIMEOUT, curve: Curve | None = None) -> str:
    """What to add to "no broker answered over ``transport``": whether one answers over the other transport."""
    other = next(t.value for t in Transport if t.value != transport)
    if other == Transport.SERVER and not draft_available():
        return " (is one running there?)"
    if broker_instance(endpoint, other, timeout, curve) is not None:
        return f"; a broker answers there over {other}: use --transport {other}"
    return f" (is one running there? if it serves the other transport, try --transport {other})"


def nobody_answered(
    endpoint: str, transport: str, waited: float | Callable[[], float], curve: Curve | None = None
) -> str:
    """The message for a broker that did not answer within ``waited`` seconds (or the seconds ``waited()`` says
    once the hint is known, so that the message states the real time), with :func:`transport_hint`."""
    hint = transport_hint(endpoint, transport, curve=curve)
    seconds = waited() if callable(waited) else waited
    return f"no broker answered at {endpoint} over {transport} within {seconds:.1f} s{hint}"


def unserved(endpoint: str, transport: str, service: str, curve: Curve | None = None) -> str:
    """What to say of a service no worker serves: the services that have workers, and the nearest name."""
    known = services(endpoint, transport, TIMEOUT, curve)
    nearest_name = nearest(service, known)
    hint = f"; did you mean {nearest_name!r}?" if nearest_name else ""
    listed = ", ".join(known) or "none"
    return f"no worker serves {service!r} at {endpoint} (mmi.service says 404); services with workers: {listed}{hint}"

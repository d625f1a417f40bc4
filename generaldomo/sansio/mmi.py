"""The broker's management interface: requests for ``mmi.*`` services, answered from the core's state.

This module owns what each management service means: ``mmi.service`` (RFC 8), ``mmi.status`` (a JSON report
of the broker, its services and workers) and ``mmi.flow`` (read or change a service's flow limits). It reads
the core's state and calls its public methods; it knows nothing of sockets or clocks (``now`` is given).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from generaldomo.sansio import protocol
from generaldomo.sansio.resolver import ResolveError

if TYPE_CHECKING:
    from generaldomo.sansio.core import BrokerCore, Send

Answer = tuple[bytes, list[bytes], list["Send"]]  # status, body, messages the change caused


class ManagementError(ValueError):
    """A management request the broker cannot act on; its text goes back to the client."""


def answer(core: BrokerCore, name: bytes, body: Sequence[bytes], now: float) -> Answer:
    """Answer the management request ``name`` with ``body``; raise :class:`ManagementError` on bad input."""
    handler = _SERVICES.get(name)
    if handler is None:
        return protocol.OK, [protocol.NOT_IMPLEMENTED], []
    return handler(core, body, now)


def _service(core: BrokerCore, body: Sequence[bytes], now: float) -> Answer:
    try:
        service = core.resolver.find(body[0]) if body else None
        found = service is not None and service.can_serve(body[0])
    except ResolveError as error:
        raise ManagementError(str(error)) from None
    return protocol.OK, [protocol.OK if found else protocol.NOT_FOUND], []


def _status(core: BrokerCore, body: Sequence[bytes], now: float) -> Answer:
    return protocol.OK, [json.dumps(status(core, now)).encode()], []


def _flow(core: BrokerCore, body: Sequence[bytes], now: float) -> Answer:
    if not body:
        raise ManagementError("mmi.flow needs a service name, and JSON limits to change them")
    name = body[0].decode(errors="replace")
    sent: list[Send] = []
    if len(body) > 1:
        try:
            limits = json.loads(body[1])
            if not isinstance(limits, dict) or set(limits) - {"rate", "burst", "concurrency"}:
                raise ManagementError('limits must be a JSON object with keys "rate", "burst", "concurrency"')
            current = core.flows.get(name, {})
            merged = {key: limits.get(key, current.get(key)) for key in ("rate", "burst", "concurrency")}
            sent = core.set_flow(name, merged["rate"], merged["burst"], merged["concurrency"], now)
        except (ValueError, TypeError) as error:
            raise ManagementError(f"bad flow limits: {error}") from None
    configured = core.flows.get(name, {"rate": None, "burst": None, "concurrency": None})
    return protocol.OK, [json.dumps({"service": name, **configured}).encode()], sent


_SERVICES: dict[bytes, Callable[[BrokerCore, Sequence[bytes], float], Answer]] = {
    b"mmi.service": _service,
    b"mmi.status": _status,
    b"mmi.flow": _flow,
}


def status(core: BrokerCore, now: float) -> dict[str, Any]:
    """The broker's state as JSON-ready data: the ``mmi.status`` report."""
    expiry = core.settings.expiry
    services = []
    for service in core.resolver.services():
        services.append(
            {
                "name": service.name,
                "workers": len(service.workers),
                "waiting": len(service.waiting),
                "queued": len(service.pending),
                "in_flight": service.flow.in_flight,
                "flow": service.flow.describe(),
                **service.stats.describe(now),
            }
        )
    workers = [
        {
            "peer": f"{worker.peer.link}/{_address(worker.peer.address)}",
            "description": worker.description.decode(errors="replace"),
            "service": worker.service.name,
            "dialect": worker.dialect.value,
            "state": "waiting" if worker.waiting else "busy" if worker.task is not None else "finishing",
            "tasks_done": worker.done,
            "last_seen": round(max(0.0, now - (worker.expires - expiry)), 3),
        }
        for worker in core.workers.values()
    ]
    return {
        "broker": {
            "instance": core.instance.hex(),
            "uptime": round(now - core.started, 3),
            "endpoints": [{"transport": t, "endpoint": e} for t, e in core.endpoints],
            "counters": dict(core.counters),
            "queued": sum(1 for task in core.tasks.values() if task.worker is None),
            "settings": {
                "heartbeat_interval": core.settings.heartbeat_interval,
                "liveness": core.settings.liveness,
                "max_attempts": core.settings.max_attempts,
                "queue_timeout": core.settings.queue_timeout,
                "max_message": core.settings.max_message,
            },
        },
        "services": services,
        "workers": workers,
    }


def _address(address: bytes | int) -> str:
    return address.hex() if isinstance(address, bytes) else str(address)

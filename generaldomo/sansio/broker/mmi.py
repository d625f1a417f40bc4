"""The broker's management interface: requests for ``mmi.*`` services, answered from the broker's state.

This module owns what each management service means: ``mmi.service`` (RFC 8), ``mmi.status`` (the status
report, a page of it as its optional JSON body asks, see :mod:`generaldomo.sansio.broker.report`) and ``mmi.flow``
(read or change a service's flow limits: rate, burst, concurrency, bytes in flight, adaptive cap). It reads
the broker through the small :class:`BrokerView` and changes nothing itself: a change it wants comes back in
the :class:`Answer` for the core to apply. It knows nothing of sockets, clocks (``now`` is given) or the
core's records.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from typing import Protocol

import generaldomo.errors as errors
from generaldomo.compat import moved_names
from generaldomo.errors import ResolveError
from generaldomo.sansio.broker.accounts import pacing
from generaldomo.sansio.broker.flow.fair import first_tenants
from generaldomo.sansio.broker.flow.flow import LIMIT, LIMIT_NAMES, Flow, FlowLimits, limits_json
from generaldomo.sansio.broker.report import StatusQuery, StatusReport, limits_in_force
from generaldomo.sansio.broker.services.resolver import Resolver
from generaldomo.sansio.wire import protocol, wirejson
from generaldomo.sansio.wire.events import Frame
from generaldomo.sansio.wire.limits import MMI_FRAMES, SERVICE_NAME

# the errors' old paths here: the same classes, with a DeprecationWarning (they live in generaldomo.errors)
__getattr__ = moved_names(__name__, "generaldomo", ["Forbidden", "ManagementError", "OverBudget"])

__all__ = ["PACED", "Answer", "BrokerView", "FlowChange", "answer", "service_name", "shown", "status"]


class BrokerView(Protocol):
    """What the management interface may read of the broker."""

    @property
    def resolver(self) -> Resolver: ...

    def flow_limits(self, name: str) -> FlowLimits:
        """The limits configured for the service name ``name`` (unset ones when none are)."""
        ...

    def live_flow(self, name: str) -> Flow | None:
        """The flow of the live service called ``name``, if there is one."""
        ...

    def report(self, now: float, query: StatusQuery = ...) -> StatusReport:
        """The status report at ``now``: the page of services and workers ``query`` asks for."""
        ...


@dataclasses.dataclass(frozen=True, slots=True)
class FlowChange:
    """New flow limits for the services called ``name``, now and when they appear."""

    name: str
    limits: FlowLimits


@dataclasses.dataclass(frozen=True, slots=True)
class Answer:
    """The reply to a management request, the change the core must apply before it is sent, and the work it
    costs its sender's budget (bytes, :mod:`generaldomo.sansio.broker.accounts.pacing`; 0: not paced)."""

    status: bytes
    body: list[bytes]
    change: FlowChange | None = None
    work: int = 0


PACED = frozenset({b"mmi.status", b"mmi.flow"})  # the management requests paced per connection


def answer(broker: BrokerView, name: bytes, body: Sequence[Frame], now: float, admin: bool = True) -> Answer:
    """Answer the management request ``name`` with ``body`` from a sender who may change settings if ``admin``;
    raise :class:`ManagementError` on bad input."""
    handler = _SERVICES.get(name)
    if handler is None:
        return Answer(protocol.OK, [protocol.NOT_IMPLEMENTED])
    if not MMI_FRAMES.admits(len(body)):
        raise errors.ManagementError(MMI_FRAMES.refusal(len(body)))
    return handler(broker, [bytes(frame) for frame in body], now, admin)  # (JSON is read from bytes)


def _service(broker: BrokerView, body: Sequence[bytes], now: float, admin: bool) -> Answer:
    try:
        service = broker.resolver.find(body[0]) if body else None
        found = service is not None and service.can_serve(body[0])
    except ResolveError as error:
        raise errors.ManagementError(str(error)) from None
    return Answer(protocol.OK, [protocol.OK if found else protocol.NOT_FOUND])


def _status(broker: BrokerView, body: Sequence[bytes], now: float, admin: bool) -> Answer:
    try:
        query = StatusQuery.from_json(body[0]) if body and body[0] else StatusQuery()
    except ValueError as error:
        raise errors.ManagementError(f"bad status query: {error}") from None
    report = status(broker, now, query)
    text = report.to_json().encode()
    return Answer(protocol.OK, [text], work=pacing.status_cost(len(text), report.broker.service_count))


def _flow(broker: BrokerView, body: Sequence[bytes], now: float, admin: bool) -> Answer:
    if not body:
        raise errors.ManagementError("mmi.flow needs a service name, and JSON limits to change them")
    name = service_name(body[0])
    limits = broker.flow_limits(name)
    change = None
    if len(body) > 1:
        if not admin:
            raise errors.Forbidden("changing flow limits needs the admin role")
        try:
            wanted = wirejson.loads(body[1])
            if not isinstance(wanted, dict):
                raise ValueError(f"limits must be a JSON object with keys among {', '.join(LIMIT_NAMES)}")
            limits = limits.merged(wanted)
        except (ValueError, TypeError) as error:
            raise errors.ManagementError(f"bad flow limits: {error}") from None
        change = FlowChange(name, limits)
    in_force = _in_force(broker.live_flow(name), limits, change is not None)
    text = json.dumps({"service": name, **shown(in_force)}).encode()
    return Answer(protocol.OK, [text], change, pacing.flow_cost(sum(map(len, body)), len(text), change is not None))


def service_name(frame: bytes) -> str:
    """The service name in an MMI request's frame: UTF-8 within :data:`~generaldomo.sansio.wire.limits.SERVICE_NAME`;
    :class:`ManagementError` otherwise."""
    if not SERVICE_NAME.fits(frame):
        raise errors.ManagementError(SERVICE_NAME.refusal(len(frame)))
    try:
        return frame.decode()
    except UnicodeDecodeError:
        raise errors.ManagementError("a service name must be UTF-8") from None


def shown(limits: FlowLimits) -> dict[str, object]:
    """The JSON form of ``limits`` in an ``mmi.flow`` answer: the limits declared ``always_shown`` (rate, burst and
    concurrency) always, the newer ones only when set, so older readers see what they always saw; of the tenants'
    limits, as the status report shows them, those of "*" and the first others set, and their number
    (``tenant_limits``)."""
    tenants = limits.tenants
    data = limits_json(dataclasses.replace(limits, tenants=None))
    shown = {key: value for key, value in data.items() if value is not None or LIMIT[key].always_shown}
    if tenants is not None:
        shown |= {"tenants": first_tenants(tenants), "tenant_limits": len(tenants)}
    return shown


def _in_force(live: Flow | None, limits: FlowLimits, changed: bool) -> FlowLimits:
    """The limits in force on a service once the core has applied ``limits`` (if ``changed``, or when the
    service is not live: it will get them when it appears), exactly as its status report will show them."""
    flow = Flow() if live is None else dataclasses.replace(live)
    if changed or live is None:
        flow.apply(limits)
    return limits_in_force(flow)


_SERVICES: dict[bytes, Callable[[BrokerView, Sequence[bytes], float, bool], Answer]] = {
    b"mmi.service": _service,
    b"mmi.status": _status,
    b"mmi.flow": _flow,
}


def status(broker: BrokerView, now: float, query: StatusQuery | None = None) -> StatusReport:
    """The broker's state: the ``mmi.status`` report (the page ``query`` asks for; by default the first)."""
    return broker.report(now) if query is None else broker.report(now, query)

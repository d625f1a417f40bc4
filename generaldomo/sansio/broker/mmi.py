"""The broker's management interface: requests for ``mmi.*`` services, answered from the broker's state.

This module owns what each management service means: ``mmi.service`` (RFC 8), ``mmi.status`` (the status
report, a page of it as its optional JSON body asks, see :mod:`generaldomo.sansio.broker.report`), ``mmi.flow``
(read or change a service's flow limits: rate, burst, concurrency, bytes in flight, adaptive cap) and ``mmi.dead``
(a service's dead letters, :mod:`generaldomo.sansio.broker.accounts.dead`: list, show, replay or drop them; the
admin role's only). It reads the broker through the small :class:`BrokerView` and changes nothing itself: a change
it wants (flow limits, a dead letter taken) comes back in the :class:`Answer` for the core to apply. It knows
nothing of sockets, clocks (``now`` is given) or the core's records.
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
from generaldomo.sansio.broker.accounts.dead import DeadLetter, DeadLetters
from generaldomo.sansio.broker.flow.fair import first_tenants
from generaldomo.sansio.broker.flow.flow import LIMIT, LIMIT_NAMES, Flow, FlowLimits, limits_json
from generaldomo.sansio.broker.report import StatusQuery, StatusReport, limits_in_force
from generaldomo.sansio.broker.services.resolver import Resolver
from generaldomo.sansio.wire import protocol, wirejson
from generaldomo.sansio.wire.events import Frame
from generaldomo.sansio.wire.limits import DEAD_PAGE, JSON_BYTES, MMI_FRAMES, SERVICE_NAME

# the errors' old paths here: the same classes, with a DeprecationWarning (they live in generaldomo.errors)
__getattr__ = moved_names(__name__, "generaldomo", ["Forbidden", "ManagementError", "OverBudget"])

__all__ = [
    "DEAD_VERBS",
    "PACED",
    "Answer",
    "BrokerView",
    "DeadChange",
    "FlowChange",
    "answer",
    "letter_json",
    "service_name",
    "shown",
    "status",
]


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

    @property
    def dead_letters(self) -> DeadLetters:
        """The services' dead letters (read only)."""
        ...


@dataclasses.dataclass(frozen=True, slots=True)
class FlowChange:
    """New flow limits for the services called ``name``, now and when they appear."""

    name: str
    limits: FlowLimits


@dataclasses.dataclass(frozen=True, slots=True)
class DeadChange:
    """A dead letter for the core to take out of ``service``'s letters: the task ``task_id``'s, to ``replay`` as a new
    task (whose answer its sender fetches by the request id the core answers with) or to drop."""

    service: str
    task_id: bytes
    replay: bool


@dataclasses.dataclass(frozen=True, slots=True)
class Answer:
    """The reply to a management request, the change the core must apply before it is sent (flow limits, or a dead
    letter taken: then the core answers), and the work it costs its sender's budget (bytes,
    :mod:`generaldomo.sansio.broker.accounts.pacing`; 0: not paced)."""

    status: bytes
    body: list[bytes]
    change: FlowChange | None = None
    work: int = 0
    dead: DeadChange | None = None


PACED = frozenset({b"mmi.status", b"mmi.flow", b"mmi.dead"})  # the management requests paced per connection
DEAD_VERBS = (b"list", b"show", b"replay", b"drop")  # what mmi.dead does, its first frame
_DEAD_KEYS = frozenset({"service", "id", "limit", "after"})
_DEAD_LIST = 20  # letters (or services) an mmi.dead list answer shows unless asked for fewer or more


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


def _dead(broker: BrokerView, frames: Sequence[Frame], now: float, admin: bool) -> Answer:
    if not admin:
        raise errors.Forbidden("the dead letters need the admin role")
    # a verb and a JSON object (at most JSON_BYTES: a longer frame is cut one byte beyond, which loads refuses)
    body = [bytes(frame[: JSON_BYTES.high + 1]) for frame in frames]
    if not body or body[0] not in DEAD_VERBS:
        verbs = ", ".join(verb.decode() for verb in DEAD_VERBS)
        raise errors.ManagementError(f"mmi.dead needs a verb ({verbs}), then its arguments as a JSON object")
    verb, args = body[0], _DeadArgs.of(body[1] if len(body) > 1 else b"{}")
    letters, service, request = broker.dead_letters, args.service, sum(map(len, body))
    if verb == b"list":
        data = _dead_list(letters, args, now)
        text = json.dumps(data).encode()
        return Answer(protocol.OK, [text], work=pacing.flow_cost(request, len(text), False))
    if service is None or args.id is None:
        raise errors.ManagementError(f"mmi.dead {verb.decode()} needs a service and a letter's id")
    letter = letters.get(service, args.id)
    if letter is None:
        return Answer(protocol.NOT_FOUND, [f"no dead letter {args.id.hex()} in {service!r}".encode()])
    if verb == b"show":
        text = json.dumps(letter_json(letter, now)).encode()
        work = pacing.flow_cost(request, len(text) + sum(map(len, letter.body)), False)
        return Answer(protocol.OK, [text, *map(bytes, letter.body)], work=work)
    change = DeadChange(service, args.id, replay=verb == b"replay")
    return Answer(protocol.OK, [], dead=change, work=pacing.flow_cost(request, 0, True))


def _dead_list(letters: DeadLetters, args: _DeadArgs, now: float) -> dict[str, object]:
    """An ``mmi.dead list`` answer: a page of a service's letters, or without a service the services with the most."""
    service = args.service
    if service is None:
        return {
            "letters": len(letters), "bytes": letters.bytes, "service_count": letters.service_count(),
            "services": [
                {"service": s.service, "count": s.count, "bytes": s.bytes, "newest_age": round(now - s.newest, 3)}
                for s in letters.services(args.limit)
            ],
        }  # fmt: skip
    shown, more = letters.letters(service, args.limit, args.after)
    return {
        "service": service, "count": letters.count(service),
        "letters": [letter_json(letter, now) for letter in shown], "next": shown[-1].id.hex() if more else None,
    }  # fmt: skip


@dataclasses.dataclass(frozen=True, slots=True)
class _DeadArgs:
    """The arguments of an ``mmi.dead`` request (its JSON object): ``service`` a service name, ``id`` and ``after`` a
    letter's id (hex), ``limit`` a page's size (:data:`~generaldomo.sansio.wire.limits.DEAD_PAGE`)."""

    service: str | None = None
    id: bytes | None = None
    after: bytes | None = None
    limit: int = _DEAD_LIST

    @classmethod
    def of(cls, frame: bytes) -> _DeadArgs:
        """The arguments in ``frame``, checked; :class:`ManagementError` otherwise."""
        try:
            data = wirejson.loads(frame)
        except ValueError as error:
            raise errors.ManagementError(f"bad mmi.dead arguments: {error}") from None
        if not isinstance(data, dict):
            raise errors.ManagementError("mmi.dead arguments are a JSON object")
        unknown = set(data) - _DEAD_KEYS
        if unknown:
            raise errors.ManagementError(f"unknown mmi.dead arguments {sorted(unknown)}; known: {sorted(_DEAD_KEYS)}")
        service = data.get("service")
        if service is not None and not isinstance(service, str):
            raise errors.ManagementError("service must be a string")
        limit = data.get("limit", _DEAD_LIST)
        if isinstance(limit, bool) or not isinstance(limit, int) or not DEAD_PAGE.admits(limit):
            raise errors.ManagementError(f"limit must be a whole number, {DEAD_PAGE.bounds}")
        return cls(
            service=None if service is None else service_name(service.encode()),
            id=_letter_id(data.get("id"), "id"),
            after=_letter_id(data.get("after"), "after"),
            limit=limit,
        )


def _letter_id(value: object, key: str) -> bytes | None:
    if value is None:
        return None
    try:
        if not isinstance(value, str):
            raise TypeError
        return bytes.fromhex(value)
    except (TypeError, ValueError):
        raise errors.ManagementError(f"{key} must be a letter's id, in hex") from None


def letter_json(letter: DeadLetter, now: float) -> dict[str, object]:
    """What ``mmi.dead`` shows of a letter at ``now`` (its payload aside: ``show`` sends it in frames of its own)."""
    return {
        "id": letter.id.hex(),
        "service": letter.service,
        "status": letter.status.decode(errors="replace"),
        "reason": letter.reason,
        "age": round(now - letter.when, 3),
        "attempts": letter.attempts,
        "tenant": letter.tenant,
        "priority": letter.priority,
        "frames": len(letter.body),
        "payload_bytes": sum(map(len, letter.body)),
        "description": letter.description[:256].decode(errors="replace"),
    }


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
    b"mmi.dead": _dead,
}


def status(broker: BrokerView, now: float, query: StatusQuery | None = None) -> StatusReport:
    """The broker's state: the ``mmi.status`` report (the page ``query`` asks for; by default the first)."""
    return broker.report(now) if query is None else broker.report(now, query)

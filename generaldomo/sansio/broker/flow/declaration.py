"""What a service's flow limit declares, and what is made from the declarations.

This module owns the record of one flow limit, :class:`Limit`, and the making of every surface from a tuple of
them. The declarations themselves are :data:`generaldomo.sansio.broker.flow.flow.LIMITS`, beside the rules that enforce
them; a limit declares its knob (name, kind, bounds, unit, help, CLI flag, metavar, metric: see
:mod:`generaldomo.sansio.config.knobs`), its field of the flow report (its description, its JSON schema, and the
fields shown beside it) and how the status view and the dashboard show it. Made from them: the flow report's
fields (:func:`report_fields`), its JSON schema (:func:`schema`, which ``docs/status.schema.json`` holds), the
text of ``--flow`` and ``generaldomo flow`` (:func:`changes`, :func:`text`), the dashboard's form
(:func:`controls`) and the guide's table (:func:`rst_table`). A new limit is a declaration, a field of
:class:`~generaldomo.sansio.broker.flow.flow.FlowLimits` and its rule in
:class:`~generaldomo.sansio.broker.flow.flow.Flow` (all three in that module), and its test. It knows
nothing of sockets, clocks or of how a limit is enforced.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from generaldomo.sansio.broker.flow.bounds import within
from generaldomo.sansio.checked import checked
from generaldomo.sansio.config.knobs import NONE, TENANT, Kind, Knob, by_name, tenant_limits
from generaldomo.sansio.wire.limits import Field

__all__ = [
    "Beside",
    "Control",
    "Limit",
    "ReportField",
    "Reported",
    "changes",
    "controls",
    "example",
    "knob",
    "report_fields",
    "rst_table",
    "schema",
    "text",
]

Reported = Callable[[Any, Any, float], Any]  # (the service's Flow, the limits in force, now) -> a report field


def _in_force(name: str) -> Reported:
    return lambda flow, limits, now: getattr(limits, name)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Beside:
    """A field of the flow report shown beside a limit: what the limit counts, as it stands (``last``: at the end
    of the report, where readers of older versions found it)."""

    name: str
    description: str
    schema: Mapping[str, Any]
    type: Any
    default: Any
    reported: Reported
    last: bool = False


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Control:
    """A limit's field in the dashboard's form: its label, its placeholder (what an empty field means) and how
    the services table shows it (``summary``: ``{value}`` the limit, or ``{min}``, ``{max}``, ``{cap}`` of
    a range's report; ``format``: how a number is shown, one of the page's formats)."""

    label: str
    placeholder: str = "none"
    size: int = 6
    summary: str = "{value}"
    format: str = "count"

    def served(self, knob: Knob) -> dict[str, Any]:
        """The form of it the dashboard serves to its page."""
        whole = knob.kind is not Kind.FLOAT
        fields = [f"{knob.name}_min", f"{knob.name}_max"] if knob.kind is Kind.RANGE else [knob.name]
        return {
            "name": knob.name, "label": self.label, "fields": fields, "whole": whole, "placeholder": self.placeholder,
            "size": self.size, "summary": self.summary, "format": self.format, "help": knob.help,
        }  # fmt: skip


def knob(field: Field, kind: Kind, help: str, **more: Any) -> Knob:
    """The knob of a flow limit whose bounds are ``field``'s (:mod:`generaldomo.sansio.wire.limits`)."""
    return Knob(
        name=field.name, kind=kind, default=None, help=help, low=field.low, high=field.high, low_open=field.low_open,
        **more,
    )  # fmt: skip


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Limit:
    """One flow limit of a service, declared once (see the module docstring).

    - ``knob``: its name (the ``FlowLimits`` field, ``mmi.flow``'s key, the report's field), kind, bounds, help,
      CLI flag and metric; ``field``: its bounds (a field of :mod:`generaldomo.sansio.wire.limits`), which a
      number is checked against, or ``converter``: what reads a structured value (its JSON form);
    - ``description``: its report field's; ``schema``: that field's JSON schema where it is not the knob's number
      (an object), ``type``: its type in the report record (None: the knob's number or None), ``reported``: its
      value (None: the limit in force); ``beside``: the report fields that follow it;
    - ``always_shown``: ``mmi.flow`` answers show it when unset too (older readers expect it); ``example``: a
      value the CLI's help shows (empty: none);
    - ``column``: the heading of its column in ``generaldomo status``'s flow table; without one it is shown in
      the service's flow line when set, by ``line``, a ``str.format`` text of the report's flow record (empty:
      its name and value; None: not shown);
    - ``control``: its field in the dashboard's form (None: it is not changed there).
    """

    knob: Knob
    description: str
    field: Field | None = None
    converter: Callable[[Any], Any] | None = None
    schema: Mapping[str, Any] | None = None
    type: Any = None
    reported: Reported | None = None
    beside: tuple[Beside, ...] = ()
    always_shown: bool = False
    example: str = ""
    column: str = ""
    line: str | None = ""
    control: Control | None = None

    @property
    def name(self) -> str:
        return self.knob.name

    @property
    def record_field(self) -> Any:
        """Its field of :class:`~generaldomo.sansio.broker.flow.flow.FlowLimits` (None by default), checked or read
        by its bounds or its converter (see :mod:`generaldomo.sansio.checked`)."""
        converter = self.converter
        if converter is not None:
            return checked(lambda name, value: converter(value), default=None)
        assert self.field is not None, f"{self.name} declares neither its bounds nor a converter"
        return checked(within(self.field, whole=self.knob.kind is not Kind.FLOAT), default=None)

    def report_schema(self) -> dict[str, Any]:
        """The JSON schema of its report field."""
        if self.schema is not None:
            return {"description": self.description, **self.schema}
        schema = self.knob.json_schema()
        kind = schema["type"]
        return {"description": self.description, **schema, "type": kind if isinstance(kind, list) else [kind, "null"]}


@dataclasses.dataclass(frozen=True, slots=True)
class ReportField:
    """A field of the flow report: its name, type, default, JSON schema and value."""

    name: str
    type: Any
    default: Any
    schema: Mapping[str, Any]
    reported: Reported


def report_fields(limits: Sequence[Limit]) -> list[ReportField]:
    """The flow report's fields, in order: each limit, then the fields beside it (those ``last`` at the end)."""
    fields: list[ReportField] = []
    last: list[ReportField] = []
    for limit in limits:
        number = int if limit.knob.kind is Kind.INT else float
        kind = limit.type if limit.type is not None else number | None
        reported = limit.reported or _in_force(limit.name)
        fields.append(ReportField(limit.name, kind, None, limit.report_schema(), reported))
        for more in limit.beside:
            schema = {"description": more.description, **more.schema}
            (last if more.last else fields).append(
                ReportField(more.name, more.type, more.default, schema, more.reported)
            )
    return fields + last


def schema(limits: Sequence[Limit]) -> dict[str, Any]:
    """The JSON schema of the flow report (``docs/status.schema.json``'s ``$defs.service.properties.flow``)."""
    fields = report_fields(limits)
    return {
        "description": "The flow limits in force; null: no limit.",
        "type": "object",
        "required": [f.name for f in fields if f.default is not None or _always(limits, f.name)],
        "properties": {f.name: dict(f.schema) for f in fields},
    }


def _always(limits: Sequence[Limit], name: str) -> bool:
    return any(limit.name == name and limit.always_shown for limit in limits)


def example(limits: Sequence[Limit], service: str) -> str:
    """A ``--flow`` spec setting each limit that gives an example: ``SERVICE:KEY=VALUE,...``."""
    return f"{service}:" + ",".join(f"{limit.name}={limit.example}" for limit in limits if limit.example)


def controls(limits: Sequence[Limit]) -> list[dict[str, Any]]:
    """The dashboard's form: a field (or two, a range's bounds) per limit changed there."""
    return [limit.control.served(limit.knob) for limit in limits if limit.control is not None]


def changes(limits: Sequence[Limit], pairs: str) -> dict[str, Any]:
    """``KEY=VALUE,...`` (the limits' names; a tenant's limits as ``tenants.NAME.KEY=VALUE``, ``tenants.NAME=none``
    to forget them) as ``mmi.flow``'s JSON changes; ValueError saying what is wrong."""
    known = {limit.name: limit.knob for limit in limits}
    found: dict[str, Any] = {}
    tenants: dict[str, Any] = {}
    for pair in pairs.split(","):
        key, sep, value = pair.partition("=")
        if key.startswith("tenants.") and sep:
            _tenant_change(tenants, key.removeprefix("tenants."), value)
        elif not sep or key not in known or known[key].kind is Kind.TENANTS:
            shown = ", ".join(k for k in known if known[k].kind is not Kind.TENANTS)
            raise ValueError(f"unknown flow limit {pair!r}; use {shown} or tenants.NAME.KEY (KEY: weight, rate, ...)")
        else:
            found[key] = known[key].parse(value)
    if tenants:
        found["tenants"] = tenants
    return found


def text(limits: Sequence[Limit], found: Mapping[str, Any]) -> str:
    """The ``KEY=VALUE,...`` text :func:`changes` reads as ``found`` (``mmi.flow``'s JSON form; a range may also
    be given as its text, ``"1..64"``)."""
    known = {limit.name: limit.knob for limit in limits}
    pairs = []
    for key, value in found.items():
        if key == "tenants" and isinstance(value, dict):
            for name, chosen in value.items():
                if chosen is None:
                    pairs.append(f"tenants.{name}={NONE}")
                else:
                    pairs += [
                        f"tenants.{name}.{k}={_text(v, by_name(TENANT)[k].word)}" for k, v in dict(chosen).items()
                    ]
        elif key in known and (writer := known[key].writer) is not None and value is not None:
            pairs.append(f"{key}={writer(value)}")
        else:
            pairs.append(f"{key}={_text(value, known[key].word if key in known else NONE)}")
    return ",".join(pairs)


def _text(value: Any, word: str = NONE) -> str:
    """``value`` as :meth:`Knob.parse` reads it; ``word`` for None (the knob's)."""
    if value is None:
        return word
    if isinstance(value, dict):
        top = value.get("max")
        return f"{_text(value.get('min', ''))}..{'' if top is None else _text(top)}"
    return str(value)


def _tenant_change(tenants: dict[str, Any], path: str, value: str) -> None:
    """Apply ``NAME.KEY=VALUE`` or ``NAME=none`` to ``tenants`` (tenant name -> its limits or None)."""
    name, sep, key = path.rpartition(".")
    if sep and name and key in by_name(TENANT):
        tenants[name] = {**(tenants.get(name) or {}), **(tenant_limits(name, f"{key}={value}") or {})}
    elif path and value.strip().lower() == NONE:
        tenants[path] = None
    else:
        raise ValueError(f"a tenant's limit is tenants.NAME.KEY=VALUE (or tenants.NAME=none), not {path}={value}")


def rst_table(limits: Sequence[Limit]) -> str:
    """The guide's table of the limits (a reST list table): each one's key, values, flag and what it does."""
    lines = [".. list-table::", "   :header-rows: 1", "   :widths: 18 24 22 36", ""]
    lines += [
        "   * - limit (``mmi.flow`` key)",
        "     - values",
        "     - ``generaldomo flow`` flag",
        "     - what it is",
    ]
    for limit in limits:
        knob, field = limit.knob, limit.field
        bounds = field.bounds if field is not None else knob.bounds
        if knob.kind in (Kind.RANGE, Kind.RATE_RANGE):
            values = f"``{knob.metavar}``" + (f", each {bounds}" if bounds else "")
        else:
            values = bounds or f"``{knob.metavar}``"
        unit = f" ({knob.unit})" if knob.unit and knob.unit not in values else ""
        if knob.nullable:
            values += f"{unit}; ``{knob.word}``: {knob.none_means}"
            unit = ""
        lines += [f"   * - ``{knob.name}``", f"     - {values}{unit}", f"     - ``{knob.option} {knob.metavar}``"]
        lines.append(f"     - {knob.help}")
    return "\n".join(lines) + "\n"

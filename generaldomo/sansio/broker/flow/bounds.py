"""The one check of a flow limit's value, for a service's limits (:mod:`~generaldomo.sansio.broker.flow.flow`)
and a tenant's (:mod:`~generaldomo.sansio.broker.flow.fair`) alike.

This module owns what a valid limit is: None (no limit) or a number within its field's bounds in
:mod:`generaldomo.sansio.wire.limits`, a whole one where the limit counts things. It knows nothing of what a limit
limits.
"""

from __future__ import annotations

from typing import Any

from generaldomo.sansio.checked import Check
from generaldomo.sansio.wire.limits import Field

__all__ = ["Validator", "check", "within"]

Validator = Check


def check(field: Field, value: object, whole: bool, who: str = "") -> None:
    """ValueError unless ``value`` is None or a number within ``field``'s bounds (``whole``: a whole one);
    ``who`` (``"a tenant's "``) comes before the field's name in the message."""
    if value is None:
        return
    name = f"{who}{field.name}"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number (or null for no limit)")
    if not field.admits(value):  # NaN is within no bounds
        raise ValueError(f"{name} must be {field.bounds} (or null for no limit), not {value!r}")
    if whole and isinstance(value, float) and not value.is_integer():
        raise ValueError(f"{name} must be a whole number, not {value!r}")


def within(field: Field, *, whole: bool, who: str = "") -> Validator:
    """The check of a limit bounded by ``field`` (see :func:`check`), for :func:`generaldomo.sansio.checked.checked`:
    it keeps the value as the field's type (an int where ``whole``, else a float)."""

    def validate(name: str, value: Any) -> Any:
        check(field, value, whole, who)
        return value if value is None else int(value) if whole else float(value)  # (the field's type)

    return validate

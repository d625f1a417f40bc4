"""Checked fields of immutable records: one mechanism for the records that refuse a bad value at construction.

A field made with :func:`checked` carries its check, a function of the field's name and value that returns the
value to keep (the value itself, or its converted form) and raises ValueError on a bad one; a record's
``__post_init__`` calls :func:`check_fields`, which runs every field's check in their order, so a record that
exists is valid, whether made directly or by :func:`dataclasses.replace`. This module knows nothing of what the
fields mean.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

__all__ = ["Check", "check_fields", "checked"]

Check = Callable[[str, Any], Any]  # (a field's name, its value) -> the value to keep; ValueError when bad
_CHECK = "check"


def checked(check: Check, **field: Any) -> Any:
    """A dataclass field (``field``: :func:`dataclasses.field`'s arguments) whose value ``check`` checks."""
    return dataclasses.field(metadata={_CHECK: check}, **field)


def check_fields(record: Any) -> None:
    """Run the checks of ``record``'s checked fields, in order, keeping what each returns (a frozen record too)."""
    for field in dataclasses.fields(record):
        check = field.metadata.get(_CHECK)
        if check is not None:
            object.__setattr__(record, field.name, check(field.name, getattr(record, field.name)))

"""Checked fields of immutable records: one mechanism for the records that refuse a bad value at construction.

A field made with :func:`checked` carries its check, a function of the field's name and value that returns the
value to keep (the value itself, or its converted form) and raises ValueError on a bad one; a record's
``__post_init__`` calls :func:`check_fields`, which runs every field's check in their order, so a record that
exists is valid, whether made directly or by :func:`dataclasses.replace`. Outside input (a JSON form, whose
numbers and objects are not yet the fields' types) is made into a record by :func:`checked_record`, which runs
the checks before the record is made: a compiled record accepts only values of its fields' types. This module
knows nothing of what the fields mean.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

__all__ = ["Check", "check_fields", "checked", "checked_record"]

R = TypeVar("R")

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


def checked_record(cls: type[R], values: Mapping[str, Any]) -> R:
    """A ``cls`` made of ``values`` (by field name), each first checked and converted by its field's check;
    TypeError on an unknown name (as the record's constructor), ValueError on a bad value."""
    fields = {field.name: field for field in dataclasses.fields(cls)}  # type: ignore[arg-type]
    kept = {}
    for name, value in values.items():
        field = fields.get(name)
        check = None if field is None else field.metadata.get(_CHECK)
        kept[name] = value if check is None else check(name, value)
    return cls(**kept)

"""Tables for people: one number format per column, fitted to a terminal's width.

This module owns how a cell looks: counts are whole numbers with thousands separators, ids plain whole
numbers, rates have two decimals, times in milliseconds one, seconds one, "-" stands for none, and text from
the wire is shown with its unprintable characters replaced. A table wider than the width it is given cuts
its shrinking columns (longest first, never below :data:`MIN_TEXT`, marked "…"); lines that still do not
fit are cut. Widths are terminal columns (a wide character takes two). It knows nothing of what the tables
show.
"""

from __future__ import annotations

import enum
import unicodedata
from collections.abc import Callable, Sequence
from typing import Any, Final, Generic, TypeVar

import attrs

__all__ = [
    "DOTTED_CIRCLE",
    "GAP",
    "MAX_TEXT",
    "MIN_TEXT",
    "NONE",
    "Column",
    "Format",
    "cell",
    "cut",
    "pad",
    "printable",
    "table",
    "width_of",
]

T = TypeVar("T")
NONE: Final = "-"
DOTTED_CIRCLE: Final = "\u25cc"  # the base Unicode shows a combining mark on when it has none
GAP: Final = "  "
MIN_TEXT: Final = 6  # a text column is not shrunk below this many characters (or its header's width)
MAX_TEXT: Final = 120  # nor shown wider than this


class Format(enum.Enum):
    """How a column's values are written; numbers are right-aligned."""

    TEXT = "text"
    ID = "id"  # 12345 (a number that names something, such as a process id)
    COUNT = "count"  # 12,345
    RATE = "rate"  # 12.50 (per second)
    MS = "ms"  # 3.2 (seconds shown as milliseconds)
    SECONDS = "seconds"  # 1.5


_NUMBERS: Final[dict[Format, Callable[[Any], str]]] = {
    Format.ID: lambda value: f"{int(value)}",
    Format.COUNT: lambda value: f"{int(value):,}",
    Format.RATE: lambda value: f"{float(value):,.2f}",
    Format.MS: lambda value: f"{float(value) * 1000:,.1f}",
    Format.SECONDS: lambda value: f"{float(value):,.1f}",
}


def cell(format: Format, value: object) -> str:
    """``value`` as a column of ``format`` shows it."""
    if value is None:
        return NONE
    if format is Format.TEXT:
        return printable(cut(_based(str(value)), MAX_TEXT)) or NONE
    if isinstance(value, bool) or not isinstance(value, int | float):
        return printable(_based(str(value)))  # a report from some other version: show it as it is
    return _NUMBERS[format](value)


def _based(text: str) -> str:
    """``text`` with a dotted circle before a leading combining mark (a name may be one), which would otherwise
    take no column of its own and merge with whatever is shown before the cell."""
    return DOTTED_CIRCLE + text if text and unicodedata.combining(text[0]) else text


def printable(text: str) -> str:
    """``text`` with each character a terminal would act on (escapes, newlines) shown as "?"."""
    return "".join(c if c.isprintable() else "?" for c in text)


def width_of(text: str) -> int:
    """Terminal columns ``text`` takes: wide (East Asian) characters take two, combining marks none."""
    return sum(_columns(char) for char in text)


def _columns(char: str) -> int:
    if unicodedata.combining(char):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def cut(text: str, width: int) -> str:
    """``text`` in at most ``width`` terminal columns, "…" marking a cut."""
    if width_of(text) <= width:
        return text
    kept, used = [], 0
    for char in text:
        used += _columns(char)
        if used > width - 1:
            break
        kept.append(char)
    return "".join(kept) + "…"


def pad(text: str, width: int, right: bool = False) -> str:
    """``text`` padded with spaces to ``width`` terminal columns, on the left if ``right``-aligned."""
    space = " " * max(0, width - width_of(text))
    return space + text if right else text + space


@attrs.frozen
class Column(Generic[T]):
    """A column: its header, its format, how to get its value from a row, and whether it may be cut narrower
    than its widest cell to fit the width (text columns only)."""

    header: str
    format: Format
    value: Callable[[T], object]
    shrinks: bool = False


def table(columns: Sequence[Column[T]], rows: Sequence[T], width: int | None = None) -> str:
    """The rows under a header line and a rule, in at most ``width`` characters per line (None: no limit)."""
    body = [[cell(column.format, column.value(row)) for column in columns] for row in rows]
    widths = [max([len(column.header)] + [width_of(line[i]) for line in body]) for i, column in enumerate(columns)]
    if width is not None:
        widths = _fit(columns, widths, width)
    lines = [[column.header for column in columns], ["-" * w for w in widths], *body]
    text = [_line(columns, widths, line) for line in lines]
    return "\n".join(line if width is None else cut(line, width) for line in text)


def _line(columns: Sequence[Column[Any]], widths: Sequence[int], cells: Sequence[str]) -> str:
    parts = [
        pad(cut(text, w), w) if column.format is Format.TEXT else pad(text, w, right=True)
        for column, w, text in zip(columns, widths, cells, strict=True)
    ]
    return GAP.join(parts).rstrip()


def _fit(columns: Sequence[Column[Any]], widths: list[int], width: int) -> list[int]:
    """Widths with the shrinking columns cut, longest first, until the line fits or none can shrink more."""
    widths = list(widths)
    floors = [_floor(c, w) for c, w in zip(columns, widths, strict=True)]
    excess = sum(widths) + len(GAP) * (len(widths) - 1) - width
    while excess > 0:
        shrinkable = [i for i, w in enumerate(widths) if w > floors[i]]
        if not shrinkable:
            break
        widest = max(shrinkable, key=lambda i: widths[i])
        widths[widest] -= 1
        excess -= 1
    return widths


def _floor(column: Column[Any], width: int) -> int:
    return min(width, max(MIN_TEXT, len(column.header))) if column.shrinks and column.format is Format.TEXT else width

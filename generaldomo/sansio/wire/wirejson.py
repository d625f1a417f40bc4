"""JSON from the wire, read within bounds: the one function every peer-sent JSON text goes through.

This module owns reading JSON that a peer sent (``mmi.flow`` limits, JSON descriptions of the ``attributes``
and ``balanced`` resolvers, a worker's peer info, beacons, the broker's answers as a client reads them). Rules,
from :mod:`generaldomo.sansio.wire.limits`: the text is UTF-8 of at most ``max_bytes`` bytes, nested at most
``max_depth`` arrays and objects deep (checked before parsing, so no input can exhaust the parser's recursion),
and its numbers are finite (``NaN`` and ``Infinity`` are refused) with integers within
:data:`~generaldomo.sansio.wire.limits.JSON_INTEGER` and other numbers within
:data:`~generaldomo.sansio.wire.limits.JSON_NUMBER` (so no value overflows a float later). Anything else raises
:class:`WireJSONError`, a ``ValueError``, and nothing else is raised. The work is linear in the text's size. It
knows nothing of sockets or of what the values mean.
"""

from __future__ import annotations

import json
import math
import re
from itertools import accumulate
from typing import Any

import generaldomo.errors as errors
from generaldomo.compat import moved_names
from generaldomo.sansio.wire.limits import JSON_BYTES, JSON_DEPTH, JSON_INTEGER, JSON_NUMBER

# the errors' old paths here: the same classes, with a DeprecationWarning (they live in generaldomo.errors)
__getattr__ = moved_names(__name__, "generaldomo", ["WireJSONError"])

__all__ = ["loads", "nesting"]

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)  # a JSON string, escapes included
_OTHER = re.compile(r"[^\[\]{}]+")  # what is not a bracket
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
_INTEGER_DIGITS = len(str(JSON_INTEGER.high)) + 1  # a longer integer is refused before it is converted


def loads(data: bytes | str, max_bytes: int | None = JSON_BYTES.high, max_depth: int = JSON_DEPTH.high) -> Any:
    """The value of the JSON text ``data`` (UTF-8 bytes or text) within the bounds (``max_bytes`` None: no size
    bound); :class:`WireJSONError` otherwise."""
    size = len(data)
    if max_bytes is not None and size > max_bytes:
        raise errors.WireJSONError(f"JSON text of {size} bytes (at most {max_bytes})")
    try:
        text = data if isinstance(data, str) else data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise errors.WireJSONError(f"JSON text is not UTF-8: {error}") from None
    depth = nesting(text, max_depth)
    if depth > max_depth:
        raise errors.WireJSONError(f"JSON nested {depth} levels deep (at most {max_depth})")
    try:
        return json.loads(text, parse_int=_integer, parse_float=_number, parse_constant=_constant)
    except errors.WireJSONError:
        raise
    except (ValueError, RecursionError) as error:  # RecursionError: not reachable within the depth bound
        raise errors.WireJSONError(str(error)) from None


def nesting(text: str, limit: int = JSON_DEPTH.high) -> int:
    """How deep arrays and objects nest in ``text`` (brackets inside strings do not count); a text with no more
    than ``limit`` brackets that open is not measured: it nests at most that deep, which is returned."""
    openers = text.count("[") + text.count("{")
    if openers <= limit:
        return openers
    brackets = _OTHER.sub("", _STRING.sub("", text))
    return max(accumulate(map(_STEP.__getitem__, brackets), initial=0))


def _integer(digits: str) -> int:
    if len(digits) > _INTEGER_DIGITS or not JSON_INTEGER.admits(value := int(digits)):
        raise errors.WireJSONError(f"JSON integer {digits[:24]}{'...' if len(digits) > 24 else ''} is outside "
                            f"{JSON_INTEGER.bounds}")  # fmt: skip
    return value


def _number(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or not JSON_NUMBER.admits(value):
        raise errors.WireJSONError(f"JSON number {text[:24]} is outside {JSON_NUMBER.bounds}")
    return value


def _constant(name: str) -> float:
    raise errors.WireJSONError(f"JSON numbers must be finite, not {name}")

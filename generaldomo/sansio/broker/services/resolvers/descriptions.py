"""JSON descriptions shared by the built-in attribute-based resolvers.

This module owns parsing and matching of descriptions that are JSON objects with a ``"service"`` key. It
knows nothing of queues, workers or the broker.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from generaldomo.errors import ResolveError
from generaldomo.sansio.wire import wirejson
from generaldomo.sansio.wire.limits import DESCRIPTION, SERVICE_NAME

__all__ = ["Attributes", "parse", "satisfies"]

Attributes = dict[str, Any]


@lru_cache(maxsize=4096)
def _parse(description: bytes) -> tuple[str, tuple[tuple[str, str], ...]]:
    try:
        data = wirejson.loads(description, DESCRIPTION.high)
    except ValueError as error:
        raise ResolveError(f"description is not JSON: {error}") from None
    if not isinstance(data, dict) or not isinstance(data.get("service"), str) or not data["service"]:
        raise ResolveError('description must be a JSON object with a non-empty string "service"')
    name = data["service"]
    try:
        size = len(name.encode())
    except UnicodeEncodeError:  # a lone surrogate, escaped in the JSON text
        raise ResolveError("the service name is not valid Unicode") from None
    if not SERVICE_NAME.admits(size):
        raise ResolveError(SERVICE_NAME.refusal(size))
    return name, tuple(sorted((k, json.dumps(v, sort_keys=True)) for k, v in data.items()))


def parse(description: bytes) -> tuple[str, Attributes]:
    """``(service name, attributes)`` of a JSON description; raises :class:`ResolveError`."""
    name, items = _parse(description)
    return name, {key: json.loads(value) for key, value in items}  # our own text, made by _parse


def satisfies(offer: Attributes, demand: Attributes) -> bool:
    """True when a worker offering ``offer`` meets every attribute a request ``demand`` s.

    A demanded list means "any of these"; other values must be equal. Keys starting with ``_`` in the demand
    are hints, not requirements.
    """
    for key, wanted in demand.items():
        if key.startswith("_"):
            continue
        if key not in offer:
            return False
        if isinstance(wanted, list) and not isinstance(offer[key], list):
            if offer[key] not in wanted:
                return False
        elif offer[key] != wanted:
            return False
    return True

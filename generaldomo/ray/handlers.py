"""Naming a handler so that it can travel to a Ray actor: a picklable callable, or ``"module:attr"`` text.

Rules: text is resolved where the handler runs (in the actor), so its module need only be importable there;
``attr`` may be dotted (``"pkg.mod:Class.method"``). It knows nothing of Ray, sockets or the broker.
"""

from __future__ import annotations

import pkgutil
from collections.abc import Callable
from typing import Any

__all__ = ["HandlerSpec", "load_handler"]

HandlerSpec = Callable[..., Any] | str


def load_handler(spec: HandlerSpec) -> Callable[..., Any]:
    """The callable ``spec`` names: itself when callable, else the attribute ``"module:attr"`` points to.

    Args:
        spec: a callable, or ``"module:attr"``.

    Example:
        >>> from generaldomo.ray import load_handler
        >>> load_handler("os.path:basename")("/tmp/x.txt")
        'x.txt'
    """
    if callable(spec):
        return spec
    module_name, colon, attribute = spec.partition(":")
    if not colon or not module_name or not attribute:
        raise ValueError(f"a handler is a callable or 'module:attr' text, not {spec!r}")
    target = pkgutil.resolve_name(spec)
    if not callable(target):
        raise TypeError(f"{spec!r} names {type(target).__name__}, which is not callable")
    return target  # type: ignore[no-any-return]

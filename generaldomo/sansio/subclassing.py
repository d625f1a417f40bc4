"""Which classes of the compiled core Python classes may subclass.

:func:`mypyc_attr` is mypyc's class decorator (``mypy_extensions.mypyc_attr``) where the type checker and the
compiler read the code, and a decorator that changes nothing where the code runs: mypyc acts on it while it
compiles and leaves it out of the compiled class, and the pure-Python path needs nothing beyond the package's
dependencies. A class of the core that users or the package's own Python classes subclass (a resolver's
service) is decorated ``@mypyc_attr(allow_interpreted_subclasses=True)``; a compiled class without it refuses a
Python subclass. This module is not compiled (see ``setup.py``) and imports nothing of the package.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

__all__ = ["mypyc_attr"]

T = TypeVar("T")

if TYPE_CHECKING:
    from mypy_extensions import mypyc_attr as mypyc_attr
else:

    def mypyc_attr(*attrs: str, **named: Any) -> Callable[[T], T]:
        """mypyc's decorator as the code runs: the class as it is."""
        return lambda cls: cls

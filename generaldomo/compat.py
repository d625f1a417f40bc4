"""The module paths of releases before the package was split into layers, kept importable, lazily.

Rules: ``generaldomo.core``, ``from generaldomo import codec``, ``import generaldomo.resolvers.attributes``, the
IO-free layer's modules from before its sub-packages (``generaldomo.sansio.protocol``, ``from generaldomo.sansio
import session``: :data:`SANSIO` says where each lives), the IO layer's modules from before its sides' sub-packages
(``generaldomo.io.links``: :data:`IO`) and the rest of :data:`MOVED` give the module at its new path (the same
object, not a copy), with a ``DeprecationWarning`` naming that path; nothing is imported before it is asked for, so
that ``import generaldomo`` loads only what the public names need. :class:`MovedFinder` (first on ``sys.meta_path``)
serves the ``import`` statements, :func:`moved_attribute` (the package's module ``__getattr__``) the attribute and
``from generaldomo import ...`` forms. It knows nothing of what the modules hold.

Names that moved out of a module that stays (the exceptions, all in :mod:`generaldomo.errors`) are kept the same
way: :func:`moved_names` makes that module's ``__getattr__``, which gives the object at its new home with a
``DeprecationWarning``; the module itself no longer holds the name.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Callable, Iterable, Sequence
from types import ModuleType

__all__ = ["MOVED", "PACKAGE", "MovedFinder", "moved", "moved_attribute", "moved_names"]

PACKAGE = "generaldomo"
# The IO-free layer's modules by the sub-package of generaldomo.sansio they live in (wire, config, peer, broker...).
SANSIO: dict[str, str] = {
    **dict.fromkeys("codec envelope events limits peer_events protocol ticket wirejson".split(), "wire"),
    **dict.fromkeys("settings knobs".split(), "config"),
    **dict.fromkeys("session handshake serializers".split(), "peer"),
    **dict.fromkeys("flow fair adaptive backoff".split(), "broker.flow"),
    **dict.fromkeys("service stats resolver resolvers".split(), "broker.services"),
    **dict.fromkeys("ledger pacing kept".split(), "broker.accounts"),
    **dict.fromkeys("core records states actions access deadlines served mmi report".split(), "broker"),
}
RESOLVERS = ("attributes", "balanced", "descriptions")  # the modules of the built-in resolvers' package
# The IO layer's modules that live in one side's sub-package of generaldomo.io: the broker's (hub), a peer's (peer).
IO: dict[str, str] = {
    **dict.fromkeys("links backlog state metrics".split(), "hub"),
    **dict.fromkeys("connection monitor locator".split(), "peer"),
}


def _io(name: str) -> str:
    """Where the IO layer's module ``name`` lives now."""
    return f"generaldomo.io.{IO[name]}.{name}" if name in IO else f"generaldomo.io.{name}"


def _sansio(name: str) -> str:
    """Where ``generaldomo.sansio.<name>`` (a module, or ``resolvers.<module>``) lives now."""
    return f"generaldomo.sansio.{SANSIO[name.split('.')[0]]}.{name}"


MOVED: dict[str, str] = {
    **{name: _sansio(name) for name in "events codec protocol core service flow stats mmi resolver".split()},
    "resolvers": _sansio("resolvers"),
    **{f"resolvers.{name}": _sansio(f"resolvers.{name}") for name in RESOLVERS},
    **{f"sansio.{name}": _sansio(name) for name in SANSIO},
    **{f"sansio.resolvers.{name}": _sansio(f"resolvers.{name}") for name in RESOLVERS},
    **{name: _io(name) for name in "links broker connection inproc beacon metrics bridge".split()},
    **{f"io.{name}": _io(name) for name in IO},
    "client": "generaldomo.peers.client",
    "worker": "generaldomo.peers.worker",
    "status_view": "generaldomo.cli.status_view",
}


def moved(old: str) -> ModuleType:
    """The module that ``generaldomo.<old>`` now is, imported if need be, with the DeprecationWarning."""
    new = MOVED[old]
    warnings.warn(f"{PACKAGE}.{old} is deprecated; import {new}", DeprecationWarning, stacklevel=3)
    return importlib.import_module(new)


def moved_attribute(name: str) -> ModuleType:
    """``generaldomo.<name>`` for a moved module (the package's ``__getattr__``); AttributeError otherwise."""
    if name in MOVED and "." not in name:
        module = moved(name)
        setattr(sys.modules[PACKAGE], name, module)  # warned once: later uses find the attribute
        return module
    raise AttributeError(f"module {PACKAGE!r} has no attribute {name!r}")


def moved_names(module: str, home: str, names: Iterable[str]) -> Callable[[str], object]:
    """The module ``__getattr__`` of ``module`` for the ``names`` that moved from it to ``home``: each gives the
    object at ``home`` (the same object), with a DeprecationWarning naming where to import it from; any other
    name raises AttributeError.

    Example (in ``generaldomo/peers/worker.py``)::

        __getattr__ = moved_names(__name__, "generaldomo", ["WorkerStopped"])
    """
    moved = frozenset(names)

    def __getattr__(name: str) -> object:
        if name not in moved:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(f"{module}.{name} is deprecated; import it from {home}", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(home), name)

    return __getattr__


class MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``generaldomo.<old>`` for the moved modules, and loads it as the module at its new path (which keeps
    its own ``__spec__``: the import system gives the module the old path's spec, and :meth:`exec_module` puts its
    own back)."""

    def __init__(self) -> None:
        self._specs: dict[str, importlib.machinery.ModuleSpec | None] = {}  # old path -> the module's own spec

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        old = fullname.removeprefix(f"{PACKAGE}.")
        return importlib.util.spec_from_loader(fullname, self) if old != fullname and old in MOVED else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = moved(spec.name.removeprefix(f"{PACKAGE}."))
        self._specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module ran at its new path; only its own spec is put back."""
        module.__spec__ = self._specs.pop(module.__spec__.name if module.__spec__ else "", module.__spec__)

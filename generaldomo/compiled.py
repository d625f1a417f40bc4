"""The sans-IO core's optional compiled build: which modules it holds, whether it is in use, and the import hook
that uses it.

``setup.py`` compiles the IO-free layer's modules (:data:`MODULES` of ``setup.py``: the broker core, the wire
readers and writers, flow control, the accounts, the peers' sessions) with mypyc when mypyc and a C compiler are
there. The compiled modules do not go beside their sources: they go into the dedicated folder ``_compiled/`` of
this package with a manifest naming each module's file and the SHA-256 of the source it was compiled from, so an
ordinary import never finds them. :class:`CompiledFinder`, first on ``sys.meta_path`` (``generaldomo/__init__.py``
puts it there), serves them when the build is in use: all of them or none, since compiled modules call each other
directly and a mix would hold two versions of a class. It is not in use (the ``.py`` modules are imported, as
without a build) when ``GENERALDOMO_PURE_PYTHON=1`` is set, when there is no build, or when any compiled
module's source differs from the one it was compiled from (a source edited after the build: the build is stale,
and ``generaldomo doctor`` says so). The choice is made once, at the first import of a compiled module's name.
This module imports nothing of the package.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

__all__ = [
    "DIRECTORY",
    "MANIFEST",
    "PURE_PYTHON",
    "CompiledFinder",
    "Manifest",
    "decide",
    "description",
    "in_use",
    "state",
]

PURE_PYTHON = "GENERALDOMO_PURE_PYTHON"  # set (not "0"): the pure-Python path, for this and the C accelerator
PACKAGE = Path(__file__).resolve().parent
DIRECTORY = PACKAGE / "_compiled"
MANIFEST = DIRECTORY / "manifest.json"


class Manifest:
    """What a build holds: the shared library's module name and file, and by module name the compiled file and
    the SHA-256 of the source it was compiled from (paths relative to :data:`DIRECTORY`, sources to the
    package's parent folder)."""

    __slots__ = ("library", "library_file", "modules")

    def __init__(self, library: str, library_file: str, modules: dict[str, tuple[str, str, str]]) -> None:
        self.library = library
        self.library_file = library_file
        self.modules = modules  # name -> (compiled file, source file, source's SHA-256)

    def to_json(self) -> str:
        modules = {name: {"file": f, "source": s, "sha256": h} for name, (f, s, h) in sorted(self.modules.items())}
        return json.dumps({"library": self.library, "library_file": self.library_file, "modules": modules}, indent=1)

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        data = json.loads(text)
        modules = {name: (entry["file"], entry["source"], entry["sha256"]) for name, entry in data["modules"].items()}
        return cls(data["library"], data["library_file"], modules)


def source_digest(path: Path) -> str:
    """The SHA-256 of a source file, as the manifest holds it."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def stale(manifest: Manifest, root: Path = PACKAGE.parent) -> list[str]:
    """The modules whose source (under ``root``) differs from, or lacks, the one they were compiled from."""
    found = []
    for name, (_, source, digest) in sorted(manifest.modules.items()):
        path = root / source
        if not path.is_file() or source_digest(path) != digest:
            found.append(name)
    return found


@functools.cache
def state() -> tuple[Manifest | None, str]:
    """(the build's manifest when it is in use, else None; a line saying which path runs and why), decided once."""
    return decide(os.environ.get(PURE_PYTHON, "") not in ("", "0"))


def decide(pure: bool, directory: Path = DIRECTORY, root: Path = PACKAGE.parent) -> tuple[Manifest | None, str]:
    """:func:`state` for the build in ``directory`` of the sources under ``root`` (``pure``: not used)."""
    if pure:
        return None, f"pure Python ({PURE_PYTHON} is set)"
    try:
        manifest = Manifest.from_json((directory / MANIFEST.name).read_text())
    except FileNotFoundError:
        return None, "pure Python (the compiled core is not built)"
    except (OSError, ValueError, KeyError, TypeError) as error:
        return None, f"pure Python (the compiled core's manifest is unreadable: {error})"
    changed = stale(manifest, root)
    if changed:
        shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
        return None, (
            f"pure Python (the compiled core is stale: {shown} changed since it was built; "
            "rebuild it with `GENERALDOMO_COMPILE_INPLACE=1 python setup.py build_ext --inplace`)"
        )
    missing = [name for name, (file, _, _) in manifest.modules.items() if not (directory / file).is_file()]
    if missing or not (directory / manifest.library_file).is_file():
        return None, f"pure Python (the compiled core is incomplete: {(missing or [manifest.library])[0]} is missing)"
    return manifest, f"compiled (mypyc: {len(manifest.modules)} modules of generaldomo.sansio)"


def in_use() -> bool:
    """True when the compiled modules are the ones imported."""
    return state()[0] is not None


def description() -> str:
    """Which path the sans-IO core runs (as decided), for ``generaldomo doctor``."""
    return state()[1]


class CompiledFinder(importlib.abc.MetaPathFinder):
    """Finds the compiled modules of the build in use (see the module docstring); nothing when none is."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if not fullname.startswith("generaldomo.") and not fullname.endswith("__mypyc"):
            return None
        manifest = state()[0]
        if manifest is None:
            return None
        if fullname == manifest.library:
            file = manifest.library_file
        elif fullname in manifest.modules:
            file = manifest.modules[fullname][0]
        else:
            return None
        location = str(DIRECTORY / file)
        loader = importlib.machinery.ExtensionFileLoader(fullname, location)
        return importlib.util.spec_from_file_location(fullname, location, loader=loader)


def install() -> None:
    """Put a :class:`CompiledFinder` first on ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, CompiledFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, CompiledFinder())

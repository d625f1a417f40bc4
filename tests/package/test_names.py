"""One name, one meaning: no two modules of the package define a public class or type alias of the same name, so
that a name read anywhere in the code (a ``Worker``, a ``Kind``) says which thing it is without its import."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import generaldomo

PACKAGE = Path(generaldomo.__file__).parent
CAMEL = re.compile(r"[A-Z][a-z0-9]\w*")  # a class or type alias; CONSTANTS and one-letter type variables are not
# Names each module of a family defines for itself, with one meaning in every one of them.
PER_MODULE = {
    "Core": "each part of the broker core: what the part may call of the core (sansio/broker/core/)",
}


def defined(source: str) -> set[str]:
    """The public classes and type aliases (``Name = bytes | int``) a module defines at its top level."""
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(target.id for target in targets if isinstance(target, ast.Name))
    return {name for name in names if CAMEL.fullmatch(name)}


def test_defined_finds_classes_and_aliases_not_constants() -> None:
    source = "class Worker: ...\nAddress = bytes | int\nMAX_HOPS = 8\nT = 1\nclass _Hidden: ...\n"
    assert defined(source) == {"Worker", "Address"}


def test_no_two_modules_define_the_same_public_name() -> None:
    homes: defaultdict[str, list[str]] = defaultdict(list)
    for path in sorted(PACKAGE.rglob("*.py")):
        for name in defined(path.read_text(encoding="utf-8")):
            homes[name].append(str(path.relative_to(PACKAGE)))
    twice = {name: where for name, where in homes.items() if len(where) > 1 and name not in PER_MODULE}
    assert not twice, f"names defined in more than one module (give each meaning its own name): {twice}"

"""Public and private made visible: every module of generaldomo says what it offers (``__all__``); the public API
is ``generaldomo.__all__`` (one list) and the few names of ``apicheck.EXTRAS``, and the API reference documents
exactly those; the README says so. Read from the source (ast) where importing would need an optional extra."""

from __future__ import annotations

import ast
import importlib
import inspect
import sys
import types
from pathlib import Path

import pytest

import generaldomo

PACKAGE = Path(generaldomo.__file__).parent
ROOT = PACKAGE.parent
SOURCE = Path(__file__).resolve().parents[2]  # the checkout: docs/ and README.rst (the package may be installed)
MODULES = sorted(PACKAGE.rglob("*.py"))
SKIPPED_CALLS = ("TypeVar", "ParamSpec", "getLogger")  # a type variable, a logger: not what a module offers


@pytest.fixture(scope="module")
def apicheck() -> types.ModuleType:
    sys.path.insert(0, str(SOURCE / "docs" / "_ext"))
    try:
        import apicheck
    finally:
        sys.path.pop(0)
    return apicheck


def declared(tree: ast.Module) -> list[str] | None:
    """The module's ``__all__`` (None: it has none)."""
    for node in tree.body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(target, ast.Name) and target.id == "__all__" for target in targets):
            assert node.value is not None
            return list(ast.literal_eval(node.value))
    return None


def offered(tree: ast.Module) -> list[str]:
    """What a module without ``__all__`` should declare: its top-level classes, functions and assigned names that do
    not start with ``_`` (not its type variables or logger), in ruff's order."""
    names = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.append(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            call = node.value.func if isinstance(node.value, ast.Call) else None
            if call is not None and getattr(call, "id", getattr(call, "attr", "")) in SKIPPED_CALLS:
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [target.id for target in targets if isinstance(target, ast.Name)]
    return sorted({name for name in names if not name.startswith("_")}, key=isort_style)


def isort_style(name: str) -> tuple[int, str]:
    """The order ruff keeps ``__all__`` in: constants, then classes, then the rest."""
    return (0 if name.isupper() and len(name) > 1 else 1 if name[:1].isupper() else 2, name)


def bound(tree: ast.Module) -> set[str]:
    """Every name the module binds at its top level (imports, definitions, assignments, in ``if`` and ``try`` too),
    and those its ``__getattr__`` gives (the errors' old paths: ``moved_names(__name__, home, [...])``)."""
    names: set[str] = set()
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, ast.If | ast.Try | ast.With):
            for field in ("body", "orelse", "finalbody", "handlers"):
                pending.extend(getattr(node, field, []))
        elif isinstance(node, ast.ExceptHandler):
            pending.extend(node.body)
    return names


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_every_module_declares_what_it_offers() -> None:
    missing = []
    for path in MODULES:
        tree = ast.parse(path.read_text())
        if declared(tree) is None:
            names = offered(tree)
            line = f"__all__ = {names!r}".replace("'", '"') if names else "__all__: list[str] = []"
            missing.append(f"{path.relative_to(ROOT)}: add after its imports: {line}")
    assert not missing, "every module says what it offers (its public names, or none):\n" + "\n".join(missing)
    assert len(MODULES) >= 100


@pytest.mark.parametrize("path", MODULES, ids=lambda path: str(path.relative_to(PACKAGE)))
def test_each_module_s_all_names_what_it_has(path: Path) -> None:
    tree = ast.parse(path.read_text())
    names = declared(tree) or []
    assert len(names) == len(set(names)), f"{module_name(path)}.__all__ lists a name twice"
    unknown = sorted(set(names) - bound(tree))
    assert not unknown, f"{module_name(path)}.__all__ names what it does not have: {unknown}"


def test_the_public_api_is_one_list_in_generaldomo() -> None:
    """``generaldomo.__all__`` names every public attribute of the package (its eager imports and its lazy ones),
    and each of its names is there."""
    assert len(generaldomo.__all__) == len(set(generaldomo.__all__))
    missing = [name for name in generaldomo.__all__ if not hasattr(generaldomo, name)]
    assert not missing, f"generaldomo.__all__ names what generaldomo lacks: {missing}"
    attributes = {name for name in dir(generaldomo) if not name.startswith("_")}
    modules = {name for name in attributes if isinstance(getattr(generaldomo, name), types.ModuleType)}
    unlisted = sorted(attributes - modules - set(generaldomo.__all__))
    assert not unlisted, f"public names of generaldomo missing from its __all__: {unlisted}"


def test_the_api_reference_documents_exactly_the_public_api(apicheck: types.ModuleType) -> None:
    """A page for each class and function of ``generaldomo.__all__`` and ``apicheck.EXTRAS``, and for nothing
    else; none named twice (an extra that ``generaldomo`` exports too belongs in ``generaldomo.__all__`` alone)."""
    expected = set()
    for module, name in apicheck.names():
        value = getattr(importlib.import_module(module), name)
        if inspect.isclass(value) or inspect.isfunction(value):
            expected.add((module, name))
    documented = [(module, name) for module, name, _ in apicheck.public()]
    assert len(documented) == len(set(documented))
    assert set(documented) == expected, f"listed twice: {sorted(expected - set(documented))}"
    assert {name for module, name in documented if module == "generaldomo"} <= set(generaldomo.__all__)


def test_each_extra_is_in_its_module_s_all_and_the_readme_names_its_module(apicheck: types.ModuleType) -> None:
    readme = (SOURCE / "README.rst").read_text()
    unlisted, unnamed = [], []
    for extra in apicheck.EXTRAS:
        module, name = extra.rsplit(".", 1)
        if name not in importlib.import_module(module).__all__:
            unlisted.append(extra)
        if f"``{module}``" not in readme:
            unnamed.append(module)
    assert not unlisted, f"add these to their module's __all__ (public names): {unlisted}"
    assert not unnamed, f"README.rst's paragraph on the public API does not name these modules: {sorted(set(unnamed))}"

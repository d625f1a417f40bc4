"""The layers of the package: no import runs upward between its parts (:data:`PARTS`), the IO-free subpackage
imports nothing that does IO, and inside it no import runs upward between its sub-packages (:data:`BELOW`)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import generaldomo

PACKAGE = Path(generaldomo.__file__).parent
SANSIO = sorted((PACKAGE / "sansio").rglob("*.py"))
# The IO-free layer's sub-packages, each with the ones right below it: a module may import its own sub-package's
# modules and those of every sub-package below its own (the closure of this table), never one above or beside it.
# "" is the package root's own modules (the state-machine style, the log limiter...), the bottom. A new
# sub-package must be given its place here (test_every_sub_package_has_its_place).
BELOW: dict[str, tuple[str, ...]] = {
    "": (),
    "wire": ("",),
    "config": ("wire",),
    "peer": ("config",),
    "broker.flow": ("config",),
    "broker.accounts": ("config",),
    "broker.services": ("broker.flow",),
    "broker.services.resolvers": ("broker.services",),
    "broker": ("broker.services.resolvers", "broker.accounts"),
    "broker.core": ("broker",),
}
# The package's parts (its top-level modules and sub-packages), each with the ones right below it, as BELOW:
# the errors at the bottom, then the IO-free layer, the IO layer, the peers, the public names of
# generaldomo/__init__.py (""), and what builds on them. A new part must be given its place here.
PARTS: dict[str, tuple[str, ...]] = {
    "errors": (),
    "compat": (),
    "compiled": (),
    "draft": (),
    "sansio": ("errors", "compat"),
    "io": ("sansio",),
    "peers": ("io",),
    "": ("peers", "compat", "compiled"),
    "ray": ("peers",),
    "dashboard": ("",),
    "cpp": ("", "draft"),
    "cli": ("dashboard", "cpp"),
    "__main__": ("cli",),
}
FORBIDDEN = ("zmq", "socket", "select", "selectors", "threading", "time", "asyncio", "generaldomo.io")


def imported(source: str, package: str) -> set[str]:
    """Every module that ``source`` (a module of ``package``) imports, relative imports resolved."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0]
                base = f"{parent}.{base}" if base else parent
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def forbidden(names: set[str]) -> list[str]:
    return sorted(n for n in names if any(n == f or n.startswith(f"{f}.") for f in FORBIDDEN))


def package_of(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts if path.name == "__init__.py" else parts[:-1])


def below(place: str, table: dict[str, tuple[str, ...]] = BELOW) -> set[str]:
    """Every place below ``place`` in ``table`` (:data:`BELOW` or :data:`PARTS`), at any depth."""
    found: set[str] = set()
    todo = list(table[place])
    while todo and len(found) <= len(table):
        name = todo.pop()
        if name not in found:
            found.add(name)
            todo.extend(table[name])
    return found


def place_of(module: str, root: str = "generaldomo.sansio", table: dict[str, tuple[str, ...]] = BELOW) -> str:
    """The place in ``table`` that ``module`` (a dotted name inside ``root``) belongs to: the deepest; ``""``, the
    root's own, for a name no place begins (a module of the root, or a name its ``__init__`` holds)."""
    inside = module.removeprefix(root).removeprefix(".")
    places = [name for name in table if name and (inside == name or inside.startswith(f"{name}."))]
    return max(places, key=len, default="")


def upward(
    source: str, module: str, root: str = "generaldomo.sansio", table: dict[str, tuple[str, ...]] = BELOW
) -> list[str]:
    """The imports of ``source`` (the module named ``module``) that run upward or sideways between the places of
    ``table`` inside ``root``."""
    own = place_of(module, root, table)
    allowed = {own} | below(own, table)
    package = module if module.endswith(".__init__") else module.rsplit(".", 1)[0]
    names = imported(source, package.removesuffix(".__init__"))
    inside = (n for n in names if n == root or n.startswith(f"{root}."))
    return sorted(n for n in inside if place_of(n, root, table) not in allowed)


def module_of(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)


MODULES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_import_runs_upward_between_the_parts_of_the_package(path: Path) -> None:
    own = place_of(module_of(path).removesuffix(".__init__"), "generaldomo", PARTS)
    wrong = upward(path.read_text(), module_of(path), "generaldomo", PARTS)
    assert not wrong, f"{path.relative_to(PACKAGE)} ({own or 'generaldomo'}) imports from above it: {wrong}"


def test_every_part_of_the_package_has_its_place() -> None:
    found = {path.stem for path in PACKAGE.glob("*.py")} | {path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    found = {name.replace("__init__", "") for name in found}
    assert found == set(PARTS), f"give each part of the package its place in PARTS: {sorted(found ^ set(PARTS))}"


def test_the_parts_are_in_order() -> None:
    for name in PARTS:
        assert name not in below(name, PARTS), f"{name!r} is below itself"
    assert below("", PARTS) == {"peers", "io", "sansio", "errors", "compat", "compiled"}
    assert below("cli", PARTS) == set(PARTS) - {"cli", "__main__", "ray"}
    assert upward(
        "from generaldomo import Client\nfrom generaldomo.cli import main\n",
        "generaldomo.io.hub.links",
        "generaldomo",
        PARTS,
    ) == ["generaldomo", "generaldomo.Client", "generaldomo.cli", "generaldomo.cli.main"]


def test_the_io_free_layer_is_there() -> None:
    assert {"core.py", "protocol.py", "session.py", "peer_events.py"} <= {path.name for path in SANSIO}


@pytest.mark.parametrize("path", SANSIO, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_io_free_modules_import_no_io(path: Path) -> None:
    assert not forbidden(imported(path.read_text(), package_of(path))), f"{path.name} imports IO"


def test_the_check_catches_every_form_of_import() -> None:
    source = "import time\nfrom zmq.utils import monitor\nfrom ..io import links\nfrom . import flow\n"
    assert forbidden(imported(source, "generaldomo.sansio")) == [
        "generaldomo.io",
        "generaldomo.io.links",
        "time",
        "zmq.utils",
        "zmq.utils.monitor",
    ]


@pytest.mark.parametrize("path", SANSIO, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_import_runs_upward_between_the_sub_packages(path: Path) -> None:
    wrong = upward(path.read_text(), module_of(path))
    assert not wrong, (
        f"{path.relative_to(PACKAGE)} ({place_of(module_of(path)) or 'sansio'}) imports from above or beside it: "
        f"{wrong}; move what it needs down, or, if the order itself should change, BELOW here and its list in "
        "docs/explanation/architecture.rst"
    )


def test_every_sub_package_has_its_place() -> None:
    found = {
        module_of(init).removeprefix("generaldomo.sansio").removesuffix(".__init__").removeprefix(".")
        for init in (PACKAGE / "sansio").rglob("__init__.py")
    }
    assert found == set(BELOW), f"give each sub-package its place in BELOW: {sorted(found ^ set(BELOW))}"


def test_the_order_is_an_order() -> None:
    """Below never loops back: no sub-package is below itself, and the root is below every other."""
    for name in BELOW:
        assert name not in below(name), f"{name!r} is below itself"
        assert name == "" or "" in below(name)
    assert below("broker.core") == set(BELOW) - {"broker.core", "peer"}
    assert "broker" not in below("peer") and "peer" not in below("broker.core")


def test_the_order_check_catches_an_upward_import() -> None:
    source = (
        "from generaldomo.sansio.broker import core\n"
        "from generaldomo.sansio.peer.session import ClientSession\n"
        "from ..config import settings\n"
        "from . import limits\n"
        "from generaldomo.sansio import machine\n"
    )
    assert upward(source, "generaldomo.sansio.wire.protocol") == [
        "generaldomo.sansio.broker",
        "generaldomo.sansio.broker.core",
        "generaldomo.sansio.config",
        "generaldomo.sansio.config.settings",
        "generaldomo.sansio.peer.session",
        "generaldomo.sansio.peer.session.ClientSession",
    ]
    assert upward(source.split("\n", 2)[2], "generaldomo.sansio.broker.core") == []


# The IO layer's sides, each a sub-package of generaldomo.io: neither imports the other, nor what drives them both
# (the broker process and the bridge, at the IO layer's root); both may import the root's shared modules.
IO_SIDES = ("hub", "peer")
IO_DRIVERS = ("broker", "bridge")
IO_SIDE_MODULES = sorted(path for side in IO_SIDES for path in (PACKAGE / "io" / side).rglob("*.py"))


def across_sides(source: str, module: str) -> list[str]:
    """The imports of ``source`` (a module of an IO side) of the other side or of the drivers."""
    side = module.split(".")[2]
    package = module.rsplit(".", 1)[0]
    banned = [f"generaldomo.io.{name}" for name in (*IO_SIDES, *IO_DRIVERS) if name != side]
    names = imported(source, package)
    return sorted(n for n in names if any(n == b or n.startswith(f"{b}.") for b in banned))


@pytest.mark.parametrize("path", IO_SIDE_MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_import_runs_between_the_sides_of_the_io_layer(path: Path) -> None:
    wrong = across_sides(path.read_text(), module_of(path))
    assert not wrong, f"{path.relative_to(PACKAGE)} imports the other side or a driver: {wrong}"


def test_every_sub_package_of_the_io_layer_is_a_side() -> None:
    found = {init.parent.name for init in (PACKAGE / "io").glob("*/__init__.py")}
    assert found == set(IO_SIDES), f"give each sub-package of io its place in IO_SIDES: {sorted(found ^ set(IO_SIDES))}"


def test_the_sides_check_catches_a_crossing() -> None:
    source = (
        "from generaldomo.io.peer.connection import Curve\n"
        "from generaldomo.io import transport\n"
        "from ..broker import x\n"
    )
    assert across_sides(source, "generaldomo.io.hub.links") == [
        "generaldomo.io.broker",
        "generaldomo.io.broker.x",
        "generaldomo.io.peer.connection",
        "generaldomo.io.peer.connection.Curve",
    ]

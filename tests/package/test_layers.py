"""The layers of the package: the IO-free subpackage imports nothing that does IO."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import generaldomo

PACKAGE = Path(generaldomo.__file__).parent
SANSIO = sorted((PACKAGE / "sansio").rglob("*.py"))
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

"""Every file the package reads or writes goes through :mod:`generaldomo.io.files` (one opener, one writer): a
call that opens, reads or writes a file anywhere else in the package fails this test, naming it."""

from __future__ import annotations

import ast
from pathlib import Path

import generaldomo

PACKAGE = Path(generaldomo.__file__).parent
OPENER = PACKAGE / "io" / "files.py"
# generaldomo.draft builds libzmq from source for developers: its build trees, logs and archives are its own;
# generaldomo.compiled reads the package's own files (its build's manifest, the sources it hashes) at the first
# import of the package, below the IO layer
EXEMPT = {PACKAGE / "draft.py", PACKAGE / "compiled.py"}
# calls that open, read or write a file by name (as a function or a method: builtins.open, os.open, Path.open...)
FILE_CALLS = {
    "open",
    "read_text",
    "read_bytes",
    "write_text",
    "write_bytes",
    "mkstemp",
    "mkdtemp",
    "NamedTemporaryFile",
    "TemporaryFile",
    "copyfile",
    "copy2",
    "copytree",
    "load_certificate",
    "create_certificates",
    "touch",
    "fdopen",
}
LOADERS = {
    ("tomllib", "load"),
    ("json", "load"),
    ("pickle", "load"),
    ("shutil", "copy"),
}  # a module's reader of an open file


def file_calls(path: Path, root: Path = PACKAGE.parent) -> list[str]:
    """``FILE:LINE: call`` for each call in ``path`` that opens, reads or writes a file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Call):
            continue
        function = node.func
        if isinstance(function, ast.Name):
            name, owner = function.id, ""
        elif isinstance(function, ast.Attribute):
            name = function.attr
            owner = function.value.id if isinstance(function.value, ast.Name) else ""
        else:
            continue
        if (name in FILE_CALLS and owner not in {"dict", "list", "webbrowser"}) or (owner, name) in LOADERS:
            found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(function)}(...)")
    return found


def test_no_file_is_opened_outside_the_opener() -> None:
    modules = sorted(set(PACKAGE.rglob("*.py")) - EXEMPT - {OPENER})
    assert len(modules) > 50
    found = [call for path in modules for call in file_calls(path)]
    assert found == [], "open files through generaldomo.io.files:\n" + "\n".join(found)


def test_the_check_finds_a_direct_open(tmp_path: Path) -> None:
    planted = tmp_path / "module.py"
    planted.write_text("import tomllib\nfrom pathlib import Path\n\nPath('x').read_text()\nopen('y')\n"
                       "with open('z', 'rb') as f:\n    tomllib.load(f)\n")  # fmt: skip
    assert [call.split(": ")[0] for call in file_calls(planted, tmp_path)] == [f"module.py:{n}" for n in (4, 5, 6, 7)]

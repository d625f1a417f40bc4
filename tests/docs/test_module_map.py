"""The module map for contributors (docs/explanation/architecture.rst) lists every module of the package."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "generaldomo"
MAP = ROOT / "docs" / "explanation" / "architecture.rst"


def modules() -> list[str]:
    """Every module of the package (Python, the C accelerator and its stubs), relative to ``generaldomo/``."""
    found = [p for kind in ("*.py", "*.c", "*.pyi") for p in PACKAGE.rglob(kind)]
    return sorted(str(p.relative_to(PACKAGE)) for p in found if "__pycache__" not in p.parts)


def test_every_module_is_in_the_map() -> None:
    text = MAP.read_text()
    missing = [name for name in modules() if f"``{name}``" not in text]
    assert missing == [], f"add a row for each to the module map of {MAP.relative_to(ROOT)}: {missing}"


def test_the_map_names_no_module_that_is_gone() -> None:
    """A row's path (in its first column) is a file of the package."""
    rows = [line.split("``")[1] for line in MAP.read_text().splitlines() if line.startswith("   * - ``")]
    gone = [row for row in rows if not (PACKAGE / row).exists()]
    assert rows and gone == [], gone

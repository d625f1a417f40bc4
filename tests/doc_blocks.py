"""The code blocks of README.rst and the guide (docs/), as the tests that run them read them.

Every block is a directive: ``.. code-block:: LANGUAGE`` (or ``.. literalinclude:: FILE``, whose file a test runs)
with, in its options, what becomes of it (``tests/docs/test_doc_blocks.py`` fails for a block that says nothing):

- ``:name: NAME``: a test runs it, fetching it by that name (:func:`named`, ``named("NAME")`` in the test's source);
- ``:class: not-run``: shown, not run (it needs what a test run lacks: other hosts, Docker, a Ray cluster);
- ``:class: output``: what a command prints or a file holds, not something to run;
- neither, for ``python``: the block is a whole program, run as it is by ``tests/docs/test_docs.py``.

A bare literal block (a paragraph ending in ``::``) cannot carry options, so the guide has none, but in the protocol
(``docs/protocol.rst``), whose literal blocks are byte layouts and tables checked by its own tests.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
DIRECTIVE = re.compile(r"^(?P<indent> *)\.\. (?P<kind>code-block|code|sourcecode|literalinclude)::\s*(?P<arg>.*)$")
OPTION = re.compile(r"^\s*:(?P<key>[\w-]+):\s*(?P<value>.*)$")
BARE_EXEMPT = ("docs/protocol.rst",)  # byte layouts and tables of the wire format (tests/docs/test_docs.py)


@dataclass(frozen=True)
class Block:
    """One code block: where it is, its language (or the file it includes), its options and its text."""

    path: Path
    line: int
    kind: str  # "code-block", "literalinclude" or "literal" (a bare ``::`` block)
    language: str
    text: str
    options: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str | None:
        return self.options.get("name")

    @property
    def classes(self) -> set[str]:
        return set(self.options.get("class", "").split())

    @property
    def document(self) -> str:
        """The document's path, from the repository's root when it is in it."""
        return str(self.path.relative_to(ROOT)) if self.path.is_relative_to(ROOT) else str(self.path)

    @property
    def where(self) -> str:
        return f"{self.document}:{self.line}"


def documents() -> list[Path]:
    """README.rst and the guide's own pages (not the pages the docs build writes)."""
    pages = [p for p in sorted(DOCS.rglob("*.rst")) if p.relative_to(DOCS).parts[0] not in ("_build", "api")]
    return [ROOT / "README.rst", *pages]


def _body(lines: list[str], start: int, indent: int) -> tuple[str, int]:
    """The indented lines from ``start`` (deeper than ``indent``), dedented, and the index after them."""
    end = start
    while end < len(lines) and (not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip()) > indent):
        end += 1
    return textwrap.dedent("\n".join(lines[start:end])).strip("\n") + "\n", end


def blocks(path: Path) -> list[Block]:
    """The code blocks of one reST file, in order."""
    lines = path.read_text().splitlines()
    found = []
    number = 0
    while number < len(lines):
        line = lines[number]
        directive = DIRECTIVE.match(line)
        if directive:
            indent = len(directive["indent"])
            options: dict[str, str] = {}
            number += 1
            while number < len(lines) and (option := OPTION.match(lines[number])) and lines[number].strip():
                options[option["key"]] = option["value"].strip()
                number += 1
            text, after = _body(lines, number, indent)
            kind = "literalinclude" if directive["kind"] == "literalinclude" else "code-block"
            if kind == "literalinclude":
                text = (path.parent / directive["arg"].strip()).read_text()
            found.append(Block(path, number, kind, directive["arg"].strip(), text, options))
            number = after
            continue
        stripped = line.strip()
        if stripped.endswith("::") and not stripped.startswith(".."):
            indent = len(line) - len(line.lstrip())
            if stripped.startswith(("- ", "* ")):
                indent += 2
            text, after = _body(lines, number + 1, indent)
            if text.strip():
                found.append(Block(path, number + 1, "literal", "", text))
            number = after
            continue
        number += 1
    return found


def every_block() -> list[Block]:
    """Every code block of README.rst and the guide."""
    return [block for path in documents() for block in blocks(path)]


def named(name: str) -> str:
    """The text of the block named ``name`` (``:name:``), dedented; KeyError if none or several have it."""
    found = [block for block in every_block() if block.name == name]
    if len(found) != 1:
        raise KeyError(f"{len(found)} blocks are named {name!r} in README.rst and docs/")
    return found[0].text

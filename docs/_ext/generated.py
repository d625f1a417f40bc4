"""The parts of the guide made from the code at build time, so that they cannot disagree with it.

- ``api/``: one page per public class or function (:mod:`apicheck`: ``generaldomo.__all__`` and
  ``apicheck.EXTRAS``), written at ``config-inited``; every rule of the API reference that is broken is a warning
  (``-W`` makes it an error). The folder is generated, not kept in git; a page is rewritten only when its text
  changes, so incremental builds stay incremental.
- ``.. generaldomo-settings::``: the table of every setting of the configurable commands (their knobs and options:
  :func:`generaldomo.cli.settings_table`).
- ``.. generaldomo-cli::``: every command's ``--help``, from its own parser.
- ``.. generaldomo-status-fields::``: the fields of the ``mmi.status`` report, from ``docs/status.schema.json``.
- ``.. generaldomo-flow-limits::``: the table of a service's flow limits, from their declarations
  (:func:`generaldomo.sansio.broker.flow.declaration.rst_table`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apicheck
from docutils import nodes
from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.ext.autodoc.mock import mock
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

log = logging.getLogger(__name__)

DOCS = Path(__file__).resolve().parents[1]
SCHEMA = DOCS / "status.schema.json"
DRAFT_PAGE = "``generaldomo.draft``\n======================\n\n.. automodule:: generaldomo.draft\n"
HELP_COLUMNS = "100"  # the width the commands' help is formatted for in the guide


def write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` unless it is there already."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def api_pages() -> list[tuple[str, str]]:
    """``(page name, page text)`` per public class or function (:func:`apicheck.public`): ``generaldomo``'s
    named as they are, the other modules' by their full names."""
    pages = []
    for module, name, value in apicheck.public():
        page = name if module == "generaldomo" else f"{module}.{name}"
        title = f"``{page}``"
        directive = "autoclass" if inspect.isclass(value) else "autofunction"
        text = f"{title}\n{'=' * len(title)}\n\n.. {directive}:: {module}.{name}\n"
        up_to = apicheck.inherited_up_to(value) if inspect.isclass(value) else None
        if up_to is not None:  # a mixin's members (no page of its own) are shown as the class's
            text += f"   :inherited-members: {up_to}\n"
        pages.append((page, text))
    return sorted(pages, key=lambda page: ("." in page[0], page[0].lower()))


def missing(modules: tuple[str, ...]) -> list[str]:
    """The ``modules`` that are not installed (mocked while the API pages are made)."""
    return [name for name in modules if importlib.util.find_spec(name) is None]


def toctree(title: str, names: list[str], intro: str = "") -> str:
    """An index page listing ``names``."""
    entries = "".join(f"   {name}\n" for name in names)
    return f"{title}\n{'=' * len(title)}\n\n{intro}.. toctree::\n   :maxdepth: 1\n\n{entries}"


def generate(app: Sphinx, config: Config) -> None:
    """Write ``api/``."""
    with mock(missing(apicheck.OPTIONAL)):  # the extras' modules (ray, the dashboard's) need not be installed
        api = api_pages()
        for problem in apicheck.problems():
            log.warning("API reference: %s", problem)
    pages = {f"{name}.rst" for name, _ in api} | {"index.rst", "draft.rst"}
    for stale in (DOCS / "api").glob("*.rst"):  # a name no longer public (or renamed) loses its page
        if stale.name not in pages:
            stale.unlink()
    for name, text in api:
        write(DOCS / "api" / f"{name}.rst", text)
    intro = (
        "The public API, each class and function with its parameters and an example: the names importable from "
        "``generaldomo`` (``generaldomo.__all__``), then the few imported from a module of their own; and the "
        "draft-socket installer. Any other module or name of generaldomo may change without notice.\n\n"
    )
    write(DOCS / "api" / "index.rst", toctree("API", [*(name for name, _ in api), "draft"], intro))
    write(DOCS / "api" / "draft.rst", DRAFT_PAGE)


@contextlib.contextmanager
def columns(width: str) -> Iterator[None]:
    """argparse formats help for ``$COLUMNS`` characters: this width while the block runs."""
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = width
    try:
        yield
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before


def literal(text: str) -> str:
    """``text`` as a reST literal block."""
    return "::\n\n" + "".join(f"    {line}\n" if line.strip() else "\n" for line in text.splitlines()) + "\n"


def cli_text() -> str:
    """A section per command: its one-line purpose and its ``--help``, as its parser prints it."""
    from generaldomo import cli

    with columns(HELP_COLUMNS):
        top = cli.parser()
        parts = ["``generaldomo``\n~~~~~~~~~~~~~~~\n\n", literal(top.format_help())]
        for command in cli.COMMANDS:
            title = f"``generaldomo {command.name}``"
            parts.append(f"{title}\n{'~' * len(title)}\n\n{command.help}\n\n")
            parts.append(literal(cli._SUBPARSERS[command.name].format_help()))
    return "".join(parts)


def status_fields(schema: dict[str, Any]) -> str:
    """A table of every field of the status report: its path, JSON type and description."""
    defs = schema.get("$defs", {})
    rows: list[tuple[str, str, str]] = []

    def walk(node: dict[str, Any], path: str, seen: tuple[str, ...]) -> None:
        ref = node.get("$ref")
        if ref is not None:
            name = ref.rsplit("/", 1)[1]
            if name in seen:
                return
            walk({**defs[name], **{k: v for k, v in node.items() if k != "$ref"}}, path, (*seen, name))
            return
        kind = node.get("type", "")
        shown = " or ".join(kind) if isinstance(kind, list) else str(kind)
        if path:
            rows.append((path, shown, " ".join(str(node.get("description", "")).split())))
        for key, child in node.get("properties", {}).items():
            walk(child, f"{path}.{key}" if path else key, seen)
        items = node.get("items")
        if isinstance(items, dict):
            walk(items, f"{path}[]", seen)
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            walk(extra, f"{path}.*", seen)

    walk(schema, "", ())
    lines = [".. list-table::", "   :header-rows: 1", "   :widths: 30 12 58", "", "   * - field", "     - type"]
    lines.append("     - what it is")
    for path, kind, description in rows:
        lines += [f"   * - ``{path}``", f"     - {kind or '-'}", f"     - {description or '-'}"]
    return "\n".join(lines) + "\n"


class Generated(SphinxDirective):
    """A directive whose content is reST made by :meth:`text`."""

    def text(self) -> str:
        raise NotImplementedError

    def run(self) -> list[nodes.Node]:
        return list(self.parse_text_to_nodes(self.text(), allow_section_headings=True))


class Settings(Generated):
    """``.. generaldomo-settings::``"""

    def text(self) -> str:
        from generaldomo.cli import settings_table

        return settings_table()


class CommandLine(Generated):
    """``.. generaldomo-cli::``"""

    def text(self) -> str:
        return cli_text()


class StatusFields(Generated):
    """``.. generaldomo-status-fields::``"""

    def text(self) -> str:
        self.env.note_dependency(str(SCHEMA))
        return status_fields(json.loads(SCHEMA.read_text()))


class FlowLimits(Generated):
    """``.. generaldomo-flow-limits::``"""

    def text(self) -> str:
        from generaldomo.sansio.broker.flow.declaration import rst_table
        from generaldomo.sansio.broker.flow.flow import LIMITS

        return rst_table(LIMITS)


def setup(app: Sphinx) -> dict[str, bool]:
    """Register the generator and the directives."""
    app.connect("config-inited", generate)
    app.add_directive("generaldomo-settings", Settings)
    app.add_directive("generaldomo-cli", CommandLine)
    app.add_directive("generaldomo-status-fields", StatusFields)
    app.add_directive("generaldomo-flow-limits", FlowLimits)
    return {"parallel_read_safe": True}

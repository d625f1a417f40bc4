"""Write the pages that follow other sources: one guide page per README.rst section, one API page per class.

At ``config-inited`` it (re)writes ``guide/`` from README.rst's level-2 sections (``----`` underlines) and
``api/`` from the public names (:mod:`apicheck`: ``generaldomo.__all__`` and the modules the guide names), and
warns of every rule of the API reference that is broken (``-W`` makes that an error); both folders are
generated, not kept in git. A page is rewritten only
when its text changes, so incremental builds stay incremental.
"""

from __future__ import annotations

import importlib.util
import inspect
import re
from pathlib import Path

import apicheck
from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.ext.autodoc.mock import mock
from sphinx.util import logging

log = logging.getLogger(__name__)

DOCS = Path(__file__).resolve().parents[1]
README = DOCS.parent / "README.rst"
DRAFT_PAGE = "``generaldomo.draft``\n======================\n\n.. automodule:: generaldomo.draft\n"
HEADING = re.compile(r"^(?P<title>\S.*)\n(?P<line>-{3,})$", re.MULTILINE)


def slug(title: str) -> str:
    """A file name for a section title."""
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


def write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` unless it is there already."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def guide_pages(readme: str) -> list[tuple[str, str]]:
    """``(slug, page text)`` per level-2 section of the README, images relative to the docs folder."""
    marks = list(HEADING.finditer(readme))
    pages = []
    for mark, after in zip(marks, [*marks[1:], None], strict=True):
        body = readme[mark.start() : after.start() if after else len(readme)]
        body = body.replace(".. image:: docs/", ".. image:: /").replace(mark["line"], "=" * len(mark["line"]), 1)
        pages.append((slug(mark["title"]), body))
    return pages


def overview(readme: str) -> str:
    """The README's text between its title and its first section."""
    first = HEADING.search(readme)
    return readme[readme.index("\n\n") : first.start() if first else len(readme)].lstrip()


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
    """Write ``guide/`` and ``api/``."""
    readme = README.read_text()
    guide = guide_pages(readme)
    for name, text in guide:
        write(DOCS / "guide" / f"{name}.rst", text)
    write(DOCS / "guide" / "index.rst", toctree("User guide", [name for name, _ in guide], overview(readme)))
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
        "The public classes and functions: those importable from ``generaldomo``, then those of the modules the "
        "user guide names (each with its parameters and an example); and the draft-socket installer.\n\n"
    )
    write(DOCS / "api" / "index.rst", toctree("API reference", [*(name for name, _ in api), "draft"], intro))
    write(DOCS / "api" / "draft.rst", DRAFT_PAGE)


def setup(app: Sphinx) -> dict[str, bool]:
    """Register the generator."""
    app.connect("config-inited", generate)
    return {"parallel_read_safe": True}

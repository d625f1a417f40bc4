"""Sphinx configuration: the guide (tutorial, how-to guides, reference, explanation), the protocol and the API.

``tox -e docs`` builds it with warnings as errors. ``_ext/generated.py`` writes the API pages at build time (from
``generaldomo.__all__``) and gives the directives that make the settings table, the commands' options and the
status report's fields from the code, so they follow it.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))

import generaldomo  # noqa: E402

project = "generaldomo"
author = "generaldomo maintainers"
copyright = "2026, generaldomo maintainers"
release = version = generaldomo.__version__

extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.viewcode", "generated"]
exclude_patterns = ["_build"]
html_theme = "furo"
html_title = f"generaldomo {release}"
html_extra_path = ["status.schema.json"]  # linked from protocol.rst and reference/status.rst
highlight_language = "none"  # literal blocks are bytes and shell commands; Python examples say so

autodoc_member_order = "bysource"
autoclass_content = "both"  # a class's docstring, then its __init__'s (which may describe the parameters)
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_mock_imports = ["ray", "starlette", "uvicorn", "a2wsgi"]  # the extras' imports (docs need not install them)

# Cross-references are checked (-n with -W in tox -e docs): the guide's links and every Python role a docstring
# writes. Not checked: the types autodoc writes from annotations (py:class: the standard library's, pyzmq's and
# generaldomo's internal classes have no page here), and docstrings' mentions of internal modules and constants.
nitpicky = True
nitpick_ignore_regex = [("py:class", r".*"), ("py:(mod|data|obj)", r"(generaldomo(\..*)?|[A-Z][A-Z_]*)")]

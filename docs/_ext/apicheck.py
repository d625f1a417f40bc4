"""The API reference's rules, checked: every public name documented, with its parameters and an example.

The public API is ``generaldomo.__all__`` and the names of :data:`EXTRAS` (the few the guide tells users to
import from their own module: the optional parts, the key files, discovery, the pools, the sans-IO sessions);
the reference has a page for each of them and for nothing else. :func:`problems` lists what breaks a rule:

- a public class or function without a docstring, or without an example (a ``>>>`` line or an ``Example``
  section);
- a parameter of a public function, of a public class's constructor or of one of its public methods that its
  docstring does not describe: an entry of its ``Args:`` section, or its name in double backquotes in the text
  (the class's or its ``__init__``'s docstring describes the constructor's, both shown);
- a public method or property without a docstring;
- a name the README or the guide calls (``generaldomo.x.y.name`` or ``from generaldomo.x import name``) that is
  not public.

``generated.py`` reports them as Sphinx warnings (``tox -e docs`` fails on them) and ``tests/docs/test_docs.py``
asserts there are none.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# The public names users import from a module of their own (``module.name``), besides ``generaldomo.__all__``.
EXTRAS = (
    "generaldomo.io.auth.BrokerSecurity",
    *("generaldomo.io.keys.keygen", "generaldomo.io.keys.load_public", "generaldomo.io.keys.load_secret"),
    *("generaldomo.io.beacon.Announcement", "generaldomo.io.beacon.discover", "generaldomo.io.beacon.find_broker"),
    "generaldomo.io.bridge.Bridge",
    *("generaldomo.peers.pool.make_pool", "generaldomo.peers.pool.run_app"),
    "generaldomo.peers.task.TaskContext",
    *("generaldomo.sansio.peer.session.ClientSession", "generaldomo.sansio.peer.session.WorkerSession"),
    *(f"generaldomo.ray.{name}" for name in ("WorkerHost", "WorkerPool", "client", "close", "load_handler")),
    *(f"generaldomo.ray.{name}" for name in ("request", "start_local")),
    *(f"generaldomo.dashboard.{name}" for name in ("Dashboard", "create_app", "create_wsgi_app")),
    *(f"generaldomo.cpp.{name}" for name in ("cflags", "cmake_prefix_path", "include_dir", "libs")),
    *(f"generaldomo.cpp.{name}" for name in ("libzmq_prefix", "pkg_config_path", "prefix")),
)
OPTIONAL = ("ray", "starlette", "uvicorn", "a2wsgi")  # the extras' imports, mocked where they are missing
ROOT = Path(__file__).resolve().parents[2]
_ARGS = re.compile(r"^\s*(?:Args|Arguments|Parameters|Keyword Args|Keyword Arguments):\s*$", re.MULTILINE)
_ENTRY = re.compile(r"^\s+\*{0,2}(\w+)(?:\s*\(.*\))?:", re.MULTILINE)
_EXAMPLE = re.compile(r"^\s*(?:>>> |Examples?:|Example::)", re.MULTILINE)
_DOTTED = re.compile(r"\bgeneraldomo((?:\.[a-z_]+)+)(?:\.|:)([A-Za-z_]\w*)\b")
_FROM = re.compile(r"^\s*from (generaldomo(?:\.\w+)*) import ([\w, ]+)$", re.MULTILINE)


def names() -> list[tuple[str, str]]:
    """``(module, name)`` of the public API: ``generaldomo.__all__``, then :data:`EXTRAS`."""
    package = importlib.import_module("generaldomo")
    extras = [(module, name) for module, name in (extra.rsplit(".", 1) for extra in EXTRAS)]
    return [("generaldomo", name) for name in package.__all__] + extras


def public() -> Iterator[tuple[str, str, Any]]:
    """``(module, name, object)`` of every public name (:func:`names`) that is a class or a function, each object
    once (where it is first listed)."""
    seen: set[int] = set()
    for module_name, name in names():
        value = getattr(importlib.import_module(module_name), name)
        if (inspect.isclass(value) or inspect.isfunction(value)) and id(value) not in seen:
            seen.add(id(value))
            yield module_name, name, value


def described(doc: str) -> set[str]:
    """The names a docstring describes: its ``Args:`` entries and the words it puts in double backquotes."""
    names = set(re.findall(r"``\**(\w+)", doc))
    for section in _ARGS.finditer(doc):
        block = doc[section.end() :].split("\n\n", 1)[0]
        names.update(_ENTRY.findall(block))
    return names


def parameters(function: Callable[..., Any]) -> list[str]:
    """The parameters a caller passes (not ``self`` or ``cls``)."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return []
    return [name for name in signature.parameters if name not in ("self", "cls") and not name.startswith("_")]


def own_members(cls: type) -> Iterator[tuple[str, Any]]:
    """The public methods and properties a class's page shows: those it defines itself, and those of its
    :func:`folded` bases it does not override."""
    seen: set[str] = set()
    for owner in (cls, *folded(cls)):
        for name, value in vars(owner).items():
            if name.startswith("_") or name in seen:
                continue
            seen.add(name)
            if inspect.isfunction(value) or isinstance(value, property | classmethod):
                yield name, value


def folded(cls: type) -> list[type]:
    """The bases whose members a class's page shows as its own (Sphinx's ``:inherited-members:``): generaldomo's
    classes without a page of their own (a mixin such as ``generaldomo.io.failfast.ServingLoop``), up to the
    first base that has one or is not generaldomo's."""
    pages = {id(value) for _, _, value in public()}
    found = []
    for base in cls.__mro__[1:]:
        if not base.__module__.startswith("generaldomo") or id(base) in pages:
            break
        found.append(base)
    return found


def inherited_up_to(cls: type) -> str | None:
    """The ``:inherited-members:`` option's class for ``cls``'s page (the first base not :func:`folded`), or None
    when its folded bases add no public member."""
    bases = folded(cls)
    if not any(name for owner in bases for name in vars(owner) if not name.startswith("_")):
        return None
    return cls.__mro__[1 + len(bases)].__name__


def problems() -> list[str]:
    """Every rule broken (see the module docstring), one sentence each."""
    found: list[str] = []
    documented = set()
    for module, name, value in public():
        where = f"{module}.{name}"
        documented.add(where)
        documented.add(f"{getattr(value, '__module__', module)}.{name}")
        doc = inspect.getdoc(value) or ""
        if not doc:
            found.append(f"{where} has no docstring")
            continue
        if not _EXAMPLE.search(doc):
            found.append(f"{where} has no example (a >>> line or an Example section)")
        if inspect.isclass(value):
            init = vars(value).get("__init__")
            fields = getattr(value, "__attrs_attrs__", None) or getattr(value, "_fields", None)
            constructed = (init is not None or fields is not None) and not getattr(value, "_is_protocol", False)
            given = parameters(init) if constructed else []
            if init is None and fields is not None:
                given = parameters(value)
            init_doc = inspect.getdoc(init) or "" if init is not None else ""
            missing = [p for p in given if p not in described(doc) | described(init_doc)]
            if missing:
                found.append(f"{where}: the docstring does not describe {', '.join(missing)}")
            for member, attribute in own_members(value):
                function = (
                    attribute.fget if isinstance(attribute, property) else getattr(attribute, "__func__", attribute)
                )
                member_doc = inspect.getdoc(function) or ""
                if not member_doc:
                    found.append(f"{where}.{member} has no docstring")
                    continue
                if isinstance(attribute, property):
                    continue
                missing = [p for p in parameters(function) if p not in described(member_doc)]
                if missing:
                    found.append(f"{where}.{member}: the docstring does not describe {', '.join(missing)}")
        else:
            missing = [p for p in parameters(value) if p not in described(doc)]
            if missing:
                found.append(f"{where}: the docstring does not describe {', '.join(missing)}")
    return found + undocumented_in_readme(documented)


def user_documents() -> list[Path]:
    """README.rst and the guide's pages: not the generated API pages, nor the protocol (which names the modules
    that implement each rule, for implementers in other languages)."""
    docs = ROOT / "docs"
    skip = ("_build", "api", "protocol.rst")
    guide = [path for path in sorted(docs.rglob("*.rst")) if path.relative_to(docs).parts[0] not in skip]
    return [ROOT / "README.rst", *guide]


def undocumented_in_readme(documented: set[str]) -> list[str]:
    """The classes and functions the README or the guide tells users to call that are not public names."""
    readme = "\n".join(path.read_text() for path in user_documents())
    named = {(f"generaldomo{path}", name) for path, name in _DOTTED.findall(readme)}
    for module, names in _FROM.findall(readme):
        named.update((module, name.strip()) for name in names.split(","))
    found = []
    for module, name in sorted(named):
        try:
            value = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue  # a module path, or not a name (README's prose)
        if (inspect.isclass(value) or inspect.isfunction(value)) and f"{module}.{name}" not in documented:
            if f"{value.__module__}.{name}" not in documented:
                where = "generaldomo.__all__ or apicheck.EXTRAS"
                found.append(f"the guide calls {module}.{name}, not a public name (add it to {where})")
    return found

"""The module paths of 0.1.0: every one still imports, as the module at its new home, with a DeprecationWarning;
and none is imported before it is asked for, so that ``import generaldomo`` stays small."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

import generaldomo
from generaldomo.compat import MOVED, SANSIO

# What only some users need; ``import generaldomo`` must not load it (the old paths loaded all of it).
NOT_AT_IMPORT = (
    *("generaldomo.cli", "generaldomo.dashboard", "generaldomo.ray", "generaldomo.draft", "generaldomo.io.bridge"),
    *("generaldomo.io.hub.metrics", "generaldomo.sansio.broker.services.resolvers", "prometheus_client"),
)
SMALL = 70  # generaldomo's modules that the public names need today: about 57 of its 100


def loaded_by_import_generaldomo() -> list[str]:
    code = "import json, sys; import generaldomo; print(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    loaded: list[str] = json.loads(result.stdout)
    return loaded


def test_import_generaldomo_loads_what_the_public_names_need_and_no_more() -> None:
    loaded = loaded_by_import_generaldomo()
    ours = [name for name in loaded if name.split(".")[0] == "generaldomo"]
    unwanted = [name for name in loaded if name.startswith(NOT_AT_IMPORT)]
    assert not unwanted, f"import generaldomo loads {unwanted}"
    assert not [name for name in ours if name.removeprefix("generaldomo.") in MOVED], "an old path was made eagerly"
    assert len(ours) <= SMALL, f"import generaldomo loads {len(ours)} of its modules: {ours}"


@pytest.fixture
def forgotten(monkeypatch: pytest.MonkeyPatch):
    """The old paths as before their first use: not in sys.modules, not attributes of the package."""
    for old in MOVED:
        monkeypatch.delitem(sys.modules, f"generaldomo.{old}", raising=False)
        parent, _, name = f"generaldomo.{old}".rpartition(".")
        if parent in sys.modules and name in vars(sys.modules[parent]):  # (its __dict__: a getattr would warn)
            monkeypatch.delattr(sys.modules[parent], name)


@pytest.mark.parametrize("old", sorted(MOVED))
def test_each_old_path_imports_the_module_at_its_new_home_with_a_warning(old: str, forgotten: None) -> None:
    new = importlib.import_module(MOVED[old])
    parent = old.rpartition(".")[0]
    if parent in MOVED:  # its package first, which warns of itself
        with pytest.warns(DeprecationWarning, match=f"generaldomo.{parent} is deprecated"):
            importlib.import_module(f"generaldomo.{parent}")
    with pytest.warns(DeprecationWarning, match=f"generaldomo.{old} is deprecated; import {MOVED[old]}"):
        assert importlib.import_module(f"generaldomo.{old}") is new
    assert sys.modules[f"generaldomo.{old}"] is new
    assert new.__spec__.name == new.__name__ == MOVED[old]  # the module keeps its own spec


@pytest.mark.parametrize("old", sorted(name for name in MOVED if "." not in name))
def test_each_old_module_is_an_attribute_too(old: str, forgotten: None, monkeypatch: pytest.MonkeyPatch) -> None:
    new = importlib.import_module(MOVED[old])
    with pytest.warns(DeprecationWarning, match=f"import {MOVED[old]}"):
        assert getattr(generaldomo, old) is new
    assert generaldomo.__dict__[old] is new  # warned once: later uses find the attribute
    monkeypatch.delattr(generaldomo, old)
    with pytest.warns(DeprecationWarning):
        exec(f"from generaldomo import {old} as module", namespace := {})
    assert namespace["module"] is new


def test_an_old_submodule_path_and_its_names(forgotten: None) -> None:
    with pytest.warns(DeprecationWarning):
        from generaldomo.core import BrokerCore
        from generaldomo.resolvers.attributes import AttributeResolver
    from generaldomo.sansio.broker.core import BrokerCore as today
    from generaldomo.sansio.broker.services.resolvers.attributes import AttributeResolver as attributes_today

    assert BrokerCore is today and AttributeResolver is attributes_today


def test_what_was_never_there_is_still_not() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        generaldomo.nothing  # noqa: B018
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("generaldomo.nothing")


def test_the_io_free_layers_old_paths_name_its_sub_packages_and_every_form_imports(
    forgotten: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``generaldomo.sansio.<module>`` for each module that moved into a sub-package: ``import``, ``from ... import``
    and the names in it, each with the warning naming where it lives now."""
    assert all(f"sansio.{name}" in MOVED for name in SANSIO)
    for name, sub_package in SANSIO.items():
        new = importlib.import_module(f"generaldomo.sansio.{sub_package}.{name}")
        assert MOVED[f"sansio.{name}"] == new.__name__
        with pytest.warns(DeprecationWarning, match=f"generaldomo.sansio.{name} is deprecated; import {new.__name__}"):
            exec(f"from generaldomo.sansio import {name} as module", namespace := {})
        assert namespace["module"] is new
    monkeypatch.delitem(sys.modules, "generaldomo.sansio.session")
    monkeypatch.delattr(sys.modules["generaldomo.sansio"], "session")
    with pytest.warns(DeprecationWarning, match="import generaldomo.sansio.peer.session"):
        from generaldomo.sansio.session import ClientSession, WorkerSession
    from generaldomo.sansio.peer import session

    assert (ClientSession, WorkerSession) == (session.ClientSession, session.WorkerSession)


def test_the_io_layers_old_paths_name_its_sides_and_every_form_imports(forgotten: None) -> None:
    """``generaldomo.io.<module>`` for each module that moved into a side's sub-package: ``import`` and ``from ...
    import``, each with the warning naming where it lives now."""
    from generaldomo.compat import IO

    assert all(f"io.{name}" in MOVED for name in IO)
    for name, side in IO.items():
        new = importlib.import_module(f"generaldomo.io.{side}.{name}")
        assert MOVED[f"io.{name}"] == new.__name__
        with pytest.warns(DeprecationWarning, match=f"generaldomo.io.{name} is deprecated; import {new.__name__}"):
            exec(f"from generaldomo.io import {name} as module", namespace := {})
        assert namespace["module"] is new

"""The compiled sans-IO core (generaldomo.compiled): the pure path imports the sources, a stale or incomplete build
is never used, and a build in use serves every compiled module from its own folder, never beside a source. Where
the compiled core is expected (``GENERALDOMO_EXPECT_COMPILED=1``: tox's env py, whose package is built with a C
compiler at hand), the package the tests import runs it, so that a build that fell back to pure Python fails."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import generaldomo
from generaldomo import compiled

pytestmark = pytest.mark.pure

ROOT = Path(generaldomo.__file__).resolve().parent.parent  # (tox's envs: their site-packages)
HERE = Path(__file__).resolve().parent  # (a folder with no package in it: a source tree's is not imported from it)
PROBE = (
    "import json, generaldomo.compiled as c\n"
    "from generaldomo.sansio.broker.core import core\n"
    "from generaldomo.sansio.wire import events, readers\n"
    "print(json.dumps({'in_use': c.in_use(), 'description': c.description(),"
    " 'files': [core.__file__, events.__file__, readers.__file__]}))"
)


def importing(**env: str) -> dict[str, str]:
    """This environment with ``env`` added, in which a fresh interpreter imports the package these tests import
    (run from a folder of no source tree: see :data:`HERE`)."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, **env}


def probe(**env: str) -> dict[str, object]:
    """What a fresh interpreter imports, with ``env`` added to this one's environment."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, env=importing(**env), cwd=HERE
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_the_pure_path_imports_the_sources() -> None:
    seen = probe(GENERALDOMO_PURE_PYTHON="1")
    assert seen["in_use"] is False and "GENERALDOMO_PURE_PYTHON is set" in str(seen["description"])
    assert all(str(file).endswith(".py") for file in seen["files"])  # type: ignore[attr-defined]


@pytest.mark.skipif(
    os.environ.get("GENERALDOMO_EXPECT_COMPILED", "") in ("", "0")
    or os.environ.get(compiled.PURE_PYTHON, "") not in ("", "0"),
    reason="the compiled core is expected only with GENERALDOMO_EXPECT_COMPILED=1 (tox's env py)",
)
def test_the_compiled_core_is_in_use_where_it_is_expected() -> None:
    assert compiled.in_use(), f"the compiled core is expected, but: {compiled.description()}"
    done = subprocess.run(
        [sys.executable, "-m", "generaldomo", "doctor"], capture_output=True, text=True, timeout=120,
        env=importing(), cwd=HERE,
    )  # fmt: skip
    assert "sans-IO core: compiled (mypyc: " in done.stdout, done.stdout + done.stderr


def test_no_compiled_module_lies_beside_a_source() -> None:
    beside = [path for path in (ROOT / "generaldomo" / "sansio").rglob("*") if path.suffix in (".so", ".pyd")]
    assert beside == []


def test_a_build_in_use_serves_the_compiled_modules_from_its_folder() -> None:
    if not compiled.MANIFEST.is_file():
        pytest.skip("the compiled core is not built (GENERALDOMO_COMPILE_INPLACE=1 setup.py build_ext --inplace)")
    seen = probe(GENERALDOMO_PURE_PYTHON="0")
    files = [Path(str(file)) for file in seen["files"]]  # type: ignore[attr-defined]
    if seen["in_use"]:
        assert all(file.suffix == ".so" and compiled.DIRECTORY in file.parents for file in files), files
        assert str(seen["description"]).startswith("compiled (mypyc: ")
    else:  # a build of older sources: not used, and doctor says why
        assert all(file.suffix == ".py" for file in files) and "stale" in str(seen["description"])


def _fake_build(tmp_path: Path) -> tuple[Path, Path]:
    """A build folder whose manifest names two real sources (copied under a root) and their (empty) files."""
    root, directory = tmp_path / "root", tmp_path / "build"
    modules = {}
    for name in ("generaldomo.sansio.wire.events", "generaldomo.sansio.wire.readers"):
        source = Path(*name.split(".")).with_suffix(".py")
        (root / source).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / source, root / source)
        file = f"{source.with_suffix('')}.so"
        (directory / file).parent.mkdir(parents=True, exist_ok=True)
        (directory / file).write_bytes(b"")
        modules[name] = (file, source.as_posix(), compiled.source_digest(root / source))
    (directory / "lib__mypyc.so").write_bytes(b"")
    manifest = compiled.Manifest("lib__mypyc", "lib__mypyc.so", modules)
    (directory / "manifest.json").write_text(manifest.to_json())
    return root, directory


def test_a_build_is_used_only_when_every_source_is_the_one_it_was_compiled_from(tmp_path: Path) -> None:
    root, directory = _fake_build(tmp_path)
    manifest, said = compiled.decide(False, directory, root)
    assert manifest is not None and said == "compiled (mypyc: 2 modules of generaldomo.sansio)"
    assert compiled.decide(True, directory, root)[0] is None  # GENERALDOMO_PURE_PYTHON
    readers = root / "generaldomo" / "sansio" / "wire" / "readers.py"
    readers.write_text(readers.read_text() + "\n# edited after the build\n")
    manifest, said = compiled.decide(False, directory, root)
    assert manifest is None and "stale: generaldomo.sansio.wire.readers changed" in said and "build_ext" in said


def test_an_incomplete_or_unreadable_build_is_not_used(tmp_path: Path) -> None:
    root, directory = _fake_build(tmp_path)
    (directory / "generaldomo" / "sansio" / "wire" / "events.so").unlink()
    manifest, said = compiled.decide(False, directory, root)
    assert manifest is None and "incomplete: generaldomo.sansio.wire.events is missing" in said
    (directory / "manifest.json").write_text("{not json")
    manifest, said = compiled.decide(False, directory, root)
    assert manifest is None and "unreadable" in said
    (directory / "manifest.json").unlink()
    assert compiled.decide(False, directory, root) == (None, "pure Python (the compiled core is not built)")

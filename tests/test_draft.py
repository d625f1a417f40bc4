"""The packaged draft installer: what it says before acting, where it refuses, and its libzmq patch step."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from generaldomo import draft
from generaldomo.io.transport import install_command

ROOT = Path(__file__).resolve().parents[1]
COMPILERS = {"C (cc)": "/usr/bin/cc", "C++ (c++)": "/usr/bin/c++"}


def test_linux_with_glibc_and_compilers_is_supported() -> None:
    assert draft.unsupported("linux", "glibc", COMPILERS) is None


@pytest.mark.parametrize(("system", "libc", "says"), [("darwin", "", "not on darwin"), ("linux", "musl", "musl")])
def test_other_platforms_are_told_what_to_do_instead(system: str, libc: str, says: str) -> None:
    reason = draft.unsupported(system, libc, COMPILERS)
    assert reason is not None and says in reason
    assert "ENABLE_DRAFTS" in reason and "ZMQ_DRAFT_API=1" in reason and "router transport" in reason


def test_a_missing_compiler_is_named() -> None:
    reason = draft.unsupported("linux", "glibc", {"C (cc)": "/usr/bin/cc", "C++ (g++)": None})
    assert reason is not None and "no C++ (g++) compiler found" in reason


def test_build_without_a_compiler_refuses_plainly(tmp_path: Path) -> None:
    env = {**os.environ, "GENERALDOMO_CACHE": str(tmp_path), "CXX": str(tmp_path / "no-such-c++")}
    cmd = [sys.executable, "-m", "generaldomo.draft", "build"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env, check=False)
    assert result.returncode == 1
    assert "compiler found" in result.stderr and "Traceback" not in result.stderr
    assert not list(tmp_path.rglob("*.whl"))


def test_a_patch_rewrites_its_text_exactly_once(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    source = tmp_path / "src" / "server.cpp"
    source.write_text("int a;\nint b;\n")
    first = draft.SourcePatch("first", "src/server.cpp", "int a;", "long a;")
    second = draft.SourcePatch("second", "src/server.cpp", "long a;\nint b;", "long a;\nlong b;")
    draft.apply_patches(tmp_path, [first, second])
    assert source.read_text() == "long a;\nlong b;\n"
    with pytest.raises(draft.BuildError, match="found 0"):
        first.apply(tmp_path)


def test_the_recipe_names_every_patch() -> None:
    assert all(f"+{patch.name}" in draft.RECIPE for patch in draft.PATCHES)
    assert draft.RECIPE.startswith(f"pyzmq{draft.PYZMQ_VERSION}-zmq{draft.LIBZMQ_VERSION}-")


def test_the_plan_names_versions_environment_and_what_it_replaces() -> None:
    lines = "\n".join(draft.plan(draft.Installed("26.4.0", "4.3.5", draft=False)))
    assert sys.prefix in lines
    assert f"pyzmq {draft.PYZMQ_VERSION} with libzmq {draft.LIBZMQ_VERSION}" in lines
    assert "replaces:     pyzmq 26.4.0 (libzmq 4.3.5)" in lines and "pyzmq==26.4.0" in lines
    assert "not the 4.3.5 of PyPI's wheels" in lines


def test_the_plan_command_sees_this_environment_s_drafts() -> None:
    cmd = [sys.executable, "-m", "generaldomo.draft", "plan"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0 and result.stderr == ""
    assert "nothing to do: draft sockets are available" in result.stdout


def test_the_source_tree_wrapper_runs_the_packaged_installer() -> None:
    cmd = [sys.executable, str(ROOT / "tools" / "draft_pyzmq.py"), "plan"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0 and "environment:" in result.stdout


def test_the_install_command_names_this_interpreter() -> None:
    assert install_command() == f"{shlex.quote(sys.executable)} -m generaldomo.draft ensure"

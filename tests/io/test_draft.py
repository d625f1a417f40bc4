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

ROOT = Path(__file__).resolve().parents[2]
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


CHANGE_B = """Why: b is long.

--- a/src/server.cpp
+++ b/src/server.cpp
@@ -1,3 +1,3 @@
 int a;
-int b;
+long b;
 int c;
"""


def tree(root: Path, **files: str) -> Path:
    for name, text in files.items():
        (root / "src").mkdir(parents=True, exist_ok=True)
        (root / "src" / name).write_text(text)
    return root


def test_a_patch_applies_exactly_once_and_says_where_it_does_not(tmp_path: Path) -> None:
    source = tree(tmp_path, **{"server.cpp": "int a;\nint b;\nint c;\nint d;\n"}) / "src" / "server.cpp"
    patch = draft.Patch.parse("long-b", CHANGE_B)
    assert patch.about == "Why: b is long." and [change.path for change in patch.changes] == ["src/server.cpp"]
    draft.apply_patches(tmp_path, [patch])
    assert source.read_text() == "int a;\nlong b;\nint c;\nint d;\n"
    with pytest.raises(draft.BuildError, match=r"long-b.patch does not apply to src/server.cpp .* at line 2, found"):
        patch.apply(tmp_path)


def test_a_patch_that_does_not_apply_writes_nothing(tmp_path: Path) -> None:
    tree(tmp_path, **{"server.cpp": "int a;\nint b;\nint c;\n", "client.cpp": "int x;\n"})
    second = "--- a/src/client.cpp\n+++ b/src/client.cpp\n@@ -1 +1 @@\n-int y;\n+long y;\n"
    with pytest.raises(draft.BuildError, match="expects 'int y;\\\\n' at line 1, found 'int x;\\\\n'"):
        draft.Patch.parse("both", CHANGE_B + second).apply(tmp_path)
    assert (tmp_path / "src" / "server.cpp").read_text() == "int a;\nint b;\nint c;\n"


def test_a_hunk_with_less_context_after_than_before_ends_the_file(tmp_path: Path) -> None:
    append = "--- a/src/server.cpp\n+++ b/src/server.cpp\n@@ -1,2 +1,3 @@\n int a;\n int b;\n+int c;\n"
    create = "--- /dev/null\n+++ b/src/platform.hpp\n@@ -0,0 +1,2 @@\n+#define A\n+#define B\n"
    tree(tmp_path, **{"server.cpp": "int a;\nint b;\n"})
    draft.Patch.parse("append", append + create).apply(tmp_path)
    assert (tmp_path / "src" / "server.cpp").read_text() == "int a;\nint b;\nint c;\n"
    assert (tmp_path / "src" / "platform.hpp").read_text() == "#define A\n#define B\n"
    with pytest.raises(draft.BuildError, match="ends the file, which goes on after line 2"):
        draft.Patch.parse("append", append).apply(tmp_path)  # a second time: the lines are still there, not last
    with pytest.raises(draft.BuildError, match=r"creates src/platform\.hpp, which is there already"):
        draft.Patch.parse("create", create).apply(tmp_path)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("no diff here\n", "holds no diff"),
        ("--- a/src/x.cpp\n+++ b/src/x.cpp\n", "no hunk for src/x.cpp"),
        ("--- a/src/x.cpp\n+++ b/src/x.cpp\n@@ -1,2 +1,2 @@\n int a;\n", "line 5: the file ends inside a hunk"),
        ("--- a/src/x.cpp\n+++ b/src/x.cpp\n@@ -1 +1 @@\n*int a;\n", "line 4: '\\*int a;\\\\n' is not a line"),
        ("--- a/src/x.cpp\n+++ /dev/null\n@@ -1 +0,0 @@\n-int a;\n", "not delete them"),
        ("--- a/src/x.cpp\nint a;\n", "line 1: expected a '--- a/FILE' and '\\+\\+\\+ b/FILE' pair"),
    ],
)
def test_a_malformed_patch_is_refused_naming_its_line(text: str, says: str) -> None:
    with pytest.raises(draft.BuildError, match=says):
        draft.Patch.parse("bad", text)


def test_the_recipe_names_every_patch() -> None:
    assert {path.stem for path in draft.PATCH_DIR.glob("*.patch")} == {patch.name for patch in draft.PATCHES}
    assert all(f"+{patch.name}" in draft.RECIPE for patch in draft.PATCHES)
    assert draft.RECIPE.startswith(f"pyzmq{draft.PYZMQ_VERSION}-zmq{draft.LIBZMQ_VERSION}-")


def test_the_recipe_follows_the_diffs_not_their_descriptions() -> None:
    reworded = [draft.Patch.parse(p.name, f"Said otherwise.\n\n{p.diff}") for p in draft.PATCHES]
    assert draft.recipe(reworded) == draft.RECIPE
    first, *rest = draft.PATCHES
    changed = draft.Patch.parse(first.name, first.diff.replace("generaldomo", "generaldom0", 1))
    assert draft.recipe([changed, *rest]) != draft.RECIPE


def test_the_shipped_patches_say_why_and_export_the_markers() -> None:
    added = {p.name: "".join(line for c in p.changes for hunk in c.hunks for line in hunk.new) for p in draft.PATCHES}
    assert all(patch.about.startswith("generaldomo's ") for patch in draft.PATCHES)
    for symbol in (draft.DRAIN_SYMBOL, draft.MAILBOX_SYMBOL, draft.POLL_SYMBOL):
        assert sum('extern "C"' in text and f" {symbol} (" in text for text in added.values()) == 1, symbol
    assert "#define ZMQ_USE_LIBSODIUM" in added["platform"] and "#define ZMQ_BUILD_DRAFT_API" in added["platform"]


@pytest.mark.slow
def test_the_shipped_patches_apply_to_the_pinned_libzmq_sources(tmp_path: Path) -> None:
    """The pyzmq sdist the builder downloads (pip's cache helps) carries the libzmq the patches were made for."""
    src = draft.fetch_libzmq_source(tmp_path)
    before = {c.path: (src / c.path).read_text() for p in draft.PATCHES for c in p.changes if not c.created}
    draft.apply_patches(src)
    assert all((src / path).read_text() != text for path, text in before.items())
    assert (src / "src" / "platform.hpp").is_file()
    for patch in draft.PATCHES:  # and each refuses a tree it was applied to already
        with pytest.raises(draft.BuildError, match=f"{patch.name}.patch"):
            patch.apply(src)


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

"""Every code block of README.rst and the guide is run by a test or says why not (tests/doc_blocks.py has the
rules), and the guide's shell blocks run as written (tests/doc_session.py: one broker per block)."""

from __future__ import annotations

import re
from pathlib import Path

from doc_blocks import BARE_EXEMPT, ROOT, Block, blocks, documents, every_block, named
from doc_session import run

MARKS = {"not-run", "output"}
RUNNERS = [*sorted((ROOT / "tests").rglob("*.py")), *sorted((ROOT / "tools").glob("*.py"))]


def fetched() -> set[str]:
    """The block names the tests and tools fetch (``named("NAME")`` in their source)."""
    found: set[str] = set()
    for path in RUNNERS:
        found.update(re.findall(r"""named\(\s*["']([\w-]+)["']\s*\)""", path.read_text()))
    return found


def included() -> set[str]:
    """The example files the tests and tools read, by their path under the repository (``docs/examples/NAME``
    written as ``"docs" / "examples" / "NAME"`` or ``guide_example("NAME"...)``)."""
    found: set[str] = set()
    for path in RUNNERS:
        text = path.read_text()
        found.update(re.findall(r""""examples" / "([\w.-]+)\"""", text))
        found.update(re.findall(r"""guide_example\("([\w.-]+)\"""", text))
    return found


def problems(found: list[Block], names: set[str], files: set[str]) -> list[str]:
    """What is wrong with the blocks ``found``, given the names and example files the tests run."""
    wrong = []
    for block in found:
        if block.kind == "literal":
            if block.document not in BARE_EXEMPT:
                wrong.append(f"{block.where}: a bare literal block: make it a code-block with a :name: or a :class:")
        elif block.kind == "literalinclude":
            if Path(block.language).name not in files:
                wrong.append(f"{block.where}: includes {block.language}, which no test runs")
        elif block.classes & MARKS:
            continue
        elif block.name is not None:
            if block.name not in names:
                wrong.append(f"{block.where}: no test runs the block named {block.name!r} (named({block.name!r}))")
        elif block.language != "python":
            wrong.append(
                f"{block.where}: a {block.language or 'plain'} block no test runs: name it and run it, or mark it"
            )
    seen: dict[str, str] = {}
    for block in found:
        if block.name is not None and seen.setdefault(block.name, block.where) != block.where:
            wrong.append(f"{block.where}: the name {block.name!r} is taken ({seen[block.name]})")
    return wrong


def test_every_block_is_run_or_marked() -> None:
    assert problems(every_block(), fetched(), included()) == []


def test_an_unmarked_unrun_block_is_found(tmp_path: Path) -> None:
    """The rule fails for what it is meant to catch: a bare block, a shell block nobody runs, a name nobody
    fetches, an example file nobody reads; and it accepts marked blocks."""
    page = tmp_path / "page.rst"
    (tmp_path / "unread.cpp").write_text("int main() {}\n")
    page.write_text(
        "Run this::\n\n    generaldomo broker\n\n"
        ".. code-block:: console\n\n    generaldomo worker\n\n"
        ".. code-block:: console\n   :name: nobody-fetches-me\n\n    generaldomo client echo hi\n\n"
        ".. literalinclude:: unread.cpp\n   :language: cpp\n\n"
        ".. code-block:: console\n   :class: not-run\n\n    docker run it\n\n"
        ".. code-block:: python\n\n    print(1)\n"
    )
    found = problems(blocks(page), set(), set())
    assert [line.split(": ", 1)[1].split(":")[0] for line in found] == [
        "a bare literal block",
        "a console block no test runs",
        "no test runs the block named 'nobody-fetches-me' (named('nobody-fetches-me'))",
        "includes unread.cpp, which no test runs",
    ], found


def test_the_documents_are_read_whole() -> None:
    """The extractor sees the blocks of every page, inside list items too (a missed block would go unchecked)."""
    pages = {str(path.relative_to(ROOT)) for path in documents()}
    assert {"README.rst", "docs/howto/ray.rst", "docs/howto/cpp.rst", "docs/reference/cli.rst"} <= pages
    ray = [block for block in every_block() if block.path.name == "ray.rst"]
    assert [block.language for block in ray] == ["console", "python", "python"]
    assert all(block.text.startswith(("generaldomo", "import")) for block in ray)


def test_the_first_commands_run(tmp_path: Path) -> None:
    out = run(named("cli-first-commands"), tmp_path)
    assert out.splitlines() == ["hello"]


def test_the_attribute_resolver_example_runs(tmp_path: Path) -> None:
    out = run(named("resolver-attributes"), tmp_path)
    assert out.splitlines() == ["data", "x"]


def test_a_detached_request_is_fetched_as_written(tmp_path: Path) -> None:
    # the block waits for a worker (--wait-for-service) that the guide starts elsewhere: here, the echo worker
    setup = "generaldomo broker --bind tcp://127.0.0.1:5555\ngeneraldomo worker --service report\n"
    out = run(setup + named("client-later-answers"), tmp_path)
    assert out.splitlines()[-1] == "2026-11"


def test_the_bridge_example_runs(tmp_path: Path) -> None:
    setup = "generaldomo broker --router tcp://127.0.0.1:5555\ngeneraldomo worker --connect tcp://127.0.0.1:5555\n"
    out = run(setup + named("bridge-command"), tmp_path)
    assert out.splitlines() == ["hello"]


def test_the_dashboard_command_serves(tmp_path: Path) -> None:
    ports: dict[str, str] = {}
    check = (  # the page answers at the address the block gives (its port replaced, as the block's)
        'python -c "import sys, urllib.request; '
        "sys.exit(urllib.request.urlopen('http://127.0.0.1:8077/', timeout=30).status != 200)\"\n"
    )
    run("generaldomo broker --bind tcp://127.0.0.1:5555\n" + named("dashboard-command") + check, tmp_path, ports)
    assert set(ports) == {"5555", "8077"}

"""The documents' examples are true: the Python of README and the guide runs, protocol.rst's bytes are what the
code sends."""

from __future__ import annotations

import doctest
import importlib
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import doc_blocks
import pytest

import generaldomo
import generaldomo.io.bridge
from generaldomo.sansio.wire import codec, protocol
from generaldomo.sansio.wire.events import ClientRequest, Dialect

ROOT = Path(__file__).resolve().parents[2]
PROTOCOL = (ROOT / "docs" / "protocol.rst").read_text()
REQUEST_ID = bytes(range(1, 9))


def examples() -> list[doc_blocks.Block]:
    """The Python blocks of README and the guide that are whole programs: neither named (a test of their own runs
    them) nor marked not-run or output (tests/doc_blocks.py)."""
    return [
        block
        for block in doc_blocks.every_block()
        if block.language == "python" and block.name is None and not block.classes & {"not-run", "output"}
    ]


@pytest.mark.parametrize("block", examples(), ids=lambda block: block.where)
def test_the_python_examples_run(block: doc_blocks.Block, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", block.text], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr


def test_every_public_name_is_documented_with_its_parameters_and_an_example() -> None:
    """The API reference's rules (docs/_ext/apicheck.py; ``tox -e docs`` fails on them too), on what the reference
    is built from: the source tree, pure Python (a compiled class keeps no docstrings)."""
    script = "import sys; sys.path.insert(0, 'docs/_ext'); import apicheck; print(*apicheck.problems(), sep='\\n')"
    environ = {**os.environ, "GENERALDOMO_PURE_PYTHON": "1"}
    found = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=120
    )
    assert found.returncode == 0 and found.stdout.strip() == "", found.stdout + found.stderr


def test_the_broker_and_bridge_pages_show_their_shared_serving_methods() -> None:
    """Their start/join/check/failure/serving are one mixin's (generaldomo.io.failfast.ServingLoop, no page of
    its own): their pages show them as their own (docs/_ext/generated.py writes ``:inherited-members:`` where
    ``apicheck.inherited_up_to`` says), and the API rules check them."""
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    try:
        import apicheck
    finally:
        sys.path.pop(0)
    for owner in (generaldomo.Broker, generaldomo.io.bridge.Bridge):
        assert apicheck.inherited_up_to(owner) == "ABC"
        shown = {name for name, _ in apicheck.own_members(owner)}
        assert {"start", "join", "check", "failure", "serving", "run", "stop"} <= shown, shown
    assert apicheck.inherited_up_to(generaldomo.Client) is None  # no such base: its page as before
    assert apicheck.inherited_up_to(generaldomo.BrokerFailed) is None  # LoopFailed adds no member


def docstring_examples() -> list[doctest.DocTest]:
    """Every ``>>>`` example in the package's docstrings (``__main__`` modules run the CLI when imported)."""
    finder = doctest.DocTestFinder()
    names = [info.name for info in pkgutil.walk_packages(generaldomo.__path__, "generaldomo.")]
    modules = [importlib.import_module(name) for name in names if not name.endswith(".__main__")]
    return [test for module in modules for test in finder.find(module) if test.examples]


@pytest.mark.parametrize("test", docstring_examples(), ids=lambda test: test.name)
def test_the_docstring_examples_run(test: doctest.DocTest) -> None:
    runner = doctest.DocTestRunner()
    runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


def in_document(data: bytes) -> bool:
    """Whether ``data``, written as hex pairs (any spacing or line breaks), appears in protocol.rst."""
    return data.hex() in re.sub(r"\s+", "", PROTOCOL)


def zmtp(frames: list[bytes]) -> bytes:
    """The ZMTP 3 short frames of one message: flags (more or last), one length byte, the bytes."""
    return b"".join(bytes([int(i < len(frames) - 1), len(frame)]) + frame for i, frame in enumerate(frames))


def example() -> tuple[list[bytes], list[bytes]]:
    request = protocol.gdp_request(REQUEST_ID, b"echo", [b"hello"])
    timing = protocol.timing(0.000125, 0.00025)
    reply = protocol.client_reply(Dialect.GDP, REQUEST_ID, b"echo", protocol.OK, [b"hello"], True, timing)
    assert reply is not None
    return request, reply


def test_the_worked_example_is_what_the_code_sends() -> None:
    request, reply = example()
    assert protocol.parse(request) == ClientRequest(Dialect.GDP, REQUEST_ID, b"echo", (b"hello",))
    assert protocol.parse_client_reply(reply) == (REQUEST_ID, b"200", reply[4], (b"hello",))
    for frames in (request, reply):
        assert in_document(zmtp(frames)), "the ROUTER link's bytes"
        packed = codec.encode(frames)
        assert in_document(packed), "the SERVER link's packed message"
        assert in_document(bytes([0, len(packed)])) and f"is {len(packed)} bytes" in PROTOCOL


def test_a_wrong_byte_is_noticed() -> None:
    request, _ = example()
    assert not in_document(codec.encode([*request[:-1], b"hellO"]))


def merge_leftovers(text: str) -> list[int]:
    """The line numbers of what a merge leaves when its conflict is not resolved: ``<<<<<<<``, ``>>>>>>>``, and
    ``=======`` standing alone (not the underline of a title of at most seven characters)."""
    lines = text.splitlines()
    found = []
    for number, line in enumerate(lines, 1):
        if line.startswith(("<<<<<<< ", ">>>>>>> ")) or line in ("<<<<<<<", ">>>>>>>"):
            found.append(number)
        elif line == "=======":
            above = lines[number - 2] if number > 1 else ""
            below = lines[number] if number < len(lines) else ""
            if not above.strip() or above.startswith("=") or below.startswith("="):
                found.append(number)
    return found


def test_no_document_holds_a_merge_leftover_and_each_protocol_table_is_there_once() -> None:
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    texts = [ROOT / name for name in tracked if name.endswith((".rst", ".md", ".py", ".toml", ".ini", ".cfg", ".hpp"))]
    leftovers = {str(path.relative_to(ROOT)): merge_leftovers(path.read_text()) for path in texts if path.exists()}
    assert {name: lines for name, lines in leftovers.items() if lines} == {}
    assert merge_leftovers("Title\n=======\n") == [] and merge_leftovers("a\n\n=======\n\nb\n") == [3]
    for header in ("GDPC01", "GDPW01"):
        section = PROTOCOL.split(f"(header ``{header}``", 1)[1].split("\n\n- ", 1)[0]
        assert len(re.findall(r"^message +code +frames$", section, re.MULTILINE)) == 1, header


def test_the_draft_build_time_is_one_figure_wherever_it_is_said() -> None:
    """tox.ini, the README and the install guide give the same time for the first draft build."""
    said = {
        name: re.findall(r"draft-enabled pyzmq[^(]*\((about [^):]+)", (ROOT / name).read_text().replace("\n#", ""))
        for name in ("tox.ini", "README.rst", "docs/howto/install.rst")
    }
    assert all(len(figures) == 1 for figures in said.values()), said
    assert len({figures[0] for figures in said.values()}) == 1, said

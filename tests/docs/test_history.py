"""User-facing text says what is, not how it came to be: no project history in README.rst, the guide (docs/),
bench/README.md, the CHANGELOG's unreleased notes, the commands' ``--help``, or the package's docstrings and
messages.

History lives in git and in the CHANGELOG's dated releases. The words that give it away: an issue or a round of
work by number, a helper, "this session", a goal "not met", a commit by its hash.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from generaldomo import cli

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
HISTORY = re.compile(
    r"\bissues?\b"  # "issue 27", "the issue asked for": an issue tracker's numbering is history
    r"|\bround \d+|\b(?:this|that|previous|earlier) round\b(?! trip| robin)"
    r"|\bhelpers?\b|\bh\d\d[a-z]+\b"  # the people (and agents) who did the work, and their branch names
    r"|\bthis session\b|\bnot met\b|\bcommit [0-9a-f]{7,40}\b",
    re.IGNORECASE,
)
# In the package's sources "issue", "helper", "round" and "session" are also words of the code (a ticket issued,
# a helper function, the adaptive cap's round, a client's session): there, history is a number or a name.
NUMBERED = re.compile(
    r"(?<!libzmq )\bissues? \d+|\bissue-\d+|\ba later issue\b|\bround \d+|\bhelper h\d|\bh\d\d[a-z]+\b"
    r"|\bnot met\b|\bcommit [0-9a-f]{7,40}\b",
    re.IGNORECASE,
)
HEX = re.compile(r"\b[0-9a-f]{7,40}\b")


def user_documents() -> list[Path]:
    """README.rst, bench/README.md and the guide's own pages (not the API pages the build writes)."""
    guide = [p for p in sorted(DOCS.rglob("*")) if p.suffix in (".rst", ".py", ".cpp", ".txt", ".toml", ".sh")]
    guide = [p for p in guide if p.relative_to(DOCS).parts[0] not in ("_build", "api", "_ext")]
    return [ROOT / "README.rst", ROOT / "bench" / "README.md", *guide]


def unreleased_notes() -> str:
    """The CHANGELOG up to its first dated release (a heading ``VERSION - YYYY-MM-DD``)."""
    text = (ROOT / "CHANGELOG.rst").read_text()
    dated = re.search(r"^\d+\.\d+\.\d+ - \d{4}-\d\d-\d\d$", text, re.MULTILINE)
    return text[: dated.start()] if dated else text


def package_sources() -> list[Path]:
    """The package's sources: their docstrings, help texts and messages reach users."""
    kinds = ("*.py", "*.pyi", "*.c", "*.patch", "*.hpp")
    found = [p for kind in kinds for p in sorted((ROOT / "generaldomo").rglob(kind))]
    return found + sorted((ROOT / "cpp").rglob("*.hpp"))


def commits(text: str) -> set[str]:
    """The hex words of ``text`` that name a commit of this repository (when it is a git clone)."""
    words = {word for word in HEX.findall(text) if re.search(r"[a-f]", word) and re.search(r"\d", word)}
    if not words or not (ROOT / ".git").exists():
        return set()
    found = set()
    for word in sorted(words):
        probe = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--verify", "--quiet", f"{word}^{{commit}}"],
            capture_output=True,
            check=False,
        )
        if probe.returncode == 0:
            found.add(word)
    return found


def findings(name: str, text: str, pattern: re.Pattern[str] = HISTORY) -> list[str]:
    """Each line of ``text`` that tells history, as ``name:line: words``."""
    found = []
    hashes = commits(text)
    for number, line in enumerate(text.splitlines(), 1):
        words = [match.group(0) for match in pattern.finditer(line)]
        words += [word for word in HEX.findall(line) if word in hashes]
        if words:
            found.append(f"{name}:{number}: {', '.join(words)}: {line.strip()}")
    return found


def test_the_pattern_catches_history_and_spares_ordinary_words() -> None:
    told = ["as issue 27 asked", "before this round", "the helper who moved them", "Not met.", "commit 557c06f"]
    assert all(HISTORY.search(line) for line in told)
    ordinary = ["a round trip", "deficit round robin", "the task is reissued", "issued a ticket", "3 rounds"]
    assert not any(HISTORY.search(line) for line in ordinary)
    assert all(NUMBERED.search(line) for line in [*told[:1], "round 3's code", "(helper h24b)", "issue-24 goals"])
    assert not any(
        NUMBERED.search(line) for line in ["Issues the tickets", "the helpers it calls", "libzmq issue 3048"]
    )


@pytest.mark.parametrize("path", user_documents(), ids=lambda path: str(path.relative_to(ROOT)))
def test_the_documents_tell_no_history(path: Path) -> None:
    assert findings(str(path.relative_to(ROOT)), path.read_text()) == []


def test_the_unreleased_notes_tell_no_history() -> None:
    assert findings("CHANGELOG.rst", unreleased_notes()) == []


def test_the_commands_help_tells_no_history() -> None:
    cli.parser()
    helps = {"generaldomo": cli.parser().format_help()}
    helps.update({f"generaldomo {name}": sub.format_help() for name, sub in cli._SUBPARSERS.items()})
    assert [line for name, text in helps.items() for line in findings(name, text)] == []


def test_the_package_tells_no_history() -> None:
    """Docstrings, comments, help and error messages alike (a comment is read by whoever extends the code)."""
    found = [
        line for path in package_sources() for line in findings(str(path.relative_to(ROOT)), path.read_text(), NUMBERED)
    ]
    assert found == []

"""``python -m bench.peer_instructions`` counts a part's instructions per request under callgrind, end to end with
tiny counts (the broker core alone; a Worker between a broker and a client process); no figure is checked but
that it is counted, that the calling thread's count is part of all threads', and that its breakdown (compiled core,
interpreter, CPython's objects, other) accounts for all of it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("role", ["core", "worker"])
def test_instructions_per_request_of_a_part_are_counted(role: str) -> None:
    cmd = [sys.executable, "-m", "bench.peer_instructions", "--role", role, "--requests", "20"]
    run = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    [row] = [line for line in run.stdout.splitlines() if line.startswith(f"| {role}")]
    calling, everything = (int(n.replace(",", "")) for n in re.findall(r"\| ([\d,]+) ", row + " ")[:2])
    assert 1000 < calling <= everything  # a request costs thousands of instructions at the very least
    [shares] = [line for line in run.stdout.splitlines() if line.startswith("the calling thread's instructions: ")]
    found = dict(re.findall(r"([A-Za-z][A-Za-z ]*?) (\d+)%", shares.split(": ", 1)[1]))
    assert "interpreter" in found and 97 <= sum(map(int, found.values())) <= 103, shares  # (each rounded)

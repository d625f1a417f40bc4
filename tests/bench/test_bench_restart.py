"""``python -m bench.restart`` runs: a kill, the broker back, every answer once, nothing run twice."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_restart_bench_runs_and_runs_nothing_twice() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "bench.restart", "--kills", "1", "--heartbeat", "0.5"],
        capture_output=True, text=True, timeout=240, cwd=ROOT,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    [row] = [line.split("|") for line in run.stdout.splitlines() if line.startswith("| 0.5 s")]
    assert row[2].strip() == "1" and row[4].strip().endswith("(1)")  # one kill, its time to serving measured
    assert int(row[7]) > 0 and row[8].strip() == "0" and row[9].strip() == "0"  # answers, none failed, none twice

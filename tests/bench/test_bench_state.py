"""``python -m bench.state_store`` runs, and both stores survive its kills (a few cycles)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_state_store_bench_runs_and_loses_nothing() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "bench.state_store", "--cycles", "2", "--services", "3"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    rows = [line.split("|") for line in run.stdout.splitlines() if line.startswith(("| json", "| sqlite"))]
    assert len(rows) == 2
    for row in rows:
        assert row[5].strip() == "0 / 2" and row[6].strip() == "0"  # no corrupt store, no acknowledged change lost

"""``python -m bench.bombs`` runs its over-time cases: a row per attack, the honest client's worst wait against
its baseline and the broker's memory against its ledger (the figures are the bench's, not checked here)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_status_pages_attack_is_measured_against_the_baseline() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "bench.bombs", "--only", "status-pages,worker-429", "--seconds", "5"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    [row] = [line.split("|") for line in run.stdout.splitlines() if line.startswith("| status-pages |")]
    baseline, worst = float(row[3]), float(row[4])
    assert baseline > 0 and worst > 0 and row[6].strip() in ("yes", "no") and row[7].strip() == "0"
    assert "pages_200" in row[12]  # the attacker's 40 pages: answered now, later or 429
    [row] = [line.split("|") for line in run.stdout.splitlines() if line.startswith("| worker-429 |")]
    assert row[7].strip() == "0"  # one worker saying 429 with retry_after=300 fails no honest request

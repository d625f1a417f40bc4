"""bench.inproc_server runs end to end with tiny counts and prints its table; no timing checks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from generaldomo.io import inproc

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.needs_draft
def test_inproc_server_bench_prints_a_row_per_mode_and_worker_count() -> None:
    command = [sys.executable, "-m", "bench.inproc_server", "--rounds", "1", "--sync", "20", "--pipelined", "100"]
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=240, check=False)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    rows = [line for line in run.stdout.splitlines() if line.startswith(("| sync |", "| pipelined |"))]
    assert len(rows) == 4  # sync and pipelined, 1 and 4 workers
    systems = "server-inproc" if inproc.NATIVE else "server-carrier"
    assert all(f"{systems} " in row and "x (" in row for row in rows)

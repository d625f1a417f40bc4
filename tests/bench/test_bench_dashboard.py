"""``python -m bench.dashboard``: the dashboard's cost on the broker, end to end with tiny counts; the report must
carry every figure (their values are not checked: no timing assertions)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("starlette")  # the generaldomo[dashboard] extra (in the test extra: CI has it)


def test_the_dashboard_bench_reports_every_figure() -> None:
    argv = [sys.executable, "-m", "bench.dashboard", "--seconds", "1", "--rounds", "1", "--services", "5", "--json"]
    run = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "| polling 1/s, one page |" in run.stdout and "| 5 |" in run.stdout
    result = json.loads(run.stdout[run.stdout.index("{") :])
    assert set(result["broker_cpu"]) == {"none", "1/s", "10/s"}
    assert all(math.isfinite(value) and value > 0 for value in result["broker_cpu"].values())
    assert [row["services"] for row in result["status_cost"]] == [1, 5]
    assert all(row["calls_per_second"] > 0 and row["report_bytes"] > 0 for row in result["status_cost"])

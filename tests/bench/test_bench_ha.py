"""bench part ``ha``: a failover's time to the first answer and the replication's cost in throughput, end to end
with tiny counts; no timing checks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_ha_part_measures_failovers_and_the_pairs_throughput(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "bench", "--smoke", "--only", "ha", "--out", str(tmp_path)]
    run = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "What the broker pair costs" in run.stdout and "| active of a pair |" in run.stdout
    [path] = tmp_path.glob("*-smoke.json")
    part = json.loads(path.read_text())["parts"]["ha"]
    assert part["failovers"] == 2 and 0 < part["failover_p50_s"] <= part["failover_max_s"]
    assert part["alone_rps"] > 0 and part["pair_rps"] > 0 and not part["errors"]

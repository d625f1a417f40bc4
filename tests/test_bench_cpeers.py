"""The bench's C-peers part (C MDP peers through our broker and the minimal loop; the C++ client next to the
Python one) runs end to end with tiny counts; no timing checks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_cpeers_part_measures_every_system(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--only", "cpeers", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "### 7. C peers" in run.stdout
    [path] = tmp_path.glob("*-smoke.json")
    part = json.loads(path.read_text())["parts"]["cpeers"]
    assert not part["errors"], part["errors"]
    systems = {(r["system"], r["mode"]) for r in part["rows"]}
    for system in ("generaldomo ROUTER", "minimal Python loop", "C++ Client", "Python Client"):
        for mode in ("sync", "pipelined"):
            assert (system, mode) in systems
    for row in part["rows"]:
        assert row["rounds"] == 1 and row["rps"] > 0 and row["cpu_us_per_req"] > 0

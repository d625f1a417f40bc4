"""``python -m bench --smoke --only shared`` (part 12: fair shares, a hidden API limit, deadlines) runs end to end
and reports each experiment; short phases, no timing checks. Its remote API with a hidden limit runs on a local
Ray (Ray tasks calling the broker, and the article's actor as a Ray actor): Ray is in the test extras, so that
runs in CI, never skipped."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_shared_service_part_runs(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--only", "shared", "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert "### 12. A shared service" in run.stdout
    (result,) = tmp_path.glob("*-smoke.json")
    part = json.loads(result.read_text())["parts"]["shared"]
    assert [p["name"] for p in part["fairness"]["phases"]] == ["fair shares", "first come, first served"]
    assert all(p["light_requests"] > 0 for p in part["fairness"]["phases"])
    api = part["api"]
    assert api["callers"] == "Ray tasks" and not api["notes"], api["notes"]
    names = [r["name"] for r in api["runs"]]
    assert names == ["generaldomo, no rate set", "actor guessing 40/s", "actor guessing 10/s"]
    for run_ in api["runs"]:  # each run's callers got answers, and its API (one object) saw calls go through
        assert run_["answered"] > 0 and sum(run_["timeline"]) > 0, run_
        assert len(run_["timeline"]) == len(run_["refusals"]) > 0
    assert "8 callers in 4 Ray tasks" in run.stdout
    assert {p["name"] for p in part["deadlines"]["phases"]} == {"deadlines dropped by the broker", "no deadline sent"}

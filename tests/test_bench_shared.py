"""``python -m bench --smoke --only shared`` (part 12: fair shares, a hidden API limit, deadlines) runs end to end
and reports each experiment; short phases, no timing checks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


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
    assert part["api"]["runs"][0]["name"] == "generaldomo, no rate set"
    assert all(r["answered"] > 0 for r in part["api"]["runs"])
    assert {p["name"] for p in part["deadlines"]["phases"]} == {"deadlines dropped by the broker", "no deadline sent"}

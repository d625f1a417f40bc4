"""bench part ``scale``: many clients and workers on one broker against 1 x 1, end to end with tiny counts; the
report must carry every figure (their values are not checked: no timing assertions)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIGURES = (
    "rps",
    "cpu_us_per_req",
    "main_cpu_us_per_req",
    "p50_us",
    "p99_us",
    "max_us",
    "worker_cpu_us_per_req",
    "rss_mib",
    "peak_rss_mib",
)


def test_the_scale_part_reports_every_figure_for_both_set_ups(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "bench", "--smoke", "--only", "scale", "--out", str(tmp_path)]
    run = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "### 10. Scale" in run.stdout and "| ROUTER | 1 x 1 |" in run.stdout
    [path] = tmp_path.glob("*-smoke.json")
    part = json.loads(path.read_text())["parts"]["scale"]
    assert not part["errors"], part["errors"]
    rows = {(r["transport"], r["setup"]): r for r in part["rows"]}
    assert ("router", "small") in rows and ("router", "big") in rows
    for (transport, setup), row in rows.items():
        assert row["rounds"] == 1, (transport, setup)
        assert all(math.isfinite(row[f]) and row[f] > 0 for f in FIGURES), row
        assert row["p50_us"] <= row["p99_us"] <= row["max_us"]
        assert row["runs"][0]["n"] >= row["clients"], "every client had at least one request answered"
        if setup == "big":
            assert row["clients"] > 1 and row["workers"] > 1
            assert math.isfinite(row["cpu_ratio"]) and row["cpu_ratio"] > 0
            assert f"{row['cpu_ratio']:.2f}x" in run.stdout
            assert f"- scale, {row['clients']} clients x {row['workers']} workers / 1 x 1 on {transport.upper()}" in (
                run.stdout
            )

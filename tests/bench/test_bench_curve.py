"""bench part ``curve``: plaintext against CURVE in one run, end to end with tiny counts; no timing checks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_curve_part_measures_both_transports_plain_and_curve(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "bench", "--smoke", "--only", "curve", "--out", str(tmp_path)]
    run = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "What CURVE costs" in run.stdout and "| ROUTER | 64 KiB |" in run.stdout
    [path] = tmp_path.glob("*-smoke.json")
    rows = json.loads(path.read_text())["parts"]["curve"]["rows"]
    assert {(r["transport"], r["payload"]) for r in rows} == {
        (t, p) for t in ("router", "server") for p in ("16 B", "64 KiB")
    }
    assert all(r["plain_sync"] > 0 and r["CURVE_sync"] > 0 and r["CURVE_piped"] > 0 for r in rows)

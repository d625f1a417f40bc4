"""Part ``openloop`` of the bench runs end to end with tiny counts: every system's steps, merged HDR histograms,
the generators' lag, the goals and the PNG; no timing checks."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

from hdrh.histogram import HdrHistogram

ROOT = Path(__file__).resolve().parents[2]


def test_openloop_smoke_run(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--only", "openloop", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "### 11. Latency under load, open loop" in run.stdout
    [path] = tmp_path.glob("*-smoke.json")
    part = json.loads(path.read_text())["parts"]["openloop"]
    assert not part["errors"], part["errors"]
    names = {"generaldomo ROUTER", "generaldomo SERVER", "majortomo", "minimal loop"}
    assert set(part["saturation"]) == names  # the test extra installs majortomo; tox builds the draft pyzmq
    fractions = part["sizes"]["fractions"]
    assert {(r["system"], r["fraction"]) for r in part["rows"]} == {(n, f) for n in names for f in fractions}
    for row in part["rows"]:
        assert row["sent"] > 0 and row["answered"] + row["lost"] == row["sent"]
        assert 0 < row["p50"] <= row["p99"] <= row["p999"] <= row["max"]
        merged = HdrHistogram.decode(row["histogram"])
        assert merged.get_total_count() == row["sent"]
        assert len(row["runs"][0]["generator_lags"]) == part["sizes"]["generators"]
    assert {g["goal"] for g in part["goals"]} >= {"generaldomo ROUTER: p99 <= 3x p50 at 80 %"}
    if importlib.util.find_spec("matplotlib") is not None:  # the PNG is drawn only with matplotlib (tox -e bench)
        assert Path(part["plot"]).is_file()
    else:
        assert "plot" not in part

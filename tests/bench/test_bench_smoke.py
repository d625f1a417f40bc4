"""The benchmark harness (bench/) runs end to end with tiny counts and writes its report; no timing checks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_smoke_run_prints_tables_and_writes_json(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "[bench" in run.stderr  # progress lines
    for heading in ("### 1a.", "### 1b.", "### 2.", "### 3.", "### 5.", "### 4. Flow control", "Broker hot path"):
        assert heading in run.stdout, heading
    assert "|---:|" in run.stdout

    [path] = tmp_path.glob("*-smoke.json")
    results = json.loads(path.read_text())
    assert {"command", "machine", "config", "parts", "duration_s"} <= results.keys()
    assert {"nproc", "cpu", "python", "pyzmq", "libzmq"} <= results["machine"].keys()
    parts = results["parts"]
    assert set(parts) == {"transport", "core", "flow", "peers", "profile"}

    transport = parts["transport"]
    assert not transport["errors"]
    systems = {(r["system"], r["transport"], r["scheme"], r["mode"]) for r in transport["rows"]}
    assert ("generaldomo", "router", "tcp", "sync") in systems
    assert ("baseline", "router", "inproc", "pipelined") in systems
    for row in transport["rows"]:
        assert {"payload", "workers", "rps", "p50_us", "p99_us", "cpu_us_per_req", "busy", "rounds"} <= row.keys()
        assert row["rounds"] == 1 and row["rps"] > 0

    core = parts["core"]
    assert {r["case"] for r in core["rows"]} == {"workers", "services", "tick"}
    assert core["memory"]["bytes_per_request"] > 0

    peers = parts["peers"]
    if peers["majortomo"] is None:
        assert any("majortomo not installed" in note for note in peers["notes"])
    else:
        assert not peers["errors"]
        assert {r["system"] for r in peers["rows"]} == {"majortomo", "generaldomo"}

    flow = parts["flow"]
    assert flow["bursts"] == 1 and len(flow["requests"]) == 10
    assert flow["max_in_flight"] <= flow["concurrency_limit"]
    assert all(r["queued"] is not None and r["served"] is not None for r in flow["requests"])

    for row in parts["profile"]["rows"]:
        assert row["main_cpu_us_per_req"] > 0 and row["components"]


def test_peers_part_reports_a_missing_majortomo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    from bench import peers
    from bench.config import SMOKE

    monkeypatch.setitem(sys.modules, "majortomo", None)  # makes `import majortomo` raise ImportError
    result = peers.run(SMOKE, children=None)  # type: ignore[arg-type]  # starts nothing
    assert result["rows"] == [] and result["majortomo"] is None
    assert "majortomo not installed" in result["notes"][0]

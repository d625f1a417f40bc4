"""The bench's adaptive part runs end to end with short phases against a real broker; no timing checks."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_adaptive_part_runs_its_three_phases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    from bench import adaptive_flow
    from bench.config import SMOKE
    from bench.report import adaptive_md
    from bench.timeline import can_plot

    plot = tmp_path / "adaptive.png" if can_plot() else None  # matplotlib: in tox -e bench, not in tox -e py
    result = adaptive_flow.run(replace(SMOKE, adaptive_seconds=2.0), plot=plot)
    fixed, low, adaptive = result["phases"]
    assert [p["name"] for p in result["phases"]] == [name for name, _ in adaptive_flow.phases()]
    assert all(p["replies"] and p["throughput"] > 0 for p in result["phases"])
    assert {c for _, c, _ in fixed["caps"]} == {adaptive_flow.WORKERS} and {c for _, c, _ in low["caps"]} == {2}
    assert all(1 <= c <= adaptive_flow.WORKERS for _, c, _ in adaptive["caps"])
    assert all(f <= 2 for _, _, f in low["caps"])  # the fixed cap of 2 held
    assert plot is None or Path(result["plot"]).stat().st_size > 0
    assert "adaptive 1..24" in adaptive_md(result)

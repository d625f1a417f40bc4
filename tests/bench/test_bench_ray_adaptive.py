"""The Ray part's adaptive phases run end to end on a local Ray (tasks as clients, a pool actor as the workers);
short phases, no timing checks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

if os.environ.get("CI"):
    import ray  # CI installs the extra: this runs there, never skipped
else:
    ray = pytest.importorskip("ray")

import generaldomo.ray as gdray
from generaldomo import Broker

ROOT = Path(__file__).resolve().parents[2]


def test_ray_adaptive_phases(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    from bench import adaptive_flow, ray_adaptive

    broker = Broker("router", ["tcp://127.0.0.1:*"]).start()
    endpoint = broker.endpoint("router", "tcp")
    gdray.start_local(num_cpus=2, runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}}, log_to_driver=False)
    try:
        result = ray_adaptive.run(endpoint, gdray.client(endpoint), 2.0)
    finally:
        gdray.close()
        ray.shutdown()
        broker.stop()
    fixed, low, adaptive = result["phases"]
    assert result["clients"] == "Ray tasks"
    assert all(p["replies"] and p["throughput"] > 0 for p in result["phases"])
    assert {c for _, c, _ in fixed["caps"]} == {adaptive_flow.WORKERS} and all(f <= 2 for _, _, f in low["caps"])
    assert all(1 <= c <= adaptive_flow.WORKERS for _, c, _ in adaptive["caps"])

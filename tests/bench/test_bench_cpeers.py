"""The bench's C-peers part (C MDP peers through our broker and the minimal loop; the C++ client next to the
Python one) runs end to end with tiny counts; no timing checks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from generaldomo import compiled

ROOT = Path(__file__).resolve().parents[2]
PURE = os.environ.get("GENERALDOMO_PURE_PYTHON", "") not in ("", "0")


def _run(tmp_path: Path, *more: str) -> dict:
    run = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--only", "cpeers", "--out", str(tmp_path), *more],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "### 7. C peers" in run.stdout
    [path] = tmp_path.glob("*-smoke.json")
    return json.loads(path.read_text())


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> None:
    """The repository's bench importable (an installed package under test leaves its root off the path)."""
    monkeypatch.syspath_prepend(str(ROOT))


def _core_from_root() -> str:
    """The core a ``python -m`` command run from the repository's root runs: its source tree's, which has the
    compiled core only if built in place (tox's env py tests an installed build, with the compiled core)."""
    code = "from generaldomo import compiled; print('compiled' if compiled.in_use() else 'Python')"
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout.strip()


def test_cpeers_part_measures_every_system(tmp_path: Path, bench: None) -> None:
    from bench.report import cpeers_md as part_md

    results = _run(tmp_path)
    part = results["parts"]["cpeers"]
    assert not part["errors"], part["errors"]
    systems = {(r["system"], r["mode"]) for r in part["rows"]}
    expected = ["generaldomo ROUTER", "generaldomo ROUTER, pure Python", "minimal Python loop"]
    expected += ["C++ Client", "Python Client"] + ([] if PURE else ["minimal loop on the C accelerator"])
    for system in expected:
        for mode in ("sync", "pipelined"):
            assert (system, mode) in systems
    for row in part["rows"]:
        assert row["rounds"] == 1 and row["rps"] > 0 and row["cpu_us_per_req"] > 0
    assert results["machine"]["links"].startswith("pure Python" if PURE else "C accelerator")
    # each generaldomo broker says which core its process ran: the compiled one exactly when the package the bench
    # runs (the checkout's source tree) has a build in use
    cores = {r["system"]: r.get("core") for r in part["rows"] if r["transport"] == "router"}
    assert cores["generaldomo ROUTER"] == _core_from_root()
    assert cores["generaldomo ROUTER, pure Python"] == "Python"
    assert cores["minimal Python loop"] is None  # not a generaldomo broker: no core to name
    assert f"generaldomo ROUTER (ROUTER broker, {cores['generaldomo ROUTER']} core)" in part_md(part)


def test_the_core_a_process_runs_is_read_from_the_process(bench: None) -> None:
    import generaldomo.sansio.broker.core.core  # noqa: F401  (loads the compiled core when it is in use)
    from bench.procs import COMPILED, core_of

    here = compiled.DIRECTORY.resolve()  # this process's build: the checkout's, or an install's (tox tests one)
    expected = "Python" if not compiled.in_use() else "compiled" if here == COMPILED else f"compiled from {here}"
    assert core_of(os.getpid()) == expected
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        assert core_of(child.pid) == "Python"  # a process that never imported generaldomo
    finally:
        child.communicate(b"", timeout=60)
    assert core_of(child.pid) == "unknown"  # gone


def _namespaces_allowed() -> bool:
    try:
        return subprocess.run(["unshare", "--net", "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.skipif(not _namespaces_allowed(), reason="this kernel refuses a new network namespace (unshare --net)")
def test_a_reference_broker_with_a_fixed_port_runs_in_a_private_namespace(tmp_path: Path) -> None:
    # A stand-in for the zguide's mdbroker: the minimal loop bound to the same fixed, all-interfaces endpoint.
    stand_in = tmp_path / "mdbroker"
    stand_in.write_text(f"#!/bin/sh\nexec {sys.executable} -m bench.peer min-broker 'tcp://*:5555'\n")
    stand_in.chmod(0o755)
    results = _run(tmp_path, "--c-broker", str(stand_in))
    rows = {(r["system"], r["mode"]): r for r in results["parts"]["cpeers"]["rows"]}
    for mode in ("sync", "pipelined"):
        assert rows["zguide mdbroker (C)", mode]["rps"] > 0
    assert not results["parts"]["cpeers"]["errors"]

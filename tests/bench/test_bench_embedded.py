"""bench.embedded_payload runs end to end with tiny counts and prints its table; no timing checks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_embedded_payload_bench_prints_a_row_per_cell() -> None:
    command = [sys.executable, "-m", "bench.embedded_payload", "--rounds", "1", "--sizes", "16,70000"]
    command += ["--small", "5", "--large", "2"]
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    rows = [line.split(" | ")[:3] for line in run.stdout.splitlines() if line.startswith("| C acc") or "| pure" in line]
    assert rows == [
        [links, via, size]
        for links in ("| C accelerator", "| pure Python")
        for via in ("inproc", "tcp")
        for size in ("16 B", "70000 B")
    ], run.stdout

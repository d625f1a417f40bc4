"""``python -m bench.instructions`` counts a broker's instructions per request under callgrind, end to end with
tiny counts (one broker: the minimal loop on the C accelerator); no figure is checked but that it is counted."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_instructions_per_request_are_counted(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "bench.instructions", "--only", "on the C accelerator", "--sync", "20"]
    cmd += ["--pipelined", "50", "--keep", str(tmp_path)]
    run = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    kept = re.findall(r"per request \((callgrind\.\d+\.\d+)\)", run.stderr)
    assert len(kept) == 2 and all((tmp_path / name).is_file() for name in kept)  # --keep: each counted dump stays
    [row] = [line for line in run.stdout.splitlines() if line.startswith("| minimal loop on the C accelerator")]
    sync, pipelined = (int(n.replace(",", "")) for n in re.findall(r"\| ([\d,]+) ", row)[:2])
    assert sync > 1000 and pipelined > 1000  # a request costs thousands of instructions at the very least

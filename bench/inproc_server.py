"""SERVER over inproc against ROUTER, with and without the ipc carrier, side by side in one run.

Three generaldomo stacks over ``inproc://`` in this process (broker thread, worker threads, a Client), as the
``transport`` part builds them: ROUTER; SERVER on a real inproc pipe (needs the project's libzmq, patch
``mailbox``); SERVER carried over private ipc (:mod:`generaldomo.io.inproc` with the fix taken as missing, as
with a stock libzmq). Sync and pipelined, 16 B (``--payload``), 1 and 4 workers, interleaved rounds, medians.

    python -m bench.inproc_server [--rounds N] [--sync N] [--pipelined N] [--payload BYTES]
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import replace
from typing import Any

from bench.config import QUICK, say
from bench.load import median
from bench.procs import Children
from bench.runner import Measurement, run_interleaved
from bench.stacks import Stack, gd_stack
from bench.transport import settle

SYSTEMS = ("router", "server-inproc", "server-carrier")


def stack_of(system: str, workers: tuple[int, ...], children: Children, tmpdir: str) -> Stack:
    """The generaldomo stack of ``system`` over inproc."""
    from generaldomo.io import inproc

    native = inproc.NATIVE
    inproc.NATIVE = native and system != "server-carrier"  # read when the link binds
    try:
        return gd_stack(system.split("-")[0], "inproc", workers, children, tmpdir)
    finally:
        inproc.NATIVE = native


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.inproc_server", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sync", type=int, default=2000, help="requests per sync measurement")
    parser.add_argument("--pipelined", type=int, default=20000, help="requests per pipelined measurement")
    parser.add_argument("--payload", type=int, default=16, help="bytes per request")
    args = parser.parse_args(argv)
    cfg = replace(
        QUICK, rounds=args.rounds, sync_n=args.sync, pipe_n=args.pipelined, seconds=3.0, payloads=(args.payload,)
    )
    from generaldomo.io import inproc

    systems = SYSTEMS if inproc.NATIVE else ("router", "server-carrier")
    say(f"inproc_server: libzmq {'with' if inproc.NATIVE else 'without'} the mailbox lock patch")
    stacks: list[tuple[dict[str, Any], Stack]] = []
    with tempfile.TemporaryDirectory(prefix="gdbench-") as tmpdir, Children() as children:
        try:
            for system in systems:
                stacks.append(
                    (
                        {"system": system, "transport": system, "scheme": "inproc"},
                        stack_of(system, cfg.workers, children, tmpdir),
                    )
                )
            settle(stacks, cfg)
            items = [
                Measurement(stack, {**base, "payload": args.payload, "workers": workers, "mode": mode})
                for mode in ("sync", "pipelined")
                for workers in cfg.workers
                for base, stack in stacks
            ]
            rows, errors = run_interleaved(items, cfg, "inproc_server")
        finally:
            for _, stack in stacks:
                stack.close()
    report(rows, systems)
    for error in errors:
        print("error:", error)
    return 1 if errors else 0


def report(rows: list[dict[str, Any]], systems: tuple[str, ...]) -> None:
    """A Markdown table per mode and worker count: req/s (medians), and each SERVER's ratio to ROUTER as the
    median of the per-round ratios (each round measures the three close together); sync also p50 latency."""
    print(f"| mode | workers | req/s: {' / '.join(systems)} | p50 µs | ratio to router, per round: median (range) |")
    print("|---|---|---|---|---|")
    for mode in ("sync", "pipelined"):
        for workers in sorted({r["workers"] for r in rows}):
            cell = {r["system"]: r for r in rows if r["mode"] == mode and r["workers"] == workers}
            rps = " / ".join(f"{cell[s]['rps']:,.0f}" for s in systems)
            p50 = " / ".join(f"{cell[s]['p50_us']:.0f}" for s in systems) if mode == "sync" else "-"
            ratios = []
            for system in systems[1:]:
                per_round = [
                    a["rps"] / b["rps"] for a, b in zip(cell[system]["runs"], cell["router"]["runs"], strict=False)
                ]
                ratios.append(f"{system} {median(per_round):.2f}x ({min(per_round):.2f}-{max(per_round):.2f})")
            print(f"| {mode} | {workers} | {rps} | {p50} | {'; '.join(ratios)} |")


if __name__ == "__main__":
    raise SystemExit(main())

"""``python -m bench [--quick] [--only PART[,PART]] [--out DIR] [--c-broker PATH]``: run the benchmark, print a
Markdown report.

Parts: ``transport`` (1 and 2: transport overhead and broker CPU per message), ``core`` (3: sans-IO core
scaling), ``flow`` (4: the flow-control timeline), ``peers`` (5: the majortomo broker), ``profile`` (the broker
hot path under cProfile), ``ray`` (6: the Ray flow-control experiment, generaldomo against an actor; needs
``generaldomo[ray]``; not part of ``--smoke``), ``adaptive`` (7: the adaptive concurrency cap against fixed
caps, plain client threads; not part of ``--smoke``), ``cpeers`` (8: the project's C Majordomo peers through
our broker and a minimal Python loop, with ``--c-broker PATH`` the zguide's C broker too, in a private network
namespace; the C++ client next to the Python one; not part of ``--smoke``), ``curve`` (9: plaintext against
CURVE, ``bench/curve.py``; not part of ``--smoke``), ``scale`` (10: 64 clients x 8 workers on one broker against
1 x 1, ``bench/scale.py``; not part of ``--smoke``), ``openloop`` (11: latency under load, open loop:
Poisson arrivals at fixed rates from 10 % to past saturation, HDR histograms, ``bench/openloop.py``; not part of
``--smoke``), ``shared`` (12: a shared service: fair shares between two tenants, a remote API with a hidden
limit against the article's actor with Ray tasks as its callers, goodput with deadlines; ``bench/shared.py``;
not part of ``--smoke``), ``goodput`` (13: goodput under overload with deadlines, deadline-aware dispatch on and
off, ``bench/goodput.py``; not part of ``--smoke``), ``goals`` (the performance goals, each a ratio side by side:
the core's instructions per request under callgrind and its profile, and the figures of parts ``cpeers``,
``peers`` and ``openloop`` of the same run, which ``--only goals`` runs first unless ``--smoke``;
``bench/goals.py``), ``ha`` (the broker pair: a failover's time to the first answer, and the replication's cost in
throughput, pair against a broker alone; ``bench/ha.py``; not part of ``--smoke``).
Progress goes to stderr, the report to stdout, and JSON + Markdown (+ PNG with matplotlib) under ``--out``.
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import shlex
import signal
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench import (
    adaptive_flow,
    core_scaling,
    cpeers,
    curve,
    goals,
    goodput,
    ha,
    netns,
    openloop,
    peers,
    profiling,
    ray_flow,
    report,
    scale,
    shared,
    timeline,
    transport,
)
from bench.config import FULL, QUICK, SMOKE, Config, progress, say
from bench.procs import Children, machine

PARTS = (
    "transport", "core", "flow", "peers", "profile", "cpeers", "ray", "adaptive", "curve", "scale", "openloop",
    "shared", "goodput", "goals", "ha",
)  # fmt: skip
NOT_SMOKE = (
    "ray",
    "adaptive",
    "cpeers",
    "curve",
    "scale",
    "openloop",
    "shared",
    "goodput",
    "goals",
    "ha",
)  # the long ones, the C builds, the many processes, callgrind
STALL_SECONDS = 180.0  # no progress line for this long: the run is stuck (a hang in a library); give up


def parse(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="about a minute: one round, small counts")
    parser.add_argument("--smoke", action="store_true", help=argparse.SUPPRESS)  # the test suite's seconds-long run
    parser.add_argument("--only", metavar="PART", help=f"comma-separated parts to run ({', '.join(PARTS)})")
    parser.add_argument("--out", type=Path, default=FULL.out, help=f"directory for JSON/PNG (default {FULL.out})")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default: 3, or 1 with --quick)")
    parser.add_argument(
        "--c-broker",
        metavar="PATH",
        default="",
        help="an MDP/0.1 broker program binding tcp://*:5555 (the zguide's mdbroker, built by you) for part cpeers "
        "to measure next to ours; the run then moves into a private network namespace (bench/netns.py)",
    )
    args = parser.parse_args(argv)
    everything = tuple(p for p in PARTS if not (args.smoke and p in NOT_SMOKE))
    parts = tuple(p.strip() for p in args.only.split(",")) if args.only else everything
    unknown = set(parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown part(s) {', '.join(sorted(unknown))}; choose from {', '.join(PARTS)}")
    if "goals" in parts:  # last, after the parts whose figures it reads (run in the same run)
        needs = () if args.smoke else tuple(p for p in goals.NEEDS if p not in parts)
        parts = (*(p for p in parts if p != "goals"), *needs, "goals")
    args.parts = parts
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the chosen parts; print the report; write the files. Returns the exit code."""
    args = parse(argv)
    if args.c_broker and not netns.inside():
        netns.enter(sys.argv[1:] if argv is None else argv)
    if netns.inside():
        netns.loopback_up()
    cfg: Config = SMOKE if args.smoke else QUICK if args.quick else FULL
    cfg = replace(cfg, out=args.out, c_broker=args.c_broker, **({"rounds": args.rounds} if args.rounds else {}))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the clean-up below on SIGTERM too
    started = time.time()
    stem = time.strftime("%Y%m%d-%H%M%S", time.localtime(started)) + f"-{cfg.name}"
    results: dict[str, Any] = {
        "command": " ".join(["python -m bench", shlex.join(sys.argv[1:] if argv is None else argv)]).strip(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)),
        "machine": machine(),
        "config": cfg.as_dict(),
        "parts": {},
    }
    say(f"{cfg.name} run of {', '.join(args.parts)}; machine {results['machine']}")
    cfg.out.mkdir(parents=True, exist_ok=True)
    with open(cfg.out / f"{stem}-children.log", "w") as log, Children(log) as children:
        watchdog(results, children, cfg, started, stem, STALL_SECONDS)
        for part in args.parts:
            say(f"part {part}")
            if part == "transport":
                results["parts"][part] = transport.run(cfg, children)
            elif part == "core":
                results["parts"][part] = core_scaling.run(cfg)
            elif part == "flow":
                progress["last"] = time.monotonic()
                plot = cfg.out / f"{stem}-flow-timeline.png" if timeline.can_plot() else None
                results["parts"][part] = timeline.run(cfg.flow_bursts, plot=plot)
            elif part == "peers":
                results["parts"][part] = peers.run(cfg, children)
            elif part == "profile":
                results["parts"][part] = profiling.run(cfg, children)
            elif part == "cpeers":
                results["parts"][part] = cpeers.run(cfg, children)
            elif part == "ray":
                plot = cfg.out / f"{stem}-ray-flow.png" if timeline.can_plot() else None
                results["parts"][part] = ray_flow.run(cfg, plot=plot)
            elif part == "adaptive":
                plot = cfg.out / f"{stem}-adaptive.png" if timeline.can_plot() else None
                results["parts"][part] = adaptive_flow.run(cfg, plot=plot)
            elif part == "curve":
                results["parts"][part] = curve.run(cfg)
            elif part == "scale":
                results["parts"][part] = scale.run(cfg, children)
            elif part == "openloop":
                plot = cfg.out / f"{stem}-openloop.png" if timeline.can_plot() else None
                results["parts"][part] = openloop.run(cfg, children, plot=plot)
            elif part == "shared":
                plot = cfg.out / f"{stem}-shared.png" if timeline.can_plot() else None
                results["parts"][part] = shared.run(cfg, plot=plot)
            elif part == "goodput":
                results["parts"][part] = goodput.run(cfg)
            elif part == "goals":
                results["parts"][part] = goals.run(cfg, results["parts"])
            elif part == "ha":
                results["parts"][part] = ha.run(cfg)
    results["duration_s"] = time.time() - started
    paths = report.write(results, cfg.out, stem)
    print(report.markdown(results))
    say("wrote " + ", ".join(str(p) for p in paths))
    failed = any(part.get("errors") for part in results["parts"].values())
    return 1 if failed else 0


def watchdog(results: dict[str, Any], children: Children, cfg: Config, started: float, stem: str, stall: float) -> None:
    """Start a thread that ends the run if it stalls: thread stacks to stderr, partial results written, children
    killed, exit status 3. A thread stuck in a blocking libzmq call cannot be interrupted any other way."""

    def watch() -> None:
        while time.monotonic() - progress["last"] < stall:
            time.sleep(1.0)
        say(f"STALLED: no progress for {stall:.0f} s; thread stacks follow; writing partial results and exiting")
        faulthandler.dump_traceback(all_threads=True)
        results.setdefault("errors", []).append(f"run stalled (no progress for {stall:.0f} s) and was aborted")
        results["duration_s"] = time.time() - started
        try:
            print(report.markdown(results))
            report.write(results, cfg.out, stem + "-partial")
        finally:
            children.close()
            sys.stdout.flush()
            os._exit(3)

    threading.Thread(target=watch, name="bench-watchdog", daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())

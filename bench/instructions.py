"""Instructions per request of each broker, counted by callgrind: a measure the machine's load does not move.

``python -m bench.instructions [--c-broker PATH] [--sync N] [--pipelined N]`` runs each broker under
``valgrind --tool=callgrind --instr-atstart=no`` (it starts at full speed, uninstrumented), with one C MDP/0.1
echo worker and the C client of part ``cpeers`` (both native, not under valgrind). After a warm-up it switches
instrumentation on (``callgrind_control -i on``), zeroes the counters, runs the C client (N sync requests, then
N pipelined in another measurement), dumps the counters (``callgrind_control -d``) and divides the instructions
(``Ir``: user space of every thread of the broker process, libzmq's I/O threads included; not the kernel's
share) by the requests. Brokers: the generaldomo ROUTER broker (C accelerator; pure Python), the minimal
Python loop (pure; on the accelerator) and, given ``--c-broker PATH``, that reference MDP/0.1 broker, which
binds ``tcp://*:5555``: the run then moves into a private network namespace (:mod:`bench.netns`). A generaldomo
broker's row says which core its process ran (compiled or Python), read from the process's memory map.

The same binary, inputs and environment give the same counts whatever else the machine does, so these ratios
hold on the shared 2-core machine where wall-clock ratios swing with other developers' jobs; what they leave out
is the kernel's work (system calls, wake-ups), which ``cpeers`` measures in wall-clock terms. Debian's
``valgrind`` package provides callgrind. Every wait is bounded; the broker and worker die with this process.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import cpeers, netns
from bench.procs import ROOT, core_of, free_port

TIMEOUT = 300.0  # seconds for any one step (valgrind is slow once instrumenting)
WARMUP = 200  # sync requests before counting


def brokers(c_broker: str) -> list[tuple[str, list[str], dict[str, str]]]:
    """(name, command taking the endpoint last, extra environment) of each broker measured."""
    python = [sys.executable, "-m"]
    gd = [*python, "generaldomo", "broker", "--transport", "router", "--bind"]
    found = [
        ("generaldomo ROUTER, C accelerator", gd, {}),
        ("generaldomo ROUTER, pure Python", gd, {"GENERALDOMO_PURE_PYTHON": "1"}),
        ("minimal Python loop", [*python, "bench.peer", "min-broker"], {}),
        ("minimal loop on the C accelerator", [*python, "bench.peer", "min-broker-c"], {}),
    ]
    if c_broker:
        found.append(("zguide mdbroker (C)", [c_broker], {}))
    return found


def _control(*args: str) -> str:
    done = subprocess.run(["callgrind_control", *args], capture_output=True, text=True, timeout=TIMEOUT, check=False)
    if done.returncode:
        raise RuntimeError(f"callgrind_control {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def _client(programs: dict[str, Path], endpoint: str, count: int, pipelined: bool) -> None:
    args = [str(programs["mdp01_client"]), "--requests", str(count), "--timeout-ms", "120000", endpoint]
    if pipelined:
        args.insert(1, "--pipeline")
    done = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT, check=False)
    if done.returncode:
        raise RuntimeError(f"C client exit {done.returncode}: {done.stderr.strip()[:300]}")


def _counted(out: Path, pid: int) -> tuple[Path, int]:
    """The latest dump of ``pid`` and its instructions (its ``summary:`` line)."""
    dumps = sorted(out.glob(f"callgrind.{pid}*"), key=lambda p: p.stat().st_mtime)
    for line in dumps[-1].read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return dumps[-1], int(line.split()[1])
    raise RuntimeError(f"no summary line in {dumps[-1]}")


def measure(
    name: str, command: list[str], env: dict[str, str], programs: dict[str, Path], counts: dict[str, int], out: Path
) -> tuple[str, dict[str, float]]:
    """Instructions per request of one broker, sync and pipelined; and, for a generaldomo broker, which core its
    process ran (:func:`bench.procs.core_of`), else ``""``."""
    fixed = command[0] != sys.executable
    endpoint = cpeers.C_BROKER_ENDPOINT if fixed else f"tcp://127.0.0.1:{free_port()}"
    valgrind = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}/callgrind.%p"]
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    broker = subprocess.Popen(
        [*valgrind, *command, *([] if fixed else [endpoint])],
        env={**os.environ, **env, "PYTHONPATH": path},
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    worker = subprocess.Popen([str(programs["mdp01_worker"]), endpoint], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + TIMEOUT
        while True:  # until the broker serves (it may still be starting)
            try:
                _client(programs, endpoint, WARMUP, pipelined=False)
                break
            except (RuntimeError, subprocess.TimeoutExpired):
                if time.monotonic() > deadline or broker.poll() is not None:
                    raise
        core = core_of(broker.pid) if command[2:4] == ["generaldomo", "broker"] else ""
        _control("-i", "on", str(broker.pid))
        found: dict[str, float] = {}
        for mode, count in counts.items():
            _control("-z", str(broker.pid))
            _client(programs, endpoint, count, pipelined=mode == "pipelined")
            _control("-d", str(broker.pid))
            dump, counted = _counted(out, broker.pid)
            found[mode] = counted / count
            print(f"[instructions] {name} {mode}: {found[mode]:,.0f} per request ({dump.name})", file=sys.stderr)
        return core, found
    finally:
        for proc in (worker, broker):
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.instructions", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--c-broker", metavar="PATH", default="", help="a reference MDP/0.1 broker binding tcp://*:5555"
    )
    parser.add_argument("--sync", type=int, default=2000, help="sync requests counted (default 2000)")
    parser.add_argument("--pipelined", type=int, default=5000, help="pipelined requests counted (default 5000)")
    parser.add_argument("--only", metavar="TEXT", default="", help="only the brokers whose name contains TEXT")
    parser.add_argument(
        "--keep", metavar="DIR", default="", help="keep the callgrind dumps in DIR (for callgrind_annotate)"
    )
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("bench.instructions needs valgrind (Debian package valgrind)", file=sys.stderr)
        return 2
    if args.c_broker and not netns.inside():
        netns.enter(sys.argv[1:] if argv is None else argv, module="bench.instructions")
    if netns.inside():
        netns.loopback_up()
    programs = cpeers.build()
    counts = {"sync": args.sync, "pipelined": args.pipelined}
    rows = []
    with tempfile.TemporaryDirectory(prefix="gdcallgrind-") as tmp:
        out = Path(args.keep or tmp)
        out.mkdir(parents=True, exist_ok=True)
        for name, command, env in brokers(args.c_broker):
            if args.only not in name:
                continue
            core, found = measure(name, command, env, programs, counts, out)
            rows.append((f"{name} ({core} core)" if core else name, found))
    reference_name = "zguide mdbroker (C)" if args.c_broker else "minimal Python loop"
    reference = dict(rows).get(reference_name, rows[0][1])
    against = reference_name if reference_name in dict(rows) else rows[0][0]
    print(f"| broker, C MDP/0.1 client + 1 worker | instructions/request sync | pipelined | {against} / it, sync | "
          "pipelined |")  # fmt: skip
    print("|---|---:|---:|---:|---:|")
    for name, found in rows:
        ratios = [reference[mode] / found[mode] for mode in counts]
        print(f"| {name} | {found['sync']:,.0f} | {found['pipelined']:,.0f} | {ratios[0]:.2f}x | {ratios[1]:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

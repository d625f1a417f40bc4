"""One program: small and large requests from a C++ client to the embedded broker, over inproc and over tcp.

``tests/cpp/gd_embedded.cpp --mode payload`` (``generaldomo::EmbeddedBroker`` and a ``generaldomo::Client`` in one
process, built as the tests build it) sends requests one after the other to the C MDP worker
(``mdp01_worker --sink``, built from ``tests/interop/mdp_worker.c``, a process of its own answering with the body's
size) over the broker's ROUTER link on loopback tcp; the client reaches the broker over ``inproc://`` (its SERVER
link) or over tcp (the same broker's SERVER link on loopback). Each run reports per request: the broker
thread's CPU time (``EmbeddedBroker::cpu_time``), the whole program's CPU time (client, broker, libzmq's threads)
and the wall time. The broker's links run on the C accelerator (frames of 64 KiB or more passed by reference) or, for
comparison, on the pure-Python path (``GENERALDOMO_PURE_PYTHON=1``: every frame copied in and out). Sizes, paths
and schemes are interleaved, the order rotated each round; the table gives medians.

    python -m bench.embedded_payload [--rounds N] [--sizes 16,67108864] [--small N] [--large N]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.config import say
from bench.load import median
from bench.procs import ROOT

# one folder per source tree: checkouts side by side would otherwise rebuild each other's programs from their sources
_TREE = hashlib.blake2b(str(ROOT).encode(), digest_size=4).hexdigest()
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "generaldomo" / "bench-bin" / _TREE
MIB = 1024 * 1024
LARGE = 64 * MIB
LIMITS = (  # room for a 64 MiB request (the defaults refuse it: 413, 429)
    "max-message=300000000", "queue-bytes=600000000", "service-queue-bytes=600000000", "keep-answers=0",
    "held-bytes=none", "connection-bytes=none",
)  # fmt: skip
TIMEOUT = 600.0
FIGURES = ("broker_cpu_us", "process_cpu_us", "wall_us")


def build() -> dict[str, Path]:
    """gd_embedded and the C MDP worker, built (if out of date) into :data:`CACHE`."""
    tests = str(ROOT / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    from cpp.build import build_programs  # type: ignore[import-not-found]
    from interop.build import build_peers  # type: ignore[import-not-found]

    return {"gd_embedded": build_programs(CACHE)["gd_embedded"], "worker": build_peers(CACHE)["mdp01_worker"]}


def measure(programs: dict[str, Path], size: int, requests: int, via: str, pure: bool) -> dict[str, float]:
    """One gd_embedded run: its per-request figures."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GENERALDOMO_PYTHON": sys.executable}
    if pure:
        env["GENERALDOMO_PURE_PYTHON"] = "1"
    command = [str(programs["gd_embedded"]), "--mode", "payload", "--size", str(size), "--requests", str(requests)]
    command += ["--via", via, "--set", "router=tcp://127.0.0.1:*", "--set", "server=tcp://127.0.0.1:*"]
    for limit in LIMITS:
        command += ["--set", limit]
    command.append(f"inproc://bench-payload-{os.getpid()}")
    program = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    worker = None
    try:
        assert program.stdout is not None and program.stdin is not None
        lines = []
        deadline = time.monotonic() + TIMEOUT
        while (line := program.stdout.readline()) and line.strip() != "ready" and time.monotonic() < deadline:
            lines.append(line.split())
        router = next(words[2] for words in lines if words[:2] == ["endpoint", "router"])
        worker = subprocess.Popen(  # it says it reconnects when the broker stops: not worth a line
            [str(programs["worker"]), "--sink", "--service", "sink", router], stderr=subprocess.DEVNULL
        )
        time.sleep(0.5)  # the worker registers (the first, unmeasured request waits for it anyway)
        out, _ = program.communicate("go\n", TIMEOUT)
    finally:
        if worker is not None:
            worker.kill()
            worker.wait()
        if program.poll() is None:
            program.kill()
            program.wait()
    words = next((line.split() for line in out.splitlines() if line.startswith("payload ")), None)
    if program.returncode or words is None:
        raise RuntimeError(f"gd_embedded exit {program.returncode}: {out[-500:]}")
    return {name: float(words[words.index(name) + 1]) for name in FIGURES}


def label(size: int) -> str:
    return f"{size // MIB} MiB" if size >= MIB else f"{size} B"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.embedded_payload", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", default=f"16,{LARGE}", help="request payload sizes in bytes")
    parser.add_argument("--small", type=int, default=2000, help="requests per run below 1 MiB")
    parser.add_argument("--large", type=int, default=20, help="requests per run of 1 MiB or more")
    parser.add_argument("--no-pure", action="store_true", help="leave out the pure-Python path")
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.sizes.split(",")]
    programs = build()
    cells = [(size, via, pure) for pure in (False, True)[: 1 if args.no_pure else 2] for via in ("inproc", "tcp")
             for size in sizes]  # fmt: skip
    results: dict[tuple[int, str, bool], list[dict[str, float]]] = {cell: [] for cell in cells}
    for round_ in range(args.rounds):
        order = cells[round_ % len(cells) :] + cells[: round_ % len(cells)]
        for size, via, pure in order:
            count = args.large if size >= MIB else args.small
            say(f"embedded_payload: round {round_ + 1}, {label(size)} via {via}, {'pure' if pure else 'accelerator'}")
            results[size, via, pure].append(measure(programs, size, count, via, pure))
    print("| links | client to broker | payload | broker thread CPU µs/req | program CPU µs/req | wall µs/req |")
    print("|---|---|---|---:|---:|---:|")
    for size, via, pure in cells:
        runs = results[size, via, pure]
        figures = [f"{median([run[name] for run in runs]):,.0f}" for name in FIGURES]
        print(f"| {'pure Python' if pure else 'C accelerator'} | {via} | {label(size)} | {' | '.join(figures)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

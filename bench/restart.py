"""``python -m bench.restart [--kills N] [--heartbeat S ...]``: what a broker restart costs its peers, measured
with kill -9.

A broker on a state directory (both transports, ipc) serves two Python worker processes (``generaldomo worker
bench.restart:app``, two tasks at once each) and load from two Python clients (one per transport, three
threads each, each thread asking one task after another, 0 ms or 1 s of work at random). Every 2-4 s the
bench kills the broker with SIGKILL and starts it again at once, as a supervisor would. Per kill:

- *kill to bound*: from the kill to the new process's endpoints printed (its start: imports, state directory,
  bind);
- *kill to serving*: to the answer of a fresh client's first request (0 ms of work): the new instance's
  recovery window (twice the heartbeat by default, during which it holds dispatch while the workers that ran
  tasks of the old instance come back) and the workers' registration included;
- *the clients' answers*: for every request outstanding at the kill (sent before it, answered after), the
  time from the kill to its answer, quick (0 ms) and long (1 s) tasks apart;
- *run twice*: tasks the workers ran more than once (each run is a file; 0 expected: a task running at a
  kill is handed over).

Each ``--heartbeat`` (peers and broker alike; default: 2.5, the default, and 0.5) is one run of ``--kills``
kills on a broker of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.procs import Children
from generaldomo import App, Client

RUNS = "GD_BENCH_RESTART_RUNS"  # the directory where the workers record each run of a task
LONG_MS = 1000
THREADS = 3  # per client
app = App("bench-restart")


@app.service("work")
def work(payload: bytes) -> bytes:
    """``ID:MS``: records this run of ID (a file in ``$GD_BENCH_RESTART_RUNS``), works MS ms."""
    task, _, milliseconds = payload.rpartition(b":")
    (Path(os.environ[RUNS]) / f"{task.decode()}.{os.getpid()}.{time.monotonic_ns()}").touch()
    time.sleep(int(milliseconds) / 1000)
    return task


class Load:
    """Client threads asking one task after another until stopped; each answer's (sent, received, ms)."""

    def __init__(self, endpoints: dict[str, str], heartbeat: float) -> None:
        self.clients = {  # through the restarts: the broker and its workers come back
            t: Client(e, t, heartbeat_interval=heartbeat, fail_unknown=False, fail_unreachable=False)
            for t, e in endpoints.items()
        }
        self.answers: list[tuple[float, float, int]] = []
        self.failures: list[BaseException] = []
        self.stopping = threading.Event()
        self.threads = [
            threading.Thread(target=self._ask, args=(client, f"{transport[0]}{n}"), daemon=True)
            for transport, client in self.clients.items()
            for n in range(THREADS)
        ]
        for thread in self.threads:
            thread.start()

    def _ask(self, client: Client, name: str) -> None:
        rng = random.Random(name)
        n = 0
        while not self.stopping.is_set():
            ms = rng.choice((0, LONG_MS))
            sent = time.monotonic()
            try:
                client.request("work", f"{name}-{n}:{ms}".encode(), timeout=120)
            except BaseException as error:  # reported with the figures
                self.failures.append(error)
                return
            self.answers.append((sent, time.monotonic(), ms))
            n += 1

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(150)
        for client in self.clients.values():
            client.close()


def measure(heartbeat: float, kills: int, rng: random.Random) -> dict[str, Any]:
    """One broker (restarted ``kills`` times), its workers and load, at one heartbeat setting."""
    with tempfile.TemporaryDirectory(prefix="bench-restart-") as root, Children() as children:
        runs = Path(root) / "runs"
        runs.mkdir()
        os.environ[RUNS] = str(runs)
        endpoints = {"router": f"ipc://{root}/router", "server": f"ipc://{root}/server"}
        peer = ["--heartbeat", str(heartbeat)]
        broker_args = ["gd", "broker", "--router", endpoints["router"], "--server", endpoints["server"]]
        broker_args += ["--state-dir", f"{root}/state", *peer]
        broker, _ = children.spawn(*broker_args, banner_timeout=60)
        for _ in range(2):
            children.start("bench.peer", "gd", "worker", "bench.restart:app", "--connect", endpoints["router"],
                           "--concurrency", "2", *peer)  # fmt: skip
        with Client(endpoints["router"], heartbeat_interval=heartbeat, fail_unknown=False) as first:
            first.request("work", b"first:0", timeout=60)
        load = Load(endpoints, heartbeat)
        restarts: list[dict[str, float]] = []
        try:
            for k in range(kills):
                time.sleep(rng.uniform(2.0, 4.0))
                killed = time.monotonic()
                broker.kill()
                broker.wait(30)
                children.stop(broker)
                broker, _ = children.spawn(*broker_args, banner_timeout=60)
                bound = time.monotonic()
                with Client(endpoints["server"], "server", heartbeat_interval=heartbeat, fail_unknown=False) as probe:
                    probe.request("work", f"probe{k}:0".encode(), timeout=60)
                restarts.append({"at": killed, "bound_ms": (bound - killed) * 1000,
                                 "serving_ms": (time.monotonic() - killed) * 1000})  # fmt: skip
            time.sleep(2 * LONG_MS / 1000)  # the answers outstanding at the last kill come
        finally:
            load.stop()
        ran = Counter(path.name.split(".")[0] for path in runs.iterdir())
        return summary(heartbeat, restarts, load, sum(count > 1 for count in ran.values()))


def summary(heartbeat: float, restarts: list[dict[str, float]], load: Load, twice: int) -> dict[str, Any]:
    after: dict[int, list[float]] = {0: [], LONG_MS: []}  # ms of work: kill to answer, of those outstanding
    for restart in restarts:
        at = restart["at"]
        for sent, received, ms in load.answers:
            if sent < at < received:
                after[ms].append((received - at) * 1000)

    def spread(values: list[float]) -> dict[str, float | None]:
        values = sorted(values)
        if not values:
            return {"n": 0, "p50": None, "p90": None, "max": None}
        return {"n": len(values), "p50": statistics.median(values),
                "p90": values[min(len(values) - 1, int(len(values) * 0.9))], "max": values[-1]}  # fmt: skip

    return {
        "heartbeat": heartbeat,
        "kills": len(restarts),
        "bound_ms": spread([r["bound_ms"] for r in restarts]),
        "serving_ms": spread([r["serving_ms"] for r in restarts]),
        "quick_after_kill_ms": spread(after[0]),
        "long_after_kill_ms": spread(after[LONG_MS]),
        "answers": len(load.answers),
        "failures": [repr(error) for error in load.failures],
        "run_twice": twice,
    }


def markdown(results: list[dict[str, Any]]) -> str:
    def cell(row: dict[str, Any]) -> str:
        if not row["n"]:
            return "-"
        return f"{row['p50']:.0f} / {row['p90']:.0f} / {row['max']:.0f} ({row['n']})"

    lines = [
        "| heartbeat | kills | kill to bound, ms | kill to serving, ms | quick tasks: kill to answer, ms | "
        "1 s tasks: kill to answer, ms | answers | failed | run twice |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in results:
        lines.append(
            f"| {row['heartbeat']} s | {row['kills']} | {cell(row['bound_ms'])} | {cell(row['serving_ms'])} | "
            f"{cell(row['quick_after_kill_ms'])} | {cell(row['long_after_kill_ms'])} | {row['answers']} | "
            f"{len(row['failures'])} | {row['run_twice']} |"
        )
    lines.append("")
    lines.append("Cells: p50 / p90 / max (count).")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.restart", description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=10, help="kills per heartbeat setting")
    parser.add_argument("--heartbeat", type=float, action="append", help="seconds (repeatable; default 2.5, 0.5)")
    args = parser.parse_args(argv)
    rng = random.Random(21)
    results = [measure(heartbeat, args.kills, rng) for heartbeat in args.heartbeat or [2.5, 0.5]]
    print(json.dumps(results, indent=2), file=sys.stderr)
    print(markdown(results))
    return 0 if not any(row["failures"] or row["run_twice"] for row in results) else 1


if __name__ == "__main__":
    sys.exit(main())

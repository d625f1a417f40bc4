"""``python -m bench.state_store [--cycles N] [--services N]``: the two stores considered for ``--state-dir``,
side by side against a restart loop.

Each cycle starts a child process that opens a store, loads it and then changes one service's flow limits
after another, saying each change's sequence number once its write returned; the parent kills it (SIGKILL)
after a random 20-200 ms of writing, opens the store itself and checks that it loads (no corruption) and
holds every change the child had acknowledged. The kinds alternate cycle by cycle, so that both see the
same machine. Stores:

- ``json``: :mod:`generaldomo.io.hub.state` as the broker uses it: the whole state in one JSON file written by
  rename (temporary file, fsync, rename, fsync of the directory).
- ``sqlite``: the standard library's SQLite in WAL mode with ``synchronous=FULL`` (durable against power loss
  as the JSON store is), one row per service, a change one ``INSERT OR REPLACE`` transaction.

Reported per kind: start to loaded (the child's time to open and load the store, the store's own imports
included, the broker's modules loaded before), write latency p50/p99, corrupt stores and acknowledged writes
lost after a kill.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

KINDS = ("json", "sqlite")


class SqliteStore:
    """The alternative: one row per service in a WAL-mode SQLite database."""

    def __init__(self, directory: Path) -> None:
        import sqlite3  # here, so that the start-to-loaded time counts each store's own imports

        self.db = sqlite3.connect(directory / "state.db", isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("CREATE TABLE IF NOT EXISTS flows (service TEXT PRIMARY KEY, entry TEXT NOT NULL)")

    def load(self) -> dict[str, Any]:
        return {name: json.loads(entry) for name, entry in self.db.execute("SELECT service, entry FROM flows")}

    def save(self, name: str, entry: dict[str, Any]) -> None:
        self.db.execute("BEGIN IMMEDIATE")
        self.db.execute("INSERT OR REPLACE INTO flows VALUES (?, ?)", (name, json.dumps(entry)))
        self.db.execute("COMMIT")


class JsonStore:
    """The broker's store, :class:`generaldomo.io.hub.state.StateDir`; a change's sequence number is its rate."""

    def __init__(self, directory: Path) -> None:
        from generaldomo.io.hub.state import StateDir  # (as above)

        self.state = StateDir(directory)
        self.state.restore({})

    def load(self) -> dict[str, Any]:
        return {name: {"seq": int(entry.limits.rate or 0) - 1} for name, entry in self.state.entries.items()}

    def save(self, name: str, entry: dict[str, Any]) -> None:
        from generaldomo.sansio.broker.flow.flow import FlowLimits
        from generaldomo.sansio.broker.mmi import FlowChange

        self.state.record([FlowChange(name, FlowLimits(rate=float(entry["seq"] + 1)))])
        self.state.flush()  # the broker answers a change once its writer thread has it on disk


def child(kind: str, directory: Path, services: int) -> None:
    """Open, load, then write changes until killed, printing ``loaded MS`` and then ``SEQ WRITE_US`` lines."""
    # (a broker has it loaded before it opens its state directory)
    import generaldomo.sansio.broker.flow.flow  # noqa: F401

    started = time.monotonic()
    store = JsonStore(directory) if kind == "json" else SqliteStore(directory)
    loaded = store.load()
    seq = max((entry["seq"] for entry in loaded.values()), default=-1) + 1
    print(f"loaded {(time.monotonic() - started) * 1000:.3f} {len(loaded)}", flush=True)
    while True:
        before = time.perf_counter()
        store.save(f"service-{seq % services}", {"seq": seq})
        print(f"{seq} {(time.perf_counter() - before) * 1e6:.1f}", flush=True)
        seq += 1


def cycle(kind: str, directory: Path, services: int, rng: random.Random) -> dict[str, Any]:
    """One start, a burst of writes, a kill -9; then the parent's check of what the store holds."""
    spawned = time.monotonic()
    command = [sys.executable, "-m", "bench.state_store", "--child", kind, str(directory), str(services)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONHASHSEED": "0"})
    assert process.stdout is not None
    first = process.stdout.readline().split()
    to_loaded = (time.monotonic() - spawned) * 1000
    deadline = time.monotonic() + rng.uniform(0.02, 0.2)
    acked, writes = -1, []
    while time.monotonic() < deadline:
        line = process.stdout.readline().split()
        acked, writes = int(line[0]), [*writes, float(line[1])]
    process.send_signal(signal.SIGKILL)
    for line in process.stdout:  # lines written before the kill are acknowledgements too
        parts = line.split()
        if len(parts) == 2:
            acked, writes = int(parts[0]), [*writes, float(parts[1])]
    process.wait()
    corrupt, lost = 0, 0
    try:
        store = JsonStore(directory) if kind == "json" else SqliteStore(directory)
        held = store.load()
        if kind == "json":
            store.state.close()  # type: ignore[union-attr]
        newest = max((entry["seq"] for entry in held.values()), default=-1)
        lost = int(newest < acked)
    except Exception:
        corrupt = 1
    return {"child_load_ms": float(first[1]), "spawn_to_loaded_ms": to_loaded, "writes_us": writes,
            "corrupt": corrupt, "lost": lost}  # fmt: skip


def run(cycles: int, services: int) -> dict[str, Any]:
    rng = random.Random(21)
    results: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
    with tempfile.TemporaryDirectory(prefix="bench-state-") as root:
        directories = {kind: Path(root) / kind for kind in KINDS}
        for directory in directories.values():
            directory.mkdir()
        for n in range(cycles):
            for kind in KINDS if n % 2 == 0 else reversed(KINDS):
                results[kind].append(cycle(kind, directories[kind], services, rng))
    return {kind: summary(rows) for kind, rows in results.items()}


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    writes = sorted(w for row in rows for w in row["writes_us"])
    return {
        "cycles": len(rows),
        "load_ms_p50": statistics.median(row["child_load_ms"] for row in rows),
        "spawn_to_loaded_ms_p50": statistics.median(row["spawn_to_loaded_ms"] for row in rows),
        "writes": len(writes),
        "write_us_p50": writes[len(writes) // 2] if writes else None,
        "write_us_p99": writes[min(len(writes) - 1, int(len(writes) * 0.99))] if writes else None,
        "corrupt": sum(row["corrupt"] for row in rows),
        "lost_acknowledged": sum(row["lost"] for row in rows),
    }


def markdown(results: dict[str, Any], services: int) -> str:
    lines = [
        f"| store ({services} services) | start to loaded, ms (p50) | write µs p50 / p99 | writes | corrupt | lost |",
        "|---|---|---|---|---|---|",
    ]
    for kind, row in results.items():
        lines.append(
            f"| {kind} | {row['load_ms_p50']:.1f} | {row['write_us_p50']:.0f} / {row['write_us_p99']:.0f} | "
            f"{row['writes']} | {row['corrupt']} / {row['cycles']} | {row['lost_acknowledged']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.state_store", description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=40, help="kills per store kind")
    parser.add_argument("--services", type=int, default=20, help="services whose limits the state holds")
    parser.add_argument("--child", nargs=3, metavar=("KIND", "DIR", "SERVICES"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child[0], Path(args.child[1]), int(args.child[2]))
        return 0
    results = run(args.cycles, args.services)
    print(json.dumps(results, indent=2), file=sys.stderr)
    print(markdown(results, args.services))
    return 0


if __name__ == "__main__":
    sys.exit(main())

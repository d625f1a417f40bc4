"""What one hostile message costs a broker that serves others (issue 10, bounded work per message).

``python -m bench.bombs`` starts a ``generaldomo broker`` process and an echo worker process per case, keeps a
``generaldomo.Client`` doing echo round trips (16 B) all the time, and has an attacker process send one message:

- ``router-frames``: 4 million empty frames (8 MB on the wire) to the ROUTER link;
- ``router-bytes``: 16 frames of 60 MiB each (each under libzmq's per-frame limit) to the ROUTER link;
- ``server-zeros``: one 60 MiB part of zero bytes (60 million packed empty frames) to the SERVER link;
- ``router-cancels``: not one message but 40,000 small requests for a service nobody serves, then a CANCEL for
  each, newest first (each cancel takes a task from the far end of the queue: a queue that removes from the
  middle in O(n) spends seconds of the broker's time there; the SERVICE's queue does it in O(1)).

It reports the attacker's send time, how long after the send the broker had dropped it (its counters, read
through ``mmi.status``), the other client's round trips (count, p50 and the longest) from the attack's start
to a second after the drop, the broker's CPU time and its memory (RSS after, and the peak). Every wait is
bounded; children are killed on exit.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time

from bench.procs import cpu_seconds, free_port
from generaldomo import Client

MIB = 1024 * 1024
ATTACKER = """\
import sys, time, zmq
kind, endpoint = sys.argv[1], sys.argv[2]
ctx = zmq.Context()
s = ctx.socket(zmq.CLIENT if kind == "server-zeros" else zmq.DEALER)
s.setsockopt(zmq.LINGER, 60000)
s.connect(endpoint)
time.sleep(0.2)
t = time.monotonic()
if kind == "router-frames":
    for _ in range(4_000_000 - 1):
        s.send(b"", zmq.SNDMORE)
    s.send(b"")
elif kind == "router-bytes":
    part = bytes(60 * 1024 * 1024)
    for i in range(16):
        s.send(part, zmq.SNDMORE if i < 15 else 0, copy=False)
elif kind == "router-cancels":
    ids = [b"r%07d" % i for i in range(40_000)]
    for rid in ids:
        s.send_multipart([b"GDPC01", b"\x01", rid, b"nobody", b"x"])
    for rid in reversed(ids):
        s.send_multipart([b"GDPC01", b"\x05", rid])
else:
    s.send(bytes(60 * 1024 * 1024), copy=False)
s.close()
ctx.term()
print(t, time.monotonic(), flush=True)
"""
CASES = {"router-frames": "router", "router-bytes": "router", "server-zeros": "server", "router-cancels": "router"}
CANCELS = 40_000


class Probe(threading.Thread):
    """Round trips of another client, timestamped."""

    def __init__(self, endpoint: str, transport: str) -> None:
        super().__init__(daemon=True)
        self.client = Client(endpoint, transport)
        self.trips: list[tuple[float, float]] = []  # (start, seconds)
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set() and len(self.trips) < 1_000_000:
            start = time.monotonic()
            self.client.request("echo", b"x" * 16, timeout=120)
            self.trips.append((start, time.monotonic() - start))

    def stop(self) -> None:
        self.stopping.set()
        self.join(130)
        self.client.close()


def memory(pid: int) -> dict[str, float]:
    with open(f"/proc/{pid}/status") as f:
        fields = dict(line.split(":", 1) for line in f)
    return {name: int(fields[name].split()[0]) / 1024 for name in ("VmRSS", "VmHWM")}


def dropped(client: Client, kind: str) -> bool:
    """Whether the broker is done with the attack: it dropped the message (or took every cancel)."""
    counters = json.loads(client.request("mmi.status", timeout=120).payload)["broker"]["counters"]
    if kind == "router-cancels":
        return bool(counters.get("cancelled", 0) >= CANCELS)
    return sum(n for name, n in counters.items() if name.startswith("dropped_")) > 0


def run_case(kind: str) -> dict[str, float]:
    transport = CASES[kind]
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    gd = [sys.executable, "-m", "generaldomo"]
    broker = subprocess.Popen([*gd, "broker", "--transport", transport, "--bind", endpoint], stderr=subprocess.DEVNULL)
    worker = subprocess.Popen([*gd, "worker", "--transport", transport, "--connect", endpoint])
    try:
        with Client(endpoint, transport) as watcher:
            watcher.request("echo", b"up", timeout=60)
            probe = Probe(endpoint, transport)
            probe.start()
            cpu0, mem0 = cpu_seconds(broker.pid), memory(broker.pid)
            attacker = subprocess.run(
                [sys.executable, "-c", ATTACKER, kind, endpoint], capture_output=True, text=True, timeout=300
            )
            started, sent = map(float, attacker.stdout.split())
            deadline = time.monotonic() + 300
            while not dropped(watcher, kind) and time.monotonic() < deadline:
                time.sleep(0.05)
            done = time.monotonic()
            time.sleep(1.0)
            probe.stop()
            cpu, mem = cpu_seconds(broker.pid) - cpu0, memory(broker.pid)
        trips = [rtt for start, rtt in probe.trips if started <= start <= done + 1.0]
        return {
            "send_s": sent - started,
            "dropped_after_send_s": done - sent,
            "round_trips": len(trips),
            "rtt_p50_ms": statistics.median(trips) * 1e3 if trips else float("nan"),
            "rtt_max_ms": max(trips) * 1e3 if trips else float("nan"),
            "broker_cpu_s": cpu,
            "rss_before_mib": mem0["VmRSS"],
            "rss_after_mib": mem["VmRSS"],
            "rss_peak_mib": mem["VmHWM"],
        }
    finally:
        for proc in (worker, broker):
            proc.kill()
            proc.wait(10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(CASES), help="cases, comma-separated")
    args = parser.parse_args(argv)
    columns = "case | send (s) | dropped after send (s) | others' round trips | p50 / max (ms) | broker CPU (s)"
    print(f"| {columns} | RSS before / after / peak (MiB) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for kind in args.only.split(","):
        r = run_case(kind)
        print(
            f"| {kind} | {r['send_s']:.2f} | {r['dropped_after_send_s']:.2f} | {r['round_trips']} "
            f"| {r['rtt_p50_ms']:.1f} / {r['rtt_max_ms']:.0f} | {r['broker_cpu_s']:.2f} "
            f"| {r['rss_before_mib']:.0f} / {r['rss_after_mib']:.0f} / {r['rss_peak_mib']:.0f} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

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

The cases of issue 20 attack what the broker *holds* (its ledger, ``generaldomo.sansio.ledger``), at the
default budgets or those of ``--budget BYTES`` (``--held-bytes``, and a quarter of it per connection):

- ``big-ids``: 200 requests with 4 MiB request ids for a service nobody serves (beyond the field limits,
  ``generaldomo.sansio.limits``, such a request is malformed: nothing is held);
- ``services``: 100,000 one-request services, from 100 connections of 1,000 each;
- ``mdp-hops``: 30 MDP/0.1 requests with an 8 MiB envelope hop each, then the sender leaves (malformed too, as
  a hop has at most 255 bytes);
- ``unread``: a DEALER that never reads re-asks a kept 2 MiB answer in 400 HEARTBEATs (64 times each);
- ``claim-workers``: one connection claims 99,999 workers through envelope hops;
- ``status``: 20,000 services and 20,000 claimed workers, then five ``mmi.status`` in a row (their sizes and
  times are the attacker's).

These report the broker's RSS (before, when the attack is done, the peak), what its ledger holds then, and
the honest client's round trips from the attack's start to a second after it is done.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable

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
HELD_ATTACKER = """\
import json, sys, time, zmq
from generaldomo.sansio import protocol
kind, endpoint = sys.argv[1], sys.argv[2]
MIB = 1024 * 1024
ctx = zmq.Context()


def dealer(**options):
    s = ctx.socket(zmq.DEALER)
    for name, value in options.items():
        s.setsockopt(getattr(zmq, name), value)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(endpoint)
    return s


s = dealer(RCVHWM=0)
time.sleep(0.2)
t = time.monotonic()
extra = {}
if kind == "big-ids":
    rid = b"i" * (4 * MIB)
    for n in range(200):
        s.send_multipart(protocol.gdp_request(rid[:-8] + b"%08d" % n, b"nobody", [b"x"]))
elif kind == "services":
    more = [dealer(RCVHWM=0) for _ in range(99)]
    for c, sock in enumerate([s, *more]):
        for n in range(1000):
            sock.send_multipart(protocol.gdp_request(b"r%d-%d" % (c, n), b"s-%d-%d" % (c, n), [b"x"]))
elif kind == "mdp-hops":
    hop = b"h" * (8 * MIB)
    for n in range(30):
        s.send_multipart([hop[:-4] + b"%04d" % n, b"", b"MDPC01", b"nobody", b"x"])
    time.sleep(1)
    s.close()  # the sender leaves; its requests stay queued
elif kind == "unread":
    s.send_multipart(protocol.gdp_request(b"big", b"echo", [b"a" * (2 * MIB)]))
    s.recv_multipart()
    sink = dealer(RCVHWM=1, RCVBUF=4096)
    ask = protocol.gdp_client_heartbeat(None, [b"big"] * protocol.MAX_REASKED)
    for _ in range(400):
        sink.send_multipart(ask)
elif kind == "claim-workers":
    for n in range(99_999):
        s.send_multipart([b"\\xffw-%06d" % n, *protocol.gdp_ready(b"fake-%d" % (n % 100))])
elif kind == "status":
    for n in range(20_000):
        s.send_multipart(protocol.gdp_request(b"r%d" % n, b"svc-%05d" % n, [b"x"]))
        s.send_multipart([b"\\xffw-%05d" % n, *protocol.gdp_ready(b"work-%d" % (n % 100))])
    poller = zmq.Poller()
    poller.register(s, zmq.POLLIN)
    status = dealer(RCVHWM=0)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # until the broker has them all
        status.send_multipart(protocol.gdp_request(b"count", b"mmi.status", []))
        counters = json.loads(protocol.parse_client_reply(status.recv_multipart())[3][0])["broker"]["counters"]
        if counters.get("workers_registered", 0) + counters.get("workers_refused", 0) >= 20_000:
            break
        time.sleep(0.2)
    times, sizes = [], []
    for n in range(5):
        start = time.monotonic()
        status.send_multipart(protocol.gdp_request(b"s%d" % n, b"mmi.status", []))
        sizes.append(len(protocol.parse_client_reply(status.recv_multipart())[3][0]))
        times.append(time.monotonic() - start)
    extra = {"status_bytes": max(sizes), "status_s": max(times)}
print(json.dumps({"start": t, "sent": time.monotonic(), **extra}), flush=True)
time.sleep(600)  # its connections stay (the one that does not read, too) until the bench is done measuring
"""
# case -> (transport, the counters the broker shows once it has taken the whole attack)
HELD: dict[str, tuple[str, Callable[[dict[str, int]], bool]]] = {
    "big-ids": ("router", lambda c: c.get("requests", 0) + c.get("malformed", 0) >= 201),
    "services": ("router", lambda c: c.get("requests", 0) >= 100_001),
    "mdp-hops": ("router", lambda c: c.get("requests", 0) + c.get("malformed", 0) >= 31),
    "unread": ("router", lambda c: c.get("reasked", 0) >= 400 * 64),
    "claim-workers": ("router", lambda c: c.get("workers_registered", 0) + c.get("workers_refused", 0) >= 100_000),
    "status": ("router", lambda c: True),
}


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


def start(transport: str, flags: list[str]) -> tuple[str, subprocess.Popen[bytes], subprocess.Popen[bytes]]:
    """A ``generaldomo broker`` process with ``flags`` and an echo worker process: the endpoint, and both."""
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    gd = [sys.executable, "-m", "generaldomo"]
    broker = subprocess.Popen(
        [*gd, "broker", "--transport", transport, "--bind", endpoint, *flags], stderr=subprocess.DEVNULL
    )
    worker = subprocess.Popen([*gd, "worker", "--transport", transport, "--connect", endpoint])
    return endpoint, broker, worker


def run_case(kind: str) -> dict[str, float]:
    transport = CASES[kind]
    endpoint, broker, worker = start(transport, [])
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


def run_held(kind: str, budget: int | None) -> dict[str, float]:
    """One of issue 20's attacks on what the broker holds, with ``budget`` bytes in its ledger (None: the
    default); figures as in the module docstring."""
    transport, done = HELD[kind]
    flags = [] if budget is None else ["--held-bytes", str(budget), "--connection-bytes", str(budget // 4)]
    if kind in ("claim-workers", "status"):
        flags += ["--liveness", "100"]  # the claimed workers never heartbeat: they stay while measured
    endpoint, broker, worker = start(transport, flags)
    attacker: subprocess.Popen[str] | None = None
    try:
        with Client(endpoint, transport) as watcher:
            watcher.request("echo", b"up", timeout=60)
            probe = Probe(endpoint, transport)
            probe.start()
            cpu0, mem0 = cpu_seconds(broker.pid), memory(broker.pid)
            attacker = subprocess.Popen(
                [sys.executable, "-c", HELD_ATTACKER, kind, endpoint], stdout=subprocess.PIPE, text=True
            )
            assert attacker.stdout is not None
            line = attacker.stdout.readline()
            sent = json.loads(line) if line else {"start": time.monotonic(), "sent": time.monotonic()}
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                report = json.loads(watcher.request("mmi.status", timeout=120).payload)
                if done(report["broker"]["counters"]):
                    break
                time.sleep(0.2)
            finished = time.monotonic()
            time.sleep(1.0)
            probe.stop()
            cpu, mem = cpu_seconds(broker.pid) - cpu0, memory(broker.pid)
            held = json.loads(watcher.request("mmi.status", timeout=120).payload)["broker"].get("ledger", {})
        trips = [rtt for start, rtt in probe.trips if sent["start"] <= start <= finished + 1.0]
        return {
            "attack_s": finished - sent["start"],
            "round_trips": len(trips),
            "rtt_p50_ms": statistics.median(trips) * 1e3 if trips else float("nan"),
            "rtt_max_ms": max(trips) * 1e3 if trips else float("nan"),
            "broker_cpu_s": cpu,
            "rss_before_mib": mem0["VmRSS"],
            "rss_after_mib": mem["VmRSS"],
            "rss_peak_mib": mem["VmHWM"],
            "held_mib": held.get("held_bytes", 0) / MIB,
            **{key: value for key, value in sent.items() if key not in ("start", "sent")},
        }
    finally:
        for proc in (attacker, worker, broker):
            if proc is not None:
                proc.kill()
                proc.wait(10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only", default=",".join(CASES), help=f"cases, comma-separated, of {', '.join([*CASES, *HELD])}"
    )
    parser.add_argument("--budget", type=int, help="the held cases' --held-bytes (a quarter per connection)")
    args = parser.parse_args(argv)
    held = [kind for kind in args.only.split(",") if kind in HELD]
    if held:
        budget = "default" if args.budget is None else f"{args.budget / MIB:.0f} MiB"
        print(
            "| case | ledger budget | attack done after (s) | others' round trips | p50 / max (ms) | broker CPU (s) "
            "| RSS before / after / peak (MiB) | ledger holds (MiB) | notes |"
        )
        print("|---|---|---:|---:|---:|---:|---:|---:|---|")
        for kind in held:
            r = run_held(kind, args.budget)
            notes = f"status reply {r['status_bytes']:,} B, {r['status_s'] * 1e3:.0f} ms" if "status_bytes" in r else ""
            print(
                f"| {kind} | {budget} | {r['attack_s']:.1f} | {r['round_trips']} | {r['rtt_p50_ms']:.1f} / "
                f"{r['rtt_max_ms']:.0f} | {r['broker_cpu_s']:.2f} | {r['rss_before_mib']:.0f} / "
                f"{r['rss_after_mib']:.0f} / {r['rss_peak_mib']:.0f} | {r['held_mib']:.1f} | {notes} |",
                flush=True,
            )
        if len(held) == len(args.only.split(",")):
            return 0
    columns = "case | send (s) | dropped after send (s) | others' round trips | p50 / max (ms) | broker CPU (s)"
    print(f"| {columns} | RSS before / after / peak (MiB) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for kind in [kind for kind in args.only.split(",") if kind in CASES]:
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

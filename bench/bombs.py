"""What one hostile message costs a broker that serves others (bounded work per message).

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

The held cases attack what the broker *holds* (its ledger, ``generaldomo.sansio.broker.accounts.ledger``), at the
default budgets or those of ``--budget BYTES`` (``--held-bytes``, and a quarter of it per connection):

- ``big-ids``: 200 requests with 4 MiB request ids for a service nobody serves (beyond the field limits,
  ``generaldomo.sansio.wire.limits``, such a request is malformed: nothing is held);
- ``services``: 100,000 one-request services, from 100 connections of 1,000 each;
- ``mdp-hops``: 30 MDP/0.1 requests with an 8 MiB envelope hop each, then the sender leaves (malformed too, as
  a hop has at most 255 bytes);
- ``unread``: a DEALER that never reads re-asks a kept 2 MiB answer in 400 HEARTBEATs (64 times each);
- ``claim-workers``: one connection claims 99,999 workers through envelope hops;
- ``status``: 20,000 services and 20,000 claimed workers, then five ``mmi.status`` in a row (their sizes and
  times are the attacker's).

These report the broker's RSS (before, when the attack is done, the peak), what its ledger holds then, and
the honest client's round trips from the attack's start to a second after it is done.

The over-time cases (hostile peers over time) send only valid messages, which add up over time or cost
much each; each reports the honest echo client's worst wait during the attack against its baseline (its worst
over the quiet seconds before), and the broker's RSS growth against what its ledger holds. The goal: under any
of them, the worst wait within 100 ms of the baseline.

- ``mdp-abandoned``: two connections send MDP/0.1 requests (31 MiB each, then a top-up) to services nobody
  serves, and leave; the honest client's requests come after (its failures are counted).
- ``state-bloat``: tenant limits of 4-byte characters set by ``mmi.flow`` on many names, back to back, for
  ``--seconds``, against a broker with ``--state-dir`` (the size its ``state.json`` reaches).
- ``status-pages`` (and ``status-pages-server``): one connection makes 999 services, then pipelines 40
  ``mmi.status {"limit": 1000}`` (how many were answered now, later, or 429).
- ``tenant-pages``: ten connections set 1,023 tenants' limits on each of 100 services for ``--seconds``, then
  five default status pages (their bytes and times).
- ``metrics-snapshot``: as ``tenant-pages`` with 200 services, against a broker with ``--metrics-port``; the
  wait measured over the ten quiet seconds after (the broker's own snapshot is the only work).
- ``untracked-memory``: at ``--held-bytes 16MiB``, request+CANCEL pairs with a one-off tenant name each, on
  200 services, for ``--seconds`` (RSS against the ledger).
- ``worker-429``: one worker of a service answers every task ``429`` with ``retry_after=300``, beside four
  honest ones (the bench's and three more), for ``--seconds``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

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
from generaldomo.sansio.wire import protocol
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
OVER_TIME_ATTACKER = """\
import json, sys, time, zmq
from generaldomo.sansio.wire import codec, protocol
kind, endpoint, transport, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
MIB = 1024 * 1024
ctx = zmq.Context()
server = transport == "server"


def sock():
    s = ctx.socket(zmq.CLIENT if server else zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.RCVHWM, 0)
    s.connect(endpoint)
    return s


def send(s, frames):
    s.send(codec.encode(frames)) if server else s.send_multipart(frames)


def recv(s, ms=120_000):
    if not s.poll(ms):
        return None
    return codec.decode(s.recv()) if server else s.recv_multipart()


def answer(s, ms=120_000):
    frames = recv(s, ms)
    return None if frames is None else protocol.parse_client_reply(frames)


def tenants(connections, services, until):
    # each connection sets the limits of 40 tenants at a time (mmi.flow takes 4 KiB of JSON), names of 4-byte
    # characters, one request in flight each, round the services, until the time is up or all are set
    socks = [sock() for _ in range(connections)]
    work = [(n, start) for n in range(services) for start in range(0, 1023, 40)]
    calls = refused = 0
    poller = zmq.Poller()
    for s in socks:
        poller.register(s, zmq.POLLIN)
    todo = iter(work)

    def next_call(s):
        item = next(todo, None)
        if item is None:
            return False
        n, start = item
        names = {"%04d" % k + "\U0001f600" * 14: {"weight": 2} for k in range(start, min(start + 40, 1023))}
        body = json.dumps({"tenants": names}, ensure_ascii=False, separators=(",", ":")).encode()
        send(s, protocol.gdp_request(b"f%d-%d" % (n, start), b"mmi.flow", [b"victim-%03d" % n, body]))
        return True

    busy = sum(next_call(s) for s in socks)
    while busy and time.monotonic() < until:
        for s, _ in poller.poll(1000):
            reply = answer(s, 0)
            calls += 1
            refused += reply is not None and reply[1] == b"429"
            busy -= 1
            if time.monotonic() < until and next_call(s):
                busy += 1
    return {"flow_calls": calls, "flow_429": refused, "flow_calls_left": len(list(todo))}


s = sock()
time.sleep(0.2)
t = time.monotonic()
extra = {}
if kind == "mdp-abandoned":
    part = bytes(31 * MIB)
    for c in range(2):
        a = sock()
        send(a, protocol.mdp_client_request(b"nobody-%d" % c, [part]))
        if c == 0:
            send(a, protocol.mdp_client_request(b"nobody-top", [bytes(2 * MIB)]))
        time.sleep(1)
        a.close()
elif kind == "state-bloat":
    n = 0
    until = t + seconds
    while time.monotonic() < until:
        first = 40 * (n // 1000) % 1000  # each name's tenants merge, call after call
        limits = {"%04d" % k + "\U0001f600" * 14: {"weight": 2} for k in range(first, first + 40)}
        body = json.dumps({"tenants": limits}, ensure_ascii=False, separators=(",", ":")).encode()
        send(s, protocol.gdp_request(b"b%d" % n, b"mmi.flow", [b"bloat-%03d" % (n % 1000), body]))
        answer(s)
        n += 1
    extra = {"flow_calls": n}
elif kind.startswith("status-pages"):
    for n in range(999):
        send(s, protocol.gdp_request(b"s%d" % n, b"svc-%04d" % n, [b"x"]))
    query = json.dumps({"limit": 1000}).encode()
    for n in range(40):
        send(s, protocol.gdp_request(b"p%d" % n, b"mmi.status", [query]))
    got = [answer(s) for _ in range(40)]
    statuses = [r[1] for r in got if r is not None]
    extra = {"pages_200": statuses.count(b"200"), "pages_429": statuses.count(b"429")}
elif kind in ("tenant-pages", "metrics-snapshot"):
    services = 100 if kind == "tenant-pages" else 200
    for n in range(services):
        send(s, protocol.gdp_request(b"s%d" % n, b"victim-%03d" % n, [b"x"]))
    extra = tenants(10, services, t + seconds)
    if kind == "tenant-pages":
        times, sizes = [], []
        for n in range(5):
            start = time.monotonic()
            send(s, protocol.gdp_request(b"page%d" % n, b"mmi.status", []))
            reply = answer(s)
            while reply is not None and not reply[0].startswith(b"page"):
                reply = answer(s)
            sizes.append(len(reply[3][0]) if reply else 0)
            times.append(time.monotonic() - start)
        extra |= {"status_bytes": max(sizes), "status_s": max(times)}
elif kind == "untracked-memory":
    n = 0
    until = t + seconds
    while time.monotonic() < until and n < 200 * 1030:
        rid = b"u%d" % n
        fields = protocol.request_fields(tenant="t-%d" % n)
        send(s, protocol.gdp_request(rid, b"svc-%03d" % (n % 200), [b"x"], fields))
        send(s, protocol.gdp_cancel(rid))
        n += 1
        if n % 1000 == 0:
            while recv(s, 0) is not None:
                pass
    extra = {"pairs": n}
elif kind == "worker-429":
    import threading
    from generaldomo import Reject, Worker

    def pausing(payload):
        raise Reject(429, "hold the whole service", retry_after=300)

    held = [Worker(endpoint, "echo", pausing, transport)] + [
        Worker(endpoint, "echo", lambda payload: payload, transport) for _ in range(3)
    ]
    for w in held:
        threading.Thread(target=w.serve, daemon=True).start()
    time.sleep(seconds)
print(json.dumps({"start": t, "sent": time.monotonic(), **extra}), flush=True)
time.sleep(600)  # its connections stay until the bench is done measuring
"""
# case -> (transport, the broker's extra flags, seconds of quiet measured after the attack's end)
OVER_TIME: dict[str, tuple[str, list[str], float]] = {
    "mdp-abandoned": ("router", [], 30.0),
    "state-bloat": ("router", ["--state-dir", "{tmp}"], 1.0),
    "status-pages": ("router", [], 1.0),
    "status-pages-server": ("server", [], 1.0),
    "tenant-pages": ("router", [], 1.0),
    "metrics-snapshot": ("router", ["--metrics-port", "{port}"], 10.0),
    "untracked-memory": ("router", ["--held-bytes", str(16 * MIB)], 1.0),
    "worker-429": ("router", [], 1.0),
}
GOAL_MS = 100.0  # the honest client's worst wait under attack, beyond its baseline
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
    """Round trips of another client, timestamped; its failed requests counted."""

    def __init__(self, endpoint: str, transport: str) -> None:
        super().__init__(daemon=True)
        self.client = Client(endpoint, transport, fail_unreachable=False)
        self.trips: list[tuple[float, float]] = []  # (start, seconds)
        self.failures = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set() and len(self.trips) < 1_000_000:
            start = time.monotonic()
            try:
                self.client.request("echo", b"x" * 16, timeout=120)
            except Exception:  # a 429 or a timeout: counted, and the wait is its trip
                self.failures += 1
                time.sleep(0.1)
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


@dataclasses.dataclass
class Scene:
    """A case under way: the broker process at ``endpoint``, the honest client (``watcher``, whose first echo was
    answered) and its :class:`Probe` (running), and the child processes killed at the end."""

    endpoint: str
    broker: subprocess.Popen[bytes]
    watcher: Client
    probe: Probe
    children: list[subprocess.Popen[Any]]

    def attack(self, script: str, *args: str) -> subprocess.Popen[str]:
        """Start the attacker (``python -c script args...``, its stdout a pipe), killed with the others."""
        attacker = subprocess.Popen([sys.executable, "-c", script, *args], stdout=subprocess.PIPE, text=True)
        self.children.insert(0, attacker)
        return attacker


@contextlib.contextmanager
def scene(transport: str, flags: list[str]) -> Iterator[Scene]:
    """Every case's opening and end: a broker process with ``flags`` and an echo worker process (:func:`start`),
    the honest client's first echo answered and its probe started; every child process killed afterwards."""
    endpoint, broker, worker = start(transport, flags)
    children: list[subprocess.Popen[Any]] = [worker, broker]
    try:
        with Client(endpoint, transport, fail_unreachable=False) as watcher:
            watcher.request("echo", b"up", timeout=60)
            probe = Probe(endpoint, transport)
            probe.start()
            yield Scene(endpoint, broker, watcher, probe, children)
    finally:
        for proc in children:
            proc.kill()
            proc.wait(10)


def trip_figures(trips: list[float]) -> dict[str, float]:
    """The honest client's round trips (seconds each): how many, the median and the longest, in ms."""
    return {
        "round_trips": len(trips),
        "rtt_p50_ms": statistics.median(trips) * 1e3 if trips else float("nan"),
        "rtt_max_ms": max(trips) * 1e3 if trips else float("nan"),
    }


def cost_figures(cpu: float, before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """The broker's CPU seconds during the attack, and its memory (:func:`memory`) before and after it."""
    rss = {"rss_before_mib": before["VmRSS"], "rss_after_mib": after["VmRSS"], "rss_peak_mib": after["VmHWM"]}
    return {"broker_cpu_s": cpu, **rss}


def run_case(kind: str) -> dict[str, float]:
    with scene(CASES[kind], []) as case:
        broker, probe = case.broker, case.probe
        cpu0, mem0 = cpu_seconds(broker.pid), memory(broker.pid)
        attacker = subprocess.run(
            [sys.executable, "-c", ATTACKER, kind, case.endpoint], capture_output=True, text=True, timeout=300
        )
        started, sent = map(float, attacker.stdout.split())
        deadline = time.monotonic() + 300
        while not dropped(case.watcher, kind) and time.monotonic() < deadline:
            time.sleep(0.05)
        done = time.monotonic()
        time.sleep(1.0)
        probe.stop()
        cpu, mem = cpu_seconds(broker.pid) - cpu0, memory(broker.pid)
    trips = [rtt for start, rtt in probe.trips if started <= start <= done + 1.0]
    return {
        "send_s": sent - started,
        "dropped_after_send_s": done - sent,
        **trip_figures(trips),
        **cost_figures(cpu, mem0, mem),
    }


def run_held(kind: str, budget: int | None) -> dict[str, float]:
    """One of the attacks on what the broker holds, with ``budget`` bytes in its ledger (None: the default);
    figures as in the module docstring."""
    transport, done = HELD[kind]
    flags = [] if budget is None else ["--held-bytes", str(budget), "--connection-bytes", str(budget // 4)]
    if kind in ("claim-workers", "status"):
        flags += ["--liveness", "100"]  # the claimed workers never heartbeat: they stay while measured
    with scene(transport, flags) as case:
        broker, watcher, probe = case.broker, case.watcher, case.probe
        cpu0, mem0 = cpu_seconds(broker.pid), memory(broker.pid)
        attacker = case.attack(HELD_ATTACKER, kind, case.endpoint)
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
        **trip_figures(trips),
        **cost_figures(cpu, mem0, mem),
        "held_mib": held.get("held_bytes", 0) / MIB,
        **{key: value for key, value in sent.items() if key not in ("start", "sent")},
    }


def run_over_time(kind: str, seconds: float) -> dict[str, float]:
    """One of the over-time attacks (the module docstring), for at most ``seconds`` where it is open-ended."""
    import tempfile

    transport, extra_flags, quiet = OVER_TIME[kind]
    with tempfile.TemporaryDirectory(prefix="bombs-") as state:
        flags = [flag.format(tmp=state, port=free_port()) for flag in extra_flags]
        with scene(transport, flags) as case:
            broker, probe = case.broker, case.probe
            time.sleep(3.0)  # the baseline: the probe's quiet seconds before the attack
            cpu0, mem0 = cpu_seconds(broker.pid), memory(broker.pid)
            attacker = case.attack(OVER_TIME_ATTACKER, kind, case.endpoint, transport, str(seconds))
            assert attacker.stdout is not None
            line = attacker.stdout.readline()
            sent = json.loads(line) if line else {"start": time.monotonic(), "sent": time.monotonic()}
            time.sleep(quiet)
            finished = time.monotonic()
            probe.stop()
            cpu, mem = cpu_seconds(broker.pid) - cpu0, memory(broker.pid)
            held = json.loads(case.watcher.request("mmi.status", timeout=120).payload)["broker"].get("ledger", {})
            state_bytes = sum(path.stat().st_size for path in Path(state).glob("*"))
    baseline = [rtt for start, rtt in probe.trips if start < sent["start"]]
    during = [rtt for start, rtt in probe.trips if sent["start"] <= start <= finished]
    if kind == "metrics-snapshot":  # the quiet seconds after the tenants were set: the snapshot's work only
        during = [rtt for start, rtt in probe.trips if sent["sent"] <= start <= finished]
    return {
        "attack_s": sent["sent"] - sent["start"],
        "baseline_ms": max(baseline) * 1e3 if baseline else float("nan"),
        **trip_figures(during),
        "failures": probe.failures,
        "broker_cpu_s": cpu,
        "rss_grown_mib": mem["VmRSS"] - mem0["VmRSS"],
        "held_mib": held.get("held_bytes", 0) / MIB,
        "state_mib": state_bytes / MIB,
        **{key: value for key, value in sent.items() if key not in ("start", "sent")},
    }


def over_time_table(kinds: list[str], seconds: float) -> None:
    """The table of the over-time cases: each attack's worst honest wait against its baseline, and RSS against
    the ledger; the verdict against :data:`GOAL_MS`."""
    print(
        "| case | attack (s) | honest baseline worst (ms) | worst under attack (ms) | p50 (ms) | within 100 ms "
        "| honest failures | broker CPU (s) | RSS grown (MiB) | ledger holds (MiB) | state (MiB) | notes |"
    )
    print("|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---|")
    for kind in kinds:
        r = run_over_time(kind, seconds)
        within = r["rtt_max_ms"] - r["baseline_ms"] <= GOAL_MS
        notes = ", ".join(
            f"{key} {value:.3g}" if isinstance(value, float) else f"{key} {value}"
            for key, value in r.items()
            if key
            not in (
                "attack_s", "baseline_ms", "round_trips", "rtt_p50_ms", "rtt_max_ms", "failures", "broker_cpu_s",
                "rss_grown_mib", "held_mib", "state_mib",
            )
        )  # fmt: skip
        print(
            f"| {kind} | {r['attack_s']:.1f} | {r['baseline_ms']:.0f} | {r['rtt_max_ms']:.0f} | {r['rtt_p50_ms']:.1f} "
            f"| {'yes' if within else 'no'} | {r['failures']} | {r['broker_cpu_s']:.2f} | {r['rss_grown_mib']:.0f} "
            f"| {r['held_mib']:.1f} | {r['state_mib']:.1f} | {notes} |",
            flush=True,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only",
        default=",".join(CASES),
        help=f"cases, comma-separated, of {', '.join([*CASES, *HELD, *OVER_TIME])} (over-time: all of the last)",
    )
    parser.add_argument("--budget", type=int, help="the held cases' --held-bytes (a quarter per connection)")
    parser.add_argument("--seconds", type=float, default=60.0, help="the longest an open-ended attack goes on")
    args = parser.parse_args(argv)
    wanted = args.only.split(",")
    if "over-time" in wanted:
        wanted = [kind for kind in wanted if kind != "over-time"] + list(OVER_TIME)
    over_time = [kind for kind in wanted if kind in OVER_TIME]
    if over_time:
        over_time_table(over_time, args.seconds)
        if len(over_time) == len(wanted):
            return 0
    args.only = ",".join(kind for kind in wanted if kind not in OVER_TIME)
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

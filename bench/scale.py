"""Part ``scale``: many clients and workers pipelined on one broker, against 1 x 1.

Per transport (ROUTER; SERVER too when pyzmq has draft sockets) two set-ups run side by side over loopback
tcp, each a ``generaldomo broker`` process with its own ``generaldomo worker`` echo processes: the *small* one
(1 worker, 1 client with ``window`` requests outstanding) and the *big* one (8 workers, 64 clients with a
window each). The clients are ``generaldomo.Client`` objects spread over a few client processes
(``python -m bench.scale client ...``, so that their CPU is not all one process's GIL); each process makes its
clients, does one round trip on each, says ``ready``, waits for ``go`` on stdin, keeps every client's window
full until its request cap or time cap, and prints one JSON line: every request's latency (the Reply's
``received - sent``) and its first and last times. The broker's CPU time (``/proc/<pid>/task/*/schedstat``,
libzmq's I/O threads included; its Python threads also alone) is read from ``go`` to the last
result line. Rounds alternate the two set-ups. Reported per set-up: req/s, broker CPU per request (and its
Python thread's) and its ratio to the small set-up's, latency p50/p99/max, the workers' CPU per request and the
broker's RSS. Every loop is bounded in count and time; the children are killed with the bench
(:mod:`bench.procs`).
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import time
from concurrent.futures import Future
from dataclasses import asdict, dataclass
from typing import IO, Any

from bench.config import Config, say
from bench.load import median
from bench.procs import Children, cpu_meter, cpu_seconds, read_line
from generaldomo.sansio.broker.services.stats import nearest_rank

SERVICE = "echo"
PAYLOAD = 16  # bytes per request
TIMEOUT = 30.0  # seconds to wait for any one reply, banner or result line


@dataclass(frozen=True)
class Shape:
    """One set-up: ``clients`` Clients (``window`` outstanding each) in ``procs`` processes, ``workers`` workers."""

    clients: int
    workers: int
    procs: int
    window: int

    @property
    def label(self) -> str:
        return f"{self.clients}x{self.workers}"


@dataclass(frozen=True)
class Sizes:
    """How much the part measures at one run size: the two shapes, the time cap of one measurement and the
    request cap of one client of each shape."""

    small: Shape
    big: Shape
    seconds: float
    small_cap: int
    big_cap: int


SIZES = {
    "full": Sizes(Shape(1, 1, 1, 100), Shape(64, 8, 4, 4), 3.0, 30_000, 1_000),
    "quick": Sizes(Shape(1, 1, 1, 100), Shape(64, 8, 4, 4), 1.5, 15_000, 500),
    "smoke": Sizes(Shape(1, 1, 1, 10), Shape(8, 2, 2, 4), 0.3, 300, 40),
}


# ------------------------------------------------------------------------------------------ parent side


class Setup:
    """A broker process and its echo worker processes, all registered."""

    def __init__(self, children: Children, transport: str, shape: Shape) -> None:
        self.children, self.transport, self.shape = children, transport, shape
        proc, banner = children.spawn("gd", "broker", "--transport", transport, "--bind", "tcp://127.0.0.1:*")
        self.procs = [proc]
        self.broker = proc.pid
        self.endpoint = banner.split()[-1]
        worker = ("gd", "worker", "--transport", transport, "--connect", self.endpoint, "--service", SERVICE)
        self.procs += [children.spawn(*worker)[0] for _ in range(shape.workers)]
        self.workers = [p.pid for p in self.procs[1:]]
        self._registered(time.monotonic() + 60)

    def close(self) -> None:
        """Stop the workers, then the broker."""
        for proc in reversed(self.procs):
            self.children.stop(proc)

    def _registered(self, deadline: float) -> None:
        """Wait (until ``deadline``, at most 600 looks) until the broker reports every worker of the service."""
        from generaldomo import Client

        with Client(self.endpoint, self.transport) as client:
            for _ in range(600):
                services = client.status(TIMEOUT)["services"]
                if sum(s["workers"] for s in services if s["name"] == SERVICE) >= self.shape.workers:
                    return
                if time.monotonic() > deadline:
                    break
                time.sleep(0.1)
        raise TimeoutError(f"{self.shape.workers} workers did not all register")

    def rss(self) -> dict[str, float]:
        """The broker's resident set now and at its peak, in MiB (``/proc/<pid>/status``)."""
        found = {"rss_mib": float("nan"), "peak_rss_mib": float("nan")}
        with open(f"/proc/{self.broker}/status") as f:
            for line in f:
                name, _, value = line.partition(":")
                if name in ("VmRSS", "VmHWM"):
                    found["rss_mib" if name == "VmRSS" else "peak_rss_mib"] = int(value.split()[0]) / 1024
        return found


def spread(clients: int, procs: int) -> list[int]:
    """``clients`` spread as evenly as can be over ``procs`` processes."""
    return [clients // procs + (1 if i < clients % procs else 0) for i in range(procs)]


def measure(setup: Setup, sizes: Sizes, cap: int) -> dict[str, Any]:
    """One measurement of ``setup``: client processes started, made ready, let go together, their results merged."""
    shape = setup.shape
    procs = [
        start_clients(setup, count, shape.window, cap, sizes.seconds) for count in spread(shape.clients, shape.procs)
    ]
    try:
        for proc in procs:
            if read_line(proc, 60.0) != "ready":
                raise RuntimeError("a client process did not get ready")
        workers0 = sum(cpu_seconds(pid) for pid in setup.workers)
        main0 = python_cpu(setup.broker)
        with cpu_meter(setup.broker) as cpu:
            for proc in procs:
                assert proc.stdin is not None
                proc.stdin.write("go\n")
                proc.stdin.flush()
            results = [json.loads(read_line(proc, sizes.seconds + TIMEOUT + 10)) for proc in procs]
        main = python_cpu(setup.broker) - main0
        workers = sum(cpu_seconds(pid) for pid in setup.workers) - workers0
    finally:
        for proc in procs:
            if proc.stdin is not None:
                proc.stdin.close()
            setup.children.stop(proc, timeout=10.0)
    latencies = sorted(us for r in results for us in r["lat_us"])
    n = len(latencies)
    span = max(r["end"] for r in results) - min(r["start"] for r in results)
    return {
        "n": n,
        "rps": n / span,
        "cpu_us_per_req": cpu["cpu"] / n * 1e6,
        "main_cpu_us_per_req": main / n * 1e6,
        "busy": cpu["cpu"] / cpu["wall"],
        "worker_cpu_us_per_req": workers / n * 1e6,
        "p50_us": nearest_rank(latencies, 50),
        "p99_us": nearest_rank(latencies, 99),
        "max_us": float(latencies[-1]),
        **setup.rss(),
    }


def python_cpu(pid: int) -> float:
    """CPU seconds of the Python threads of ``pid``: every thread but libzmq's (named ``ZMQbg/...``)."""
    total = 0.0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/comm") as f:
                if not f.read().startswith("ZMQbg"):
                    total += cpu_seconds(pid, int(task))
        except OSError:  # the thread ended meanwhile
            continue
    return total


def start_clients(setup: Setup, count: int, window: int, cap: int, seconds: float) -> subprocess.Popen[str]:
    """A client process of ``count`` Clients (killed with the bench: it is one of ``setup.children``)."""
    argv = [setup.transport, setup.endpoint, str(count), str(window), str(cap), str(seconds)]
    return setup.children.start("bench.scale", "client", *argv)


METRICS = (
    "rps",
    "cpu_us_per_req",
    "main_cpu_us_per_req",
    "busy",
    "worker_cpu_us_per_req",
    "p50_us",
    "p99_us",
    "max_us",
    "rss_mib",
)


def run_transport(
    children: Children, transport: str, sizes: Sizes, rounds: int
) -> tuple[list[dict[str, Any]], list[str]]:
    """Both set-ups of ``transport``, measured in alternating order ``rounds`` times; rows and errors."""
    runs: dict[str, list[dict[str, Any]]] = {"small": [], "big": []}
    errors: list[str] = []
    say(f"scale: starting the {transport} brokers and workers ({sizes.small.label} and {sizes.big.label})")
    setups: dict[str, Setup] = {}
    try:
        setups["small"] = Setup(children, transport, sizes.small)
        setups["big"] = Setup(children, transport, sizes.big)
        measure_rounds(setups, sizes, rounds, runs, errors)
    finally:  # this transport's children go before the next transport starts its own
        for setup in setups.values():
            setup.close()
    rows = [row(transport, setups[name].shape, name, runs[name]) for name in ("small", "big")]
    small, big = rows[0]["cpu_us_per_req"], rows[1]["cpu_us_per_req"]
    rows[1]["cpu_ratio"] = big / small if small == small and small else float("nan")
    rows[1]["round_ratios"] = [
        b["cpu_us_per_req"] / s["cpu_us_per_req"] for s, b in zip(runs["small"], runs["big"], strict=False)
    ]
    return rows, errors


def measure_rounds(
    setups: dict[str, Setup], sizes: Sizes, rounds: int, runs: dict[str, list[dict[str, Any]]], errors: list[str]
) -> None:
    """Measure both set-ups ``rounds`` times, alternating which goes first; results into ``runs``."""
    caps = {"small": sizes.small_cap, "big": sizes.big_cap}
    for round_ in range(rounds):
        for name in ("small", "big") if round_ % 2 == 0 else ("big", "small"):
            setup = setups[name]
            what = f"{setup.transport} {setup.shape.label} round {round_ + 1}/{rounds}"
            try:
                result = measure(setup, sizes, caps[name])
            except Exception as error:  # one failed measurement must not stop the run
                errors.append(f"{what}: {type(error).__name__}: {error}")
                say(f"scale: {what}: FAILED ({error})")
                continue
            runs[name].append(result)
            say(
                f"scale: {what}: {result['rps']:,.0f} req/s, broker {result['cpu_us_per_req']:.0f} us CPU/req, "
                f"p50 {result['p50_us']:.0f} p99 {result['p99_us']:.0f} us"
            )


def row(transport: str, shape: Shape, name: str, results: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians of one set-up's measurements."""
    out: dict[str, Any] = {"transport": transport, "setup": name, "shape": shape.label, **asdict(shape)}
    out.update({metric: median([r[metric] for r in results]) for metric in METRICS})
    out["peak_rss_mib"] = max((r["peak_rss_mib"] for r in results), default=float("nan"))
    out["rounds"], out["runs"] = len(results), results
    return out


def run(cfg: Config, children: Children) -> dict[str, Any]:
    """The ``scale`` part of ``python -m bench``, sized by the run's name (full, quick or smoke)."""
    from generaldomo.io.transport import draft_available

    sizes = SIZES.get(cfg.name, SIZES["full"])
    transports = ["router", "server"] if draft_available() else ["router"]
    notes = [] if draft_available() else ["server transport skipped: pyzmq lacks draft sockets"]
    rows: list[dict[str, Any]] = []
    errors: list[str] = []
    for transport in transports:
        try:
            found, failed = run_transport(children, transport, sizes, cfg.rounds)
        except Exception as error:  # a set-up that cannot start: say so, go on with the next transport
            errors.append(f"{transport}: {type(error).__name__}: {error}")
            continue
        rows += found
        errors += failed
    return {"rows": rows, "errors": errors, "notes": notes, "seconds": sizes.seconds, "payload": PAYLOAD}


def headline(part: dict[str, Any]) -> list[str]:
    """The report's headline lines: each transport's big/small broker CPU per request and the big set-up's p99."""
    return [
        f"- scale, {r['clients']} clients x {r['workers']} workers / 1 x 1 on {r['transport'].upper()}: broker CPU "
        f"per request {r['cpu_ratio']:.2f}x (goal 1.2x or less), {r['rps']:,.0f} req/s, p99 {r['p99_us'] / 1e3:.0f} ms."
        for r in part["rows"]
        if "cpu_ratio" in r
    ]


def markdown(part: dict[str, Any]) -> str:
    """The part's table: each set-up's figures, the big one's broker CPU per request against the small one's."""
    lines = [
        "### 10. Scale: many clients and workers on one broker (`python -m bench --only scale`)",
        "",
        f"Loopback tcp, {part['payload']} B echo, pipelined; medians of interleaved rounds. Ratio: broker CPU per "
        "request against the 1-client, 1-worker set-up on the same transport (goal: 1.2x or less).",
        "",
        "| transport | clients x workers | window per client | req/s | broker CPU µs/req (Python thread) | ratio | "
        "latency p50 / p99 / max µs | worker CPU µs/req | broker busy | broker RSS MiB (peak) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in part["rows"]:
        ratio = f"{r['cpu_ratio']:.2f}x" if "cpu_ratio" in r else "1 x 1"
        lines.append(
            f"| {r['transport'].upper()} | {r['clients']} x {r['workers']} | {r['window']} | {r['rps']:,.0f} | "
            f"{r['cpu_us_per_req']:.0f} ({r['main_cpu_us_per_req']:.0f}) | {ratio} | "
            f"{r['p50_us']:,.0f} / {r['p99_us']:,.0f} / {r['max_us']:,.0f} | "
            f"{r['worker_cpu_us_per_req']:.0f} | {r['busy'] * 100:.0f} % | "
            f"{r['rss_mib']:.1f} ({r['peak_rss_mib']:.1f}) |"
        )
    lines += [f"- note: {n}" for n in part.get("notes", [])] + [f"- ERROR: {e}" for e in part.get("errors", [])]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ client process


def drive(clients: list[Any], window: int, cap: int, seconds: float) -> dict[str, Any]:
    """Keep ``window`` requests outstanding on every client until each has sent ``cap`` or ``seconds`` passed."""
    payload = b"x" * PAYLOAD
    done: queue.SimpleQueue[tuple[int, Future[Any]]] = queue.SimpleQueue()
    sent = [0] * len(clients)

    def submit(i: int) -> None:
        sent[i] += 1
        clients[i].submit(SERVICE, payload).add_done_callback(lambda future: done.put((i, future)))

    start = time.monotonic()
    deadline = start + seconds
    for i in range(len(clients)):
        for _ in range(min(window, cap)):
            submit(i)
    outstanding = sum(sent)
    latencies: list[int] = []
    while outstanding:
        i, future = done.get(timeout=TIMEOUT)
        outstanding -= 1
        reply = future.result()
        latencies.append(round((reply.received - reply.sent) * 1e6))
        if sent[i] < cap and time.monotonic() < deadline:
            submit(i)
            outstanding += 1
    return {"start": start, "end": time.monotonic(), "lat_us": latencies}


def client_main(argv: list[str], stdin: IO[str]) -> None:
    """``client TRANSPORT ENDPOINT COUNT WINDOW CAP SECONDS``: the load of one client process."""
    from bench.peer import _die_with_parent
    from generaldomo import Client

    _die_with_parent()
    transport, endpoint = argv[0], argv[1]
    count, window, cap, seconds = int(argv[2]), int(argv[3]), int(argv[4]), float(argv[5])
    clients = [Client(endpoint, transport) for _ in range(count)]
    try:
        for client in clients:  # a warm-up round trip each: connected before the clock starts
            client.request(SERVICE, b"warm", TIMEOUT)
        print("ready", flush=True)
        if stdin.readline().strip() == "go":
            print(json.dumps(drive(clients, window, cap, seconds)), flush=True)
    finally:
        for client in clients:
            client.close()


if __name__ == "__main__":
    if sys.argv[1:2] == ["client"]:
        client_main(sys.argv[2:], sys.stdin)

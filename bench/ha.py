"""``python -m bench.ha [--failovers N] [--requests N] [--window N] [--quick]``: what the broker pair costs.

Two figures, with real broker processes (``generaldomo broker``, ipc endpoints in a temporary directory):

- *A failover*: a primary and a backup (``--ha-heartbeat`` 0.25 s), a worker and a client given both endpoints
  (heartbeat 0.25 s, liveness 4); once the backup is passive and replicating, the primary is killed (SIGKILL) and
  the client asks at once: the time from the kill to that answer (the backup's expiry, the peers' move, the
  takeover and its restore). Reported: p50 and max over ``--failovers`` failovers.
- *Replication in throughput*: one client sending ``--requests`` requests of 64 bytes, ``--window`` outstanding,
  to one worker answering at once; a broker alone against the active of a pair (which journals every request
  and ships the records to the passive). Reported: requests per second, the best of ``--rounds``, and the ratio.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from bench.config import Config, say
from bench.durable_queues import pipelined
from generaldomo import Client, Worker

HA_HEARTBEAT = 0.25
HEARTBEAT = 0.25
LIVENESS = 4
WAIT = 60.0  # seconds any one step may take, at most


class Pair:
    """``generaldomo broker`` processes: a pair (``pair=True``) or one alone, in ``directory``."""

    def __init__(self, directory: Path, pair: bool) -> None:
        tag = uuid.uuid4().hex[:8]
        names = ("primary", "backup") if pair else ("alone",)
        self.endpoints = [f"ipc://{directory}/{tag}-{name}.sock" for name in names]
        links = [f"ipc://{directory}/{tag}-{name}-pair.sock" for name in names]
        self.processes: list[subprocess.Popen[bytes]] = []
        for n, name in enumerate(names):
            args = ["--bind", self.endpoints[n], "--heartbeat", str(HEARTBEAT), "--liveness", str(LIVENESS)]
            if pair:
                args += ["--ha-role", name, "--ha-bind", links[n], "--ha-peer", links[1 - n], "--ha-plaintext"]
                args += ["--ha-heartbeat", str(HA_HEARTBEAT)]
            command = [sys.executable, "-m", "generaldomo", "broker", *args]
            self.processes.append(subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def status(self, n: int) -> dict[str, Any]:
        with Client(self.endpoints[n], heartbeat_interval=HEARTBEAT, liveness=LIVENESS) as client:
            report = client.status(timeout=WAIT)["broker"]
        assert isinstance(report, dict)
        return report

    def wait(self, test: Any, what: str) -> None:
        deadline = time.monotonic() + WAIT
        while True:
            try:
                if test():
                    return
            except Exception:  # not serving yet: a status request timed out
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"bench.ha: gave up waiting for {what}")
            time.sleep(0.05)

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(WAIT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(WAIT)


def serving(endpoints: list[str]) -> tuple[Worker, threading.Thread]:
    worker = Worker(endpoints, "echo", lambda payload: payload, heartbeat_interval=HEARTBEAT, liveness=LIVENESS)
    thread = threading.Thread(target=worker.serve, daemon=True)
    thread.start()
    return worker, thread


def failover(directory: Path) -> float:
    """Seconds from the kill of the active broker to the first answer through the one that took over."""
    pair = Pair(directory, pair=True)
    worker, thread = None, None
    try:
        pair.wait(lambda: pair.status(0)["pair"]["state"] == "active", "the primary active")
        pair.wait(lambda: pair.status(1)["pair"]["state"] == "passive", "the backup passive")
        worker, thread = serving(pair.endpoints)
        with Client(pair.endpoints, heartbeat_interval=HEARTBEAT, liveness=LIVENESS, fail_unknown=False) as client:
            client.request("echo", b"warm", timeout=WAIT)
            pair.wait(lambda: pair.status(0)["pair"]["lag_records"] == 0, "the backup replicating")
            started = time.perf_counter()
            pair.processes[0].send_signal(signal.SIGKILL)
            client.request("echo", b"after", timeout=WAIT)
            return time.perf_counter() - started
    finally:
        if worker is not None and thread is not None:
            worker.stop()
            thread.join(10)
        pair.close()


def throughput(directory: Path, pair: bool, requests: int, window: int) -> float:
    """Requests per second through a broker alone or the active of a pair."""
    brokers = Pair(directory, pair)
    worker, thread = None, None
    try:
        brokers.wait(lambda: brokers.status(0)["pair"] is None or brokers.status(0)["pair"]["state"] == "active",
                     "the broker serving")  # fmt: skip
        if pair:
            brokers.wait(lambda: brokers.status(1)["pair"]["state"] == "passive", "the backup passive")
        worker, thread = serving(brokers.endpoints[:1])
        with Client(brokers.endpoints[0], heartbeat_interval=HEARTBEAT, liveness=LIVENESS) as client:
            took = pipelined(client, requests, window, WAIT)
        if pair:
            brokers.wait(lambda: brokers.status(0)["pair"]["lag_records"] == 0, "the backup to catch up")
        return requests / took
    finally:
        if worker is not None and thread is not None:
            worker.stop()
            thread.join(10)
        brokers.close()


def measure(failovers: int, requests: int, window: int, rounds: int) -> dict[str, Any]:
    """Both figures (the module docstring)."""
    with tempfile.TemporaryDirectory(prefix="gdha-") as temporary:
        directory = Path(temporary)
        times = []
        for n in range(failovers):
            times.append(failover(directory))
            say(f"ha: failover {n + 1} of {failovers}: {times[-1]:.2f} s")
        rates: dict[str, float] = {}
        for n in range(rounds):
            for name, pair in (("alone", False), ("pair", True)):
                rates[name] = max(rates.get(name, 0.0), throughput(directory, pair, requests, window))
            say(f"ha: throughput round {n + 1} of {rounds}")
    return {
        "failovers": failovers,
        "failover_p50_s": statistics.median(times),
        "failover_max_s": max(times),
        "requests": requests,
        "window": window,
        "alone_rps": rates["alone"],
        "pair_rps": rates["pair"],
        "ratio": rates["pair"] / rates["alone"],
        "errors": [],
    }


def run(cfg: Config) -> dict[str, Any]:
    """The ``ha`` part of ``python -m bench``, sized by ``cfg``."""
    quick = cfg.name != "full"
    return measure(2 if cfg.name == "smoke" else 3 if quick else 10, 200 if cfg.name == "smoke" else 2000 if quick
                   else 10000, 32, cfg.rounds)  # fmt: skip


def markdown(part: dict[str, Any]) -> str:
    """The part's table."""
    return "\n".join([
        "### What the broker pair costs (`python -m bench --only ha`, or `python -m bench.ha`)",
        "",
        f"Failover (kill -9 of the active, to the first answer; pair heartbeat {HA_HEARTBEAT} s, peers' "
        f"heartbeat {HEARTBEAT} s x liveness {LIVENESS}): p50 {part['failover_p50_s']:.2f} s, max "
        f"{part['failover_max_s']:.2f} s over {part['failovers']} failovers.",
        "",
        "| broker | requests/s | ratio |",
        "|---|---:|---:|",
        f"| alone | {part['alone_rps']:,.0f} | 1.00 |",
        f"| active of a pair | {part['pair_rps']:,.0f} | {part['ratio']:.2f} |",
    ])  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--failovers", type=int, default=10)
    parser.add_argument("--requests", type=int, default=10000)
    parser.add_argument("--window", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="3 failovers, 2000 requests, one round")
    args = parser.parse_args(argv)
    if args.quick:
        args.failovers, args.requests, args.rounds = 3, 2000, 1
    print(markdown(measure(args.failovers, args.requests, args.window, args.rounds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

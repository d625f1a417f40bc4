"""The dashboard's cost on the broker: ``python -m bench.dashboard [--seconds S] [--rounds N] [--services N]``.

A broker process serves an echo worker under a steady open-loop load (``RATE`` requests per second, sent at
fixed times); the broker's CPU is measured over windows of ``--seconds`` with no dashboard, with one
``generaldomo dashboard`` (its own process, polling once a second, one page watching its event stream), and with
one polling ten times a second, in alternating rounds on the same broker. A second measurement gives the cost
of one ``mmi.status`` call on its own, with the broker holding 1 and ``--services`` services (the others each
with a request queued and no worker), and how many
status calls per second one client gets from an otherwise idle broker. Prints Markdown (and JSON with
``--json``).
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import subprocess
import sys
import threading
import time
from typing import Any
from urllib.parse import urlsplit

from bench.procs import Children, cpu_seconds
from generaldomo import Client, Worker

RATE = 200.0  # requests per second of the steady load
CALLS = 500  # mmi.status calls per measurement of one call's cost


def steady_load(endpoint: str, seconds: float) -> int:
    """Send ``RATE`` echo requests a second for ``seconds`` (open loop: at fixed times); the replies received."""
    with Client(endpoint) as client:
        start = time.monotonic()
        futures = []
        for n in range(int(RATE * seconds)):
            time.sleep(max(0.0, start + n / RATE - time.monotonic()))
            futures.append(client.submit("echo", b"x" * 64))
        return sum(1 for future in futures if future.result(60).payload)


def watch(url: str, stop: threading.Event) -> None:
    """A page watching the dashboard's event stream until ``stop``."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    connection.request("GET", "/events")
    answer = connection.getresponse()
    while not stop.is_set() and answer.readline():
        pass
    connection.close()


def dashboard(children: Children, endpoint: str, interval: float) -> tuple[subprocess.Popen[str], str]:
    """A ``generaldomo dashboard`` process polling every ``interval`` seconds; it and its address."""
    proc, line = children.spawn(
        "gd", "dashboard", "--connect", endpoint, "--http", "127.0.0.1:0", "--interval", str(interval)
    )
    return proc, line.split()[2]


def broker_cpu(children: Children, broker: int, endpoint: str, seconds: float, interval: float | None) -> float:
    """The broker's CPU seconds per second under the steady load, with a dashboard polling every ``interval``
    seconds and one page watching it (None: no dashboard)."""
    stop, watcher, proc = threading.Event(), None, None
    if interval is not None:
        proc, url = dashboard(children, endpoint, interval)
        watcher = threading.Thread(target=watch, args=(url, stop), daemon=True)
        watcher.start()
        time.sleep(2.0)  # its first polls (and its admin question) before the window
    try:
        before, began = cpu_seconds(broker), time.monotonic()
        steady_load(endpoint, seconds)
        return (cpu_seconds(broker) - before) / (time.monotonic() - began)
    finally:
        stop.set()
        if proc is not None:
            children.stop(proc)


def status_cost(broker: int, endpoint: str) -> dict[str, float]:
    """Broker CPU per ``mmi.status`` call, and calls per second, for one client asking back to back."""
    with Client(endpoint) as client:
        client.status()
        before, began = cpu_seconds(broker), time.monotonic()
        for _ in range(CALLS):
            client.status()
        wall = time.monotonic() - began
        report = client.status()
    return {
        "services": len(report["services"]),
        "report_bytes": len(json.dumps(report)),
        "cpu_per_call_ms": (cpu_seconds(broker) - before) / CALLS * 1000,
        "calls_per_second": CALLS / wall,
    }


def run(seconds: float = 20.0, rounds: int = 3, services: int = 500) -> dict[str, Any]:
    """Measure (see the module docstring); the results as JSON-ready data."""
    with Children() as children:
        proc, line = children.spawn("gd", "broker", "--bind", "tcp://127.0.0.1:*")
        endpoint = line.split()[-1]
        worker = Worker(endpoint, "echo", lambda payload: payload)
        threading.Thread(target=worker.serve, daemon=True).start()
        try:
            with Client(endpoint) as client:
                client.request("echo", b"warm up", timeout=30)
            cases: dict[str, list[float]] = {"none": [], "1/s": [], "10/s": []}
            for _ in range(rounds):
                for case, interval in (("none", None), ("1/s", 1.0), ("10/s", 0.1)):
                    cases[case].append(broker_cpu(children, proc.pid, endpoint, seconds, interval))
            cost = [status_cost(proc.pid, endpoint)]
            # a request queued for each of the other services (nobody serves them: it waits) keeps it listed
            with Client(endpoint, fail_unknown=False) as waiting:
                for n in range(services - 1):
                    waiting.submit(f"service-{n}", b"")
                while waiting.status()["broker"].get("service_count", 0) < services:
                    time.sleep(0.2)
                cost.append(status_cost(proc.pid, endpoint))
        finally:
            worker.stop()
    return {
        "rate": RATE,
        "seconds": seconds,
        "rounds": rounds,
        "broker_cpu": {case: statistics.median(values) for case, values in cases.items()},
        "broker_cpu_rounds": cases,
        "status_cost": cost,
    }


def markdown(result: dict[str, Any]) -> str:
    cpu = result["broker_cpu"]
    lines = [
        f"Broker CPU (share of one core, median of {result['rounds']} alternating rounds of {result['seconds']:g} s) "
        f"under {result['rate']:g} echo requests/s:",
        "",
        "| dashboard | broker CPU | against none |",
        "| --- | ---: | ---: |",
    ]
    for case, label in (("none", "none"), ("1/s", "polling 1/s, one page"), ("10/s", "polling 10/s, one page")):
        lines.append(f"| {label} | {cpu[case] * 100:.1f} % | {cpu[case] / cpu['none']:.3f} |")
    lines += ["", "| services in the report | report bytes | broker CPU per mmi.status | calls/s, one client |"]
    lines.append("| ---: | ---: | ---: | ---: |")
    for row in result["status_cost"]:
        lines.append(
            f"| {row['services']} | {row['report_bytes']:,} | {row['cpu_per_call_ms']:.3f} ms | "
            f"{row['calls_per_second']:.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.dashboard", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds of load per window")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    parser.add_argument("--services", type=int, default=500, help="services for the second status cost")
    parser.add_argument("--json", action="store_true", help="print the JSON results too")
    args = parser.parse_args(argv)
    result = run(args.seconds, args.rounds, args.services)
    print(markdown(result))
    if args.json:
        print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Interleaved, repeated measurements over stacks; medians per measurement."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from bench.config import Config, say
from bench.load import median, pipelined_run, sync_run
from bench.procs import cpu_meter, cpu_seconds
from bench.stacks import Stack

METRICS = ("p50_us", "p99_us", "rps", "cpu_us_per_req", "busy", "worker_cpu_us_per_req", "client_cpu_us_per_req")


@dataclass
class Measurement:
    """One cell: a stack, a worker count, a payload size and a mode (``sync`` or ``pipelined``)."""

    stack: Stack
    key: dict[str, Any]  # system, transport, scheme, payload, workers, mode

    def describe(self) -> str:
        k = self.key
        return f"{k['system']} {k['transport']} {k['scheme']} {k['payload']}B w{k['workers']} {k['mode']}"


def run_interleaved(items: list[Measurement], cfg: Config, part: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Run every measurement ``cfg.rounds`` times, rotating the order each round; return rows and errors.

    Consecutive measurements differ only in the stack, so the figures being compared are taken close together.
    """
    runs: list[list[dict[str, float]]] = [[] for _ in items]
    errors: list[str] = []
    broken: set[str] = set()
    total = len(items) * cfg.rounds
    done = 0
    for r in range(cfg.rounds):
        shift = r * len(items) // max(1, cfg.rounds)
        order = list(range(len(items)))[shift:] + list(range(len(items)))[:shift]
        for index in order:
            item = items[index]
            done += 1
            if item.stack.label in broken:
                continue
            try:
                result = measure(item, cfg)
            except Exception as error:  # one broken stack must not stop the run
                broken.add(item.stack.label)
                errors.append(f"{item.describe()}: {type(error).__name__}: {error}")
                say(f"{part} {done}/{total} {item.describe()}: FAILED ({error}); skipping {item.stack.label}")
                continue
            runs[index].append(result)
            say(f"{part} {done}/{total} {item.describe()}: {summary(result)}")
    rows = []
    for item, results in zip(items, runs, strict=True):
        row: dict[str, Any] = dict(item.key)
        for metric in METRICS:
            row[metric] = median([r.get(metric, float("nan")) for r in results])
        row["rounds"] = len(results)
        row["runs"] = results
        rows.append(row)
    return rows, errors


def measure(item: Measurement, cfg: Config) -> dict[str, float]:
    """One measurement, with the CPU time the broker (or echo peer) spent during it.

    When the broker runs in a process of its own, also the CPU time of the worker processes and of this (the
    client's) process.
    """
    stack = item.stack
    driver = stack.drivers[item.key["workers"]]
    payload = b"x" * item.key["payload"]
    me = os.getpid()
    remote = stack.cpu[0] != me  # broker (or echo peer) in a process of its own: the client's CPU is ours
    others0 = [cpu_seconds(pid) for pid in (*stack.workers, me)] if remote else []
    try:
        with cpu_meter(*stack.cpu) as cpu:
            if item.key["mode"] == "sync":
                result = sync_run(driver, payload, cfg.sync_n, cfg.seconds)
            else:
                result = pipelined_run(driver, payload, cfg.pipe_n, cfg.seconds, cfg.window)
        # before idle(): it may end a client's IO thread, whose CPU time then no longer counts
        others = [cpu_seconds(pid) for pid in (*stack.workers, me)] if remote else []
    finally:
        driver.idle()
    n = result["n"] + 1  # +1: the checking round trip
    result["cpu_us_per_req"] = cpu["cpu"] / n * 1e6
    result["busy"] = cpu["cpu"] / cpu["wall"]
    if others:
        spent = [after - before for before, after in zip(others0, others, strict=True)]
        result["worker_cpu_us_per_req"] = sum(spent[:-1]) / n * 1e6 if stack.workers else float("nan")
        result["client_cpu_us_per_req"] = spent[-1] / n * 1e6
    return result


def summary(result: dict[str, float]) -> str:
    """A short line for the progress output."""
    latency = f"p50 {result['p50_us']:.0f} us p99 {result['p99_us']:.0f} us, " if "p50_us" in result else ""
    return f"{latency}{result['rps']:,.0f} req/s, broker {result['cpu_us_per_req']:.0f} us CPU/req"

"""Part ``cpeers``: the project's own C Majordomo peers (tests/interop) and its C++ client (cpp/include).

1. The same C MDP/0.1 echo workers (1, and 4 on a service of their own, as ``cfg.workers`` says) and C client,
   sync (one request at a time) and pipelined (every request sent before any reply is read), through the
   generaldomo ROUTER broker and the minimal pure-Python forwarding loop (:mod:`bench.minloop`), the floor a
   Python broker stands on. (The zguide's C ``mdbroker`` was measured by
   hand with the same peers: bench/README.md; its sources are not ours to commit or build here; given one you
   built, ``--c-broker PATH`` measures it too, the run moved into a private network namespace.) Each
   measurement is one C client process; req/s is requests over its wall time (process start included, a few
   ms), with the broker process's CPU per request over the same span. A generaldomo broker's rows say which core
   its process ran (``core``: compiled or Python, read from the process: :func:`bench.procs.core_of`).
2. The C++ ``generaldomo::Client`` (``bench/cpp_load.cpp``) next to the Python ``Client``, sync and pipelined
   (``window`` outstanding), through one generaldomo SERVER broker with one generaldomo echo worker process.

The C peers are compiled as the tests compile them (tests/interop/build.py, tests/cpp/build.py) into a cache
directory; a build failure is reported, not raised.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import netns
from bench.config import Config, say
from bench.load import GdDriver, median, pipelined_run, sync_run
from bench.procs import ROOT, Children, core_of, cpu_meter
from bench.transport import available_transports
from generaldomo.io import speedups

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "generaldomo" / "bench-bin"
TIMEOUT = 120.0
Run = Callable[[str, int], dict[str, float]]  # (mode, count) -> figures
C_BROKER, C_BROKER_ENDPOINT = "zguide mdbroker (C)", "tcp://127.0.0.1:5555"  # --c-broker: as the zguide's binds
NO_C_BROKER = (
    "no zguide mdbroker row: give `--c-broker PATH`, an MDP/0.1 broker binding tcp://*:5555 (the zguide's "
    "examples/C/mdbroker.c, built by you against CZMQ; this repository carries neither its sources nor a recipe)"
)
PURE = {"GENERALDOMO_PURE_PYTHON": "1"}  # the broker without its C accelerator (generaldomo.io.speedups)


def build() -> dict[str, Path]:
    """The C peers and the C++ load program, built (if out of date) into :data:`CACHE`."""
    tests = str(ROOT / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    from cpp.build import build_source  # type: ignore[import-not-found]
    from interop.build import build_peers  # type: ignore[import-not-found]

    programs = dict(build_peers(CACHE))
    programs["cpp_load"] = build_source(ROOT / "bench" / "cpp_load.cpp", CACHE / "cpp_load")
    return programs


def run(cfg: Config, children: Children) -> dict[str, Any]:
    """Measure every system side by side, interleaved; a build failure leaves the part's rows empty."""
    try:
        programs = build()
    except Exception as error:  # no compiler, no libzmq prefix: say so
        note = f"C/C++ peers could not be built: {error}"
        say(f"cpeers: {note}")
        return {"rows": [], "errors": [], "notes": [note]}
    notes: list[str] = []
    systems: list[tuple[dict[str, Any], Run]] = []
    started = len(children.procs)
    try:
        # a pipelining C client holds all its requests at once on one connection: above the broker's default cap
        # of requests per connection (a hostile-peer bound, answered 429), which the other brokers do not have
        router = ("gd", "broker", "--transport", "router", "--connection-requests", str(max(cfg.pipe_n, 10_000)))
        systems += _c_system(cfg, children, programs, "generaldomo ROUTER", *router)
        systems += _c_system(cfg, children, programs, "generaldomo ROUTER, pure Python", *router, env=PURE)
        systems += _c_system(cfg, children, programs, "minimal Python loop", "min-broker")
        if speedups.native is not None:
            systems += _c_system(cfg, children, programs, "minimal loop on the C accelerator", "min-broker-c")
        if cfg.c_broker:
            systems += _c_system(cfg, children, programs, C_BROKER, "exec", cfg.c_broker)
        else:
            notes.append(NO_C_BROKER)
        transports, more = available_transports(cfg)
        notes += more
        if "server" in transports:
            systems += _cpp_systems(cfg, children, programs)
        rows, errors = _interleave(systems, cfg)
    finally:
        for proc in children.procs[started:][::-1]:
            children.stop(proc)
    return {"rows": rows, "errors": errors, "notes": notes}


def _c_system(
    cfg: Config,
    children: Children,
    programs: dict[str, Path],
    name: str,
    *broker: str,
    env: dict[str, str] | None = None,
) -> list[tuple[dict[str, Any], Run]]:
    """A broker (bench.peer KIND ARGS, with ``env``) with C MDP/0.1 echo workers, one service per worker count
    of ``cfg.workers`` (``echo`` served by 1, ``echo4`` by 4...); each measured by C client runs."""
    if broker[0] == "gd":
        proc, banner = children.spawn(*broker, "--bind", "tcp://127.0.0.1:*", env=env)
        address = banner.split()[-1]
    elif broker[0] == "exec":  # the reference broker: its endpoint is fixed (we run in a private netns)
        if not netns.inside():
            raise RuntimeError("the reference broker binds tcp://*:5555: run it only inside the bench's netns")
        proc, _ = children.spawn(*broker)
        address = C_BROKER_ENDPOINT
    else:
        proc, address = children.spawn(*broker, "tcp://127.0.0.1:*")
    systems = []
    for workers in cfg.workers:
        service = "echo" if workers == 1 else f"echo{workers}"
        for _ in range(workers):
            children.spawn("exec", str(programs["mdp01_worker"]), "--service", service, address)
        measure = _c_client(programs, address, service, proc.pid)
        _wait_for_worker(measure)
        key = {"peers": "C MDP/0.1 client + worker", "system": name, "transport": "router", "workers": workers}
        if broker[0] == "gd":  # which core the broker process runs, read from the process (it has served by now)
            key["core"] = core_of(proc.pid)
        systems.append((key, measure))
    return systems


def _c_client(programs: dict[str, Path], address: str, service: str, broker: int) -> Run:
    """A measurement: one C client process for ``service``, the broker's CPU over its run."""

    def measure(mode: str, count: int) -> dict[str, float]:
        args = [str(programs["mdp01_client"]), "--requests", str(count), "--timeout-ms", "20000"]
        args += ["--service", service, address]
        if mode == "pipelined":
            args.insert(1, "--pipeline")
        with cpu_meter(broker) as cpu:
            done = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT, check=False)
        if done.returncode:
            raise RuntimeError(f"C client exit {done.returncode}: {done.stderr.strip()[:300]}")
        return _figures(count, cpu, cpu["wall"])

    return measure


def _cpp_systems(cfg: Config, children: Children, programs: dict[str, Path]) -> list[tuple[dict[str, Any], Run]]:
    """One generaldomo SERVER broker and echo worker; the C++ client and the Python client as two systems."""
    from generaldomo import Client

    proc, banner = children.spawn("gd", "broker", "--transport", "server", "--bind", "tcp://127.0.0.1:*")
    address = banner.split()[-1]
    children.spawn("gd", "worker", "--transport", "server", "--connect", address, "--service", "echo")
    python = GdDriver(lambda: Client(address, "server"), "echo")
    payload = b"x" * 16

    def cpp(mode: str, count: int) -> dict[str, float]:
        args = [str(programs["cpp_load"]), address, "echo", mode, str(count), str(cfg.window), "16"]
        with cpu_meter(proc.pid) as cpu:
            done = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT, check=False)
        if done.returncode:
            raise RuntimeError(f"cpp_load exit {done.returncode}: {done.stderr.strip()[:300]}")
        fields = done.stdout.split()
        figures = dict(zip(fields[::2], map(float, fields[1::2]), strict=True))
        result = _figures(int(figures["n"]), cpu, figures["seconds"])
        if mode == "sync":
            result.update(p50_us=figures["p50_us"], p99_us=figures["p99_us"])
        return result

    def py(mode: str, count: int) -> dict[str, float]:
        with cpu_meter(proc.pid) as cpu:
            try:
                if mode == "sync":
                    result = sync_run(python, payload, count, TIMEOUT)
                else:
                    result = pipelined_run(python, payload, count, TIMEOUT, cfg.window)
            finally:
                python.idle()
        result["cpu_us_per_req"] = cpu["cpu"] / (result["n"] + 1) * 1e6
        return result

    base = {"peers": "generaldomo echo worker", "transport": "server", "workers": 1}
    return [({**base, "system": "C++ Client"}, cpp), ({**base, "system": "Python Client"}, py)]


def _figures(count: int, cpu: dict[str, float], seconds: float) -> dict[str, float]:
    return {"n": count, "rps": count / seconds, "cpu_us_per_req": cpu["cpu"] / count * 1e6}


def _wait_for_worker(measure: Run) -> None:
    """One request through the broker, retried until the worker has registered (at most 20 s)."""
    deadline = time.monotonic() + 20
    while True:
        try:
            measure("sync", 1)
            return
        except (RuntimeError, subprocess.TimeoutExpired):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _interleave(systems: list[tuple[dict[str, Any], Run]], cfg: Config) -> tuple[list[dict[str, Any]], list[str]]:
    """Every (system, mode) ``cfg.rounds`` times, the order rotated each round; medians."""
    cells = [(key, fn, mode) for mode in ("sync", "pipelined") for key, fn in systems]
    runs: list[list[dict[str, float]]] = [[] for _ in cells]
    errors: list[str] = []
    for r in range(cfg.rounds):
        shift = r * len(cells) // max(1, cfg.rounds)
        for index in [*range(shift, len(cells)), *range(shift)]:
            key, fn, mode = cells[index]
            count = cfg.sync_n if mode == "sync" else cfg.pipe_n
            try:
                result = fn(mode, count)
            except Exception as error:
                errors.append(f"{key['system']} x{key['workers']} {mode}: {type(error).__name__}: {error}")
                say(f"cpeers {key['system']} x{key['workers']} {mode}: FAILED ({error})")
                continue
            runs[index].append(result)
            say(
                f"cpeers {key['system']} x{key['workers']} {mode}: {result['rps']:,.0f} req/s, "
                f"broker {result['cpu_us_per_req']:.0f} us"
            )
    rows = []
    for (key, _, mode), results in zip(cells, runs, strict=True):
        row: dict[str, Any] = {**key, "mode": mode, "rounds": len(results), "runs": results}
        for metric in ("rps", "cpu_us_per_req", "p50_us", "p99_us"):
            row[metric] = median([r.get(metric, float("nan")) for r in results])
        rows.append(row)
    return rows, errors

"""Part ``openloop``: latency under load, open loop (fixed-rate Poisson arrivals, latency from the scheduled send).

Four systems over loopback tcp, each a broker process with the same C echo workers (tests/interop, built as
part ``cpeers`` builds them) and its own load generator processes (:mod:`bench.openloop_gen`: one raw socket
each, the cheapest client there is):

- **generaldomo ROUTER**: ``generaldomo broker --transport router``; MDP/0.1 generators and workers;
- **generaldomo SERVER**: one broker with a SERVER link for the generators (CLIENT sockets speaking generaldomo's
  protocol) and a ROUTER link for the same MDP/0.1 workers;
- **majortomo** 0.2.0's broker; generators and workers speaking its MDP/0.2 (the only dialect it speaks; the
  C worker with ``--delimiter``, the empty first frame majortomo expects);
- **minimal loop** (:mod:`bench.minloop`, pure Python); MDP/0.1.

First each system's saturation is estimated (closed loop, ``window`` requests outstanding per generator, the
systems interleaved, the median of ``rounds``). Then every system is offered fixed fractions of its own
saturation, 10 % to 125 %: the rate split over the generator processes, each with its own Poisson stream (their
sum is Poisson at the total rate). Each step warms up, then measures a window; each latency is taken from the
request's *scheduled* send time and recorded (after the loop, so that recording costs the generator nothing
while it sends) into an HDR histogram (``hdrhistogram``); the generators' histograms are merged, over rounds too.
Each generator's lag behind its schedule is reported, so that a generator that cannot keep up is seen, not
mistaken for the system. Rounds repeat the ladder; within a step the systems run one after the other in an
order rotated each round. Reported per system and step: offered and achieved rates, p50/p90/p99/p99.9/max,
requests lost (unanswered after the drain), the broker's CPU per request, the worst generator's lag; and the
open-loop goals at 80 % of each system's own saturation. One PNG: p50/p99/p99.9/max against offered load.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.config import Config, say
from bench.load import median
from bench.procs import Children, cpu_meter, cpu_seconds, free_port, read_line

TIMEOUT = 30.0  # seconds beyond a step's own length to wait for a generator's answer (or its ready line)
PERCENTILES = (("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("p999", 99.9))
OURS = ("generaldomo ROUTER", "generaldomo SERVER")
MAJORTOMO, MINIMAL = "majortomo", "minimal loop"
GOAL_FRACTION = 0.8
MAX_LAG_US = 1000.0  # a step whose worst generator fell further behind its schedule (p99) is not judged


@dataclass(frozen=True)
class Sizes:
    """How much one run measures: generator processes and echo workers per system, a step's warm-up, measured
    window and drain (seconds), the calibration's length and window per generator, the offered fractions."""

    generators: int
    workers: int
    warmup: float
    seconds: float
    drain: float
    calibrate: float
    window: int
    fractions: tuple[float, ...]
    payload: int = 16


SIZES = {
    "full": Sizes(4, 2, 0.5, 2.0, 5.0, 1.5, 50, (0.1, 0.25, 0.5, 0.65, 0.8, 0.9, 1.0, 1.1, 1.25)),
    "quick": Sizes(4, 2, 0.3, 1.0, 3.0, 1.0, 50, (0.1, 0.5, 0.8, 1.0, 1.25)),
    "smoke": Sizes(2, 1, 0.1, 0.3, 2.0, 0.3, 10, (0.2, 0.8)),
}


class Target:
    """One system: its broker and worker processes, and its generator processes (connected and answering)."""

    def __init__(self, children: Children, name: str, programs: dict[str, Path], sizes: Sizes) -> None:
        self.children, self.name, self.procs = children, name, []
        worker, kind, endpoint, worker_endpoint = self._start_broker(programs)
        options = ["--delimiter"] if worker == "mdp02_worker" else []  # majortomo's MDP/0.2 envelope
        for _ in range(sizes.workers):
            self.procs.append(children.spawn("exec", str(programs[worker]), *options, worker_endpoint)[0])
        self.generators = [self._generator(kind, endpoint, sizes.payload) for _ in range(sizes.generators)]
        self._until_served(time.monotonic() + 60)

    def _start_broker(self, programs: dict[str, Path]) -> tuple[str, str, str, str]:
        """Start the broker; (worker program, generator kind, generators' endpoint, workers' endpoint)."""
        children, any_port = self.children, "tcp://127.0.0.1:*"
        if self.name == "generaldomo ROUTER":
            proc, banner = children.spawn("gd", "broker", "--transport", "router", "--bind", any_port)
            self.procs.append(proc)
            return "mdp01_worker", "mdp01", banner.split()[-1], banner.split()[-1]
        if self.name == "generaldomo SERVER":
            proc, first = children.spawn(
                "gd", "broker", "--transport", "server", "--bind", any_port, "--router", any_port
            )
            self.procs.append(proc)
            assert proc.stdout is not None  # the second line was printed with the first: it may be buffered already
            lines = dict(line.split()[-2:] for line in (first, proc.stdout.readline()))
            return "mdp01_worker", "gdp", lines["server"], lines["router"]
        if self.name == MAJORTOMO:
            address = f"tcp://127.0.0.1:{free_port()}"
            self.procs.append(children.spawn("mt-broker", address)[0])
            return "mdp02_worker", "majortomo", address, address
        proc, address = children.spawn("min-broker", any_port)
        self.procs.append(proc)
        return "mdp01_worker", "mdp01", address, address

    @property
    def broker(self) -> int:
        return self.procs[0].pid

    def _generator(self, kind: str, endpoint: str, payload: int) -> subprocess.Popen[str]:
        proc = self.children.start("bench.openloop_gen", kind, endpoint, str(payload))
        if read_line(proc, TIMEOUT) != "ready":
            raise RuntimeError(f"{self.name}: a generator did not get ready")
        return proc

    def ask(self, commands: list[dict[str, Any]], timeout: float) -> list[dict[str, Any]]:
        """One command to each generator (all at once); their answers."""
        for proc, command in zip(self.generators, commands, strict=True):
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(command) + "\n")
            proc.stdin.flush()
        return [json.loads(read_line(proc, timeout)) for proc in self.generators]

    def calibrate(self, seconds: float, window: int) -> float:
        """Closed-loop throughput with ``window`` outstanding per generator: the saturation estimate (req/s)."""
        start = time.monotonic() + 0.1
        answers = self.ask([{"calibrate": seconds, "window": window, "start": start}] * len(self.generators), TIMEOUT)
        return sum(a["replies"] for a in answers) / seconds

    def _until_served(self, deadline: float) -> None:
        """Until every generator's requests are answered (the workers have registered); at most 100 tries."""
        for _ in range(100):
            start = time.monotonic() + 0.05
            answers = self.ask([{"calibrate": 0.2, "window": 1, "start": start}] * len(self.generators), TIMEOUT)
            if all(a["replies"] for a in answers):
                return
            if time.monotonic() > deadline:
                break
        raise TimeoutError(f"{self.name}: the echo workers never answered")

    def close(self) -> None:
        for proc in self.generators:
            if proc.stdin is not None:
                proc.stdin.close()
        for proc in [*self.generators, *reversed(self.procs)]:
            self.children.stop(proc, timeout=10.0)


def step(target: Target, rate: float, sizes: Sizes, seed: int) -> dict[str, Any]:
    """One open-loop step of ``target`` at ``rate`` req/s: the generators' answers, merged."""
    from bench.openloop_gen import histogram

    count = len(target.generators)
    start = time.monotonic() + 0.1
    base = {"rate": rate / count, "start": start, "warmup": sizes.warmup, "seconds": sizes.seconds}
    commands = [{**base, "drain": sizes.drain, "seed": seed * 1000 + i} for i in range(count)]
    timeout = sizes.warmup + sizes.seconds + sizes.drain + TIMEOUT
    generators0 = sum(cpu_seconds(proc.pid) for proc in target.generators)
    with cpu_meter(target.broker) as cpu:
        answers = target.ask(commands, timeout)
    generators = sum(cpu_seconds(proc.pid) for proc in target.generators) - generators0
    latency, lag = histogram(), histogram()
    generator_lags = []
    for answer in answers:
        latency.decode_and_add(answer["latency"])
        own = histogram()
        own.decode_and_add(answer["lag"])
        lag.add(own)
        generator_lags.append({"p99_us": own.get_value_at_percentile(99.0), "max_us": answer["lag_max_us"]})
    answered = sum(a["answered"] for a in answers)
    return {
        "rate": rate,
        "sent": sum(a["sent"] for a in answers),
        "answered": answered,
        "lost": sum(a["lost"] for a in answers),
        "capped": sum(a["capped"] for a in answers),
        "throughput": sum(a["throughput"] for a in answers),
        "broker_cpu_us_per_req": cpu["cpu"] / max(1, answered) * 1e6,
        "generator_cpu_us_per_req": generators / max(1, answered) * 1e6,
        "latency": latency.encode().decode("ascii"),
        "lag": lag.encode().decode("ascii"),
        "generator_lags": generator_lags,
    }


def summary(name: str, fraction: float, saturation: float, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One row: a system at one offered rate, its rounds' histograms merged."""
    from bench.openloop_gen import histogram

    latency, lag = histogram(), histogram()
    for run in runs:
        latency.decode_and_add(run["latency"])
        lag.decode_and_add(run["lag"])
    row: dict[str, Any] = {"system": name, "fraction": fraction, "rate": fraction * saturation, "rounds": len(runs)}
    if latency.get_total_count():
        row.update({key: float(latency.get_value_at_percentile(p)) for key, p in PERCENTILES})
        row["max"] = float(latency.get_max_value())
    for key in ("sent", "answered", "lost", "capped"):
        row[key] = sum(r[key] for r in runs)
    row["throughput"] = median([r["throughput"] for r in runs])
    for key in ("broker_cpu_us_per_req", "generator_cpu_us_per_req"):
        row[key] = median([r[key] for r in runs])
    row["lag_p99_us"] = float(lag.get_value_at_percentile(99.0)) if lag.get_total_count() else 0.0
    row["lag_max_us"] = max((g["max_us"] for r in runs for g in r["generator_lags"]), default=0.0)
    row["worst_generator_lag_p99_us"] = max((g["p99_us"] for r in runs for g in r["generator_lags"]), default=0.0)
    row["runs"] = [{k: v for k, v in r.items() if k not in ("latency", "lag")} for r in runs]
    row["histogram"] = latency.encode().decode("ascii")
    return row


def systems(cfg: Config) -> tuple[list[str], list[str]]:
    """The systems this machine can measure, and notes on those it cannot."""
    from bench.peers import REQUIREMENT, majortomo_version
    from generaldomo.io.transport import draft_available

    names, notes = ["generaldomo ROUTER"], []
    if draft_available():
        names.append("generaldomo SERVER")
    else:
        notes.append("generaldomo SERVER skipped: pyzmq lacks draft sockets")
    if majortomo_version() is not None:
        names.append(MAJORTOMO)
    else:
        notes.append(f"majortomo not installed (pip install '{REQUIREMENT}'): its rows are missing")
    names.append(MINIMAL)
    return names, notes


def run(cfg: Config, children: Children, plot: Path | None = None) -> dict[str, Any]:
    """The ``openloop`` part of ``python -m bench``, sized by the run's name (full, quick or smoke)."""
    from bench import cpeers

    sizes = SIZES.get(cfg.name, SIZES["full"])
    part: dict[str, Any] = {"sizes": asdict(sizes), "rows": [], "errors": [], "notes": [], "loadavg": []}
    try:
        programs = cpeers.build()
    except Exception as error:  # no compiler, no libzmq prefix: say so
        part["notes"].append(f"the C echo workers could not be built: {error}")
        return part
    names, part["notes"] = systems(cfg)
    targets: dict[str, Target] = {}
    try:
        for name in names:
            say(f"openloop: starting {name} ({sizes.workers} C echo workers, {sizes.generators} generators)")
            try:
                targets[name] = Target(children, name, programs, sizes)
            except Exception as error:
                part["errors"].append(f"{name}: could not start: {type(error).__name__}: {error}")
        part["saturation"] = _calibrate(targets, sizes, cfg.rounds, part)
        _ladder(targets, sizes, cfg.rounds, part)
    finally:
        for target in targets.values():
            target.close()
    part["goals"] = goals(part)
    if plot is not None and part["rows"]:
        part["plot"] = draw(part, plot)
    return part


def _rotated(names: list[str], shift: int) -> list[str]:
    shift %= max(1, len(names))
    return names[shift:] + names[:shift]


def _calibrate(targets: dict[str, Target], sizes: Sizes, rounds: int, part: dict[str, Any]) -> dict[str, float]:
    """Each system's closed-loop throughput, interleaved, ``rounds`` times: medians (req/s)."""
    found: dict[str, list[float]] = {name: [] for name in targets}
    for r in range(rounds):
        for name in _rotated(list(targets), r):
            found[name].append(targets[name].calibrate(sizes.calibrate, sizes.window))
            say(f"openloop: {name} saturation estimate {found[name][-1]:,.0f} req/s")
    part["calibrations"] = found
    return {name: median(values) for name, values in found.items()}


def _ladder(targets: dict[str, Target], sizes: Sizes, rounds: int, part: dict[str, Any]) -> None:
    """Every fraction of every system's saturation, ``rounds`` times, systems interleaved within a step."""
    runs: dict[tuple[str, float], list[dict[str, Any]]] = {}
    saturation = part["saturation"]
    for r in range(rounds):
        part["loadavg"].append(" ".join(f"{x:.2f}" for x in os.getloadavg()))
        for i, fraction in enumerate(sizes.fractions):
            for name in _rotated(list(targets), r + i):
                what = f"{name} at {fraction:.0%} ({fraction * saturation[name]:,.0f} req/s), round {r + 1}/{rounds}"
                try:
                    result = step(targets[name], fraction * saturation[name], sizes, seed=r * 100 + i)
                except Exception as error:  # one failed step must not stop the run
                    part["errors"].append(f"{what}: {type(error).__name__}: {error}")
                    say(f"openloop: {what}: FAILED ({error})")
                    continue
                runs.setdefault((name, fraction), []).append(result)
                say(f"openloop: {what}: {result['throughput']:,.0f} req/s answered, {result['lost']} lost")
    part["rows"] = [
        summary(name, fraction, saturation[name], runs[name, fraction])
        for name in targets
        for fraction in sizes.fractions
        if (name, fraction) in runs
    ]


def _at(part: dict[str, Any], name: str, fraction: float) -> dict[str, Any] | None:
    return next((r for r in part["rows"] if r["system"] == name and r["fraction"] == fraction and "p50" in r), None)


def _late(row: dict[str, Any] | None) -> bool:
    """Whether a generator of the step fell behind its schedule by more than :data:`MAX_LAG_US` (p99): then the
    load was not offered as scheduled (the machine, not the system, held the generator up)."""
    return row is not None and row["worst_generator_lag_p99_us"] > MAX_LAG_US


def goals(part: dict[str, Any]) -> list[dict[str, Any]]:
    """The open-loop goals, each with its figure and whether it is met; a latency goal whose steps had a
    generator more than :data:`MAX_LAG_US` behind its schedule is marked not judged (``met`` None)."""
    saturation = part.get("saturation", {})
    theirs = _at(part, MAJORTOMO, GOAL_FRACTION)
    found = []
    for name in OURS:
        ours = _at(part, name, GOAL_FRACTION)
        if ours is None:
            continue
        spread = ours["p99"] / ours["p50"]
        found.append(_goal(f"{name}: p99 <= 3x p50 at 80 %", spread, spread <= 3.0, _late(ours)))
        if theirs is not None:
            versus = ours["p99"] / theirs["p99"]
            late = _late(ours) or _late(theirs)
            found.append(_goal(f"{name}: p99 below majortomo's at 80 %", versus, versus < 1.0, late))
        for other in (MAJORTOMO, MINIMAL):
            if other in saturation and name in saturation:
                versus = saturation[name] / saturation[other]
                found.append(_goal(f"{name}: saturation above {other}'s", versus, versus > 1.0, False))
    return found


def _goal(goal: str, value: float, met: bool, late: bool) -> dict[str, Any]:
    return {"goal": goal, "value": value, "met": None if late else met}


def draw(part: dict[str, Any], path: Path) -> str | None:
    """The PNG: p50, p99, p99.9 and max (ms, log scale) against offered load, one line per system."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, axes = plt.subplots(2, 2, figsize=(11, 8), sharex=True)
    names = list(dict.fromkeys(r["system"] for r in part["rows"]))
    shown = (("p50", "p50"), ("p99", "p99"), ("p999", "p99.9"), ("max", "max"))
    for ax, (key, label) in zip(axes.flat, shown, strict=True):
        for name in names:
            rows = [r for r in part["rows"] if r["system"] == name and key in r]
            ax.plot([r["rate"] for r in rows], [r[key] / 1e3 for r in rows], marker="o", label=name)
        ax.set_yscale("log")
        ax.set_title(f"{label} latency from the scheduled send")
        ax.set_ylabel("ms")
        ax.grid(True, which="both", alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel("offered load (req/s, Poisson)")
    axes[0][0].legend(fontsize="small")
    fig.suptitle(
        f"Open loop, loopback tcp, {part['sizes']['payload']} B echo, {part['sizes']['workers']} C echo worker(s)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return str(path)


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def headline(part: dict[str, Any]) -> list[str]:
    """The report's headline lines: saturation of each system and p50/p99 at 80 % of it."""
    lines = []
    for name, rate in part.get("saturation", {}).items():
        at = _at(part, name, GOAL_FRACTION)
        figures = f", at 80 %: p50 {_us(at['p50'])} / p99 {_us(at['p99'])} µs" if at else ""
        lines.append(f"- open loop, {name}: saturation {rate:,.0f} req/s{figures}.")
    return lines


def markdown(part: dict[str, Any]) -> str:
    """The part's tables: every step of every system, the saturation estimates and the goals."""
    sizes = part["sizes"]
    lines = [
        "### 11. Latency under load, open loop (`python -m bench --only openloop`)",
        "",
        f"Loopback tcp, {sizes['payload']} B echo, {sizes['workers']} C echo workers per system, "
        f"{sizes['generators']} generator processes (Poisson arrivals), latency from the scheduled send time; "
        f"each step {sizes['warmup']} s warm-up, {sizes['seconds']} s measured, rounds' HDR histograms merged. "
        f"Load average at each round's start: {'; '.join(part.get('loadavg', [])) or '-'}.",
        "",
        "| system | saturation estimate (closed loop) req/s |",
        "|---|---:|",
        *(f"| {name} | {rate:,.0f} |" for name, rate in part.get("saturation", {}).items()),
        "",
        "| system | % of its saturation | offered req/s | answered req/s | p50 µs | p90 | p99 | p99.9 | max | "
        "lost | broker CPU µs/req | generators' CPU µs/req | worst generator's lag p99 / max µs |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    late = [r for r in part["rows"] if _late(r)]
    for r in part["rows"]:
        lines.append(
            f"| {r['system']} | {r['fraction']:.0%} | {r['rate']:,.0f} | {r['throughput']:,.0f} | "
            f"{_us(r.get('p50'))} | {_us(r.get('p90'))} | {_us(r.get('p99'))} | {_us(r.get('p999'))} | "
            f"{_us(r.get('max'))} | {r['lost']} | {r['broker_cpu_us_per_req']:.0f} | "
            f"{r['generator_cpu_us_per_req']:.0f} | "
            f"{_us(r['worst_generator_lag_p99_us'])} / {_us(r['lag_max_us'])} |"
        )
    if late:
        lines += [
            "",
            f"{len(late)} of {len(part['rows'])} steps had a generator more than {MAX_LAG_US:,.0f} µs behind its "
            "schedule (p99): there the load was not offered as scheduled, and the tail shows the machine's stalls "
            "as much as the system's.",
        ]
    if part.get("goals"):
        lines += ["", "| goal | figure | met |", "|---|---:|---|"]
        verdicts = {True: "yes", False: "no", None: f"not judged (a generator over {MAX_LAG_US:,.0f} µs late, p99)"}
        lines += [f"| {g['goal']} | {g['value']:.2f}x | {verdicts[g['met']]} |" for g in part["goals"]]
    if part.get("plot"):
        lines += ["", f"Latency against offered load: `{Path(part['plot']).name}`"]
    lines += [f"- note: {n}" for n in part.get("notes", [])] + [f"- ERROR: {e}" for e in part.get("errors", [])]
    return "\n".join(lines)

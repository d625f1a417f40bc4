"""Part ``goals``: the performance goals, each a ratio side by side, from one run.

1. The broker core's instructions per request and reply (``python -m bench.peer_instructions --role core``, under
   callgrind: the machine's load does not move it) against :data:`CORE_GOAL`, for the path the broker runs
   (compiled when the compiled core is built) and the pure-Python path, with the profile that says why: the
   Python calls per request and reply and the functions that take the most of its time (cProfile).
2. The same run's part ``cpeers``: the ROUTER broker against the C ``mdbroker`` (``--c-broker PATH``) with the
   same C peers, sync and pipelined, 1 and 4 workers, against :data:`C_BROKER_GOAL` (and the stretch); why: the
   minimal forwarding loop on the same accelerator, which has no core, against the same broker (the ceiling of a
   broker whose core cost nothing). Given ``--c-broker``, the same ratio in instructions per request too (the
   brokers under callgrind with the same C peers, as ``python -m bench.instructions`` counts them), which the
   machine's load does not move, with the minimal loop's count as the why.
3. Part ``peers``: generaldomo's own Client and Worker through its broker against majortomo's broker and peers,
   sync and pipelined, against :data:`MAJORTOMO_GOAL`; why: each process's CPU per request (broker, worker,
   client), since on two cores the throughput follows their sum.
4. Part ``openloop``: the SERVER broker's saturation and its p99 at 80 % of it against the figures of the
   previous measurement (:data:`OPENLOOP_BEFORE`).

``python -m bench --only goals`` runs parts ``cpeers``, ``peers`` and ``openloop`` first (unless ``--smoke``), so
that every ratio comes from one run; a goal whose figures the run lacks says what is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.config import Config, say
from bench.procs import ROOT

CORE_GOAL = 60_000  # instructions per request and reply of the core, at most
C_BROKER_GOAL, C_BROKER_STRETCH = 1.0, 1.2  # ROUTER broker / C mdbroker, same C peers, at least
MAJORTOMO_GOAL = 1.5  # own peers through our broker / majortomo's broker and peers, at least
# the SERVER broker's open-loop figures of the previous measurement (docs/explanation/performance.rst, 2026-12-02)
OPENLOOP_BEFORE = {"saturation": 13_330.0, "p99_us": 130_000.0}
NEEDS = ("cpeers", "peers", "openloop")  # the parts whose figures the goals read
PURE = {"GENERALDOMO_PURE_PYTHON": "1"}
SERVER, MAJORTOMO = "generaldomo SERVER", "majortomo"  # part openloop's names of the systems
TOP = 6  # functions named in the core's profile
PROFILED = 5000  # requests and replies profiled (cProfile is quick; fewer would be noise)


def run(cfg: Config, parts: dict[str, Any]) -> dict[str, Any]:
    """Measure the core, then judge every goal from this run's ``parts``."""
    part: dict[str, Any] = {"core": [], "goals": [], "errors": [], "notes": []}
    count = 100 if cfg.name == "smoke" else 2000
    for label, env in (("as the broker runs it", {}), ("pure Python", PURE)):
        row: dict[str, Any] = {"path": label, "compiled": _compiled(env)}
        if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
            part["notes"].append("no instruction counts: valgrind (callgrind) is not installed")
        else:
            try:
                say(f"goals: the core's instructions per request and reply, {label}")
                found = _instructions(count, env)
                row["instructions"] = found["calling"]
                row["shares"] = {k.removeprefix("share:"): v for k, v in found.items() if k.startswith("share:")}
            except Exception as error:
                part["errors"].append(f"core instructions, {label}: {type(error).__name__}: {error}")
        row.update(_profile(PROFILED, env))
        part["core"].append(row)
        if not row["compiled"]:  # nothing is compiled: the two paths are one
            break
    part["brokers"] = []
    if cfg.c_broker and shutil.which("valgrind") and shutil.which("callgrind_control"):
        try:
            say("goals: the brokers' instructions per request, the C broker's among them")
            part["brokers"] = _broker_instructions(cfg)
        except Exception as error:
            part["errors"].append(f"brokers' instructions: {type(error).__name__}: {error}")
    part["goals"] = [
        *_core_goals(part["core"]),
        *_cpeers_goals(parts),
        *_instruction_goals(part["brokers"]),
        *_peers_goals(parts),
        *_openloop(parts),
    ]
    return part


ROUTER_BROKER, MIN_LOOP_C, C_BROKER = (
    "generaldomo ROUTER, C accelerator",
    "minimal loop on the C accelerator",
    "zguide mdbroker (C)",
)  # bench.instructions' names of the brokers whose instructions per request the goals compare


def _broker_instructions(cfg: Config) -> list[dict[str, Any]]:
    """Instructions per request, sync and pipelined, of the ROUTER broker, the minimal loop on the same accelerator
    and the C broker, each under callgrind with the same C client and worker (:func:`bench.instructions.measure`)."""
    from bench import cpeers, instructions

    counts = {"sync": 20, "pipelined": 50} if cfg.name == "smoke" else {"sync": 2000, "pipelined": 5000}
    programs = cpeers.build()
    rows = []
    with tempfile.TemporaryDirectory(prefix="gdcallgrind-") as tmp:
        for name, command, env in instructions.brokers(cfg.c_broker):
            if name in (ROUTER_BROKER, MIN_LOOP_C, C_BROKER):
                core, found = instructions.measure(name, command, env, programs, counts, Path(tmp))
                rows.append({"system": name, "core": core, **found})
    return rows


def _compiled(env: dict[str, str]) -> bool:
    """Whether the broker core imported under ``env`` is a compiled module."""
    code = "import generaldomo.sansio.broker.core.core as m; print(m.__file__)"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True, timeout=60
    )
    return done.returncode == 0 and not done.stdout.strip().endswith(".py")


def _instructions(count: int, env: dict[str, str]) -> dict[str, float]:
    from bench import peer_instructions

    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        return peer_instructions.measure("core", "router", count)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


PROFILE = """
import cProfile, json, os, pstats, sys
sys.path.insert(0, {root!r})
from bench.peer_instructions import serve_core
profile = cProfile.Profile()
serve_core({count}, profile.enable, profile.disable)
stats = pstats.Stats(profile)
rows = sorted(stats.stats.items(), key=lambda item: -item[1][2])
top = [(f"{{func[2]}} ({{os.path.basename(func[0])}}:{{func[1]}})", own) for func, (_, _, own, _, _) in rows]
total = sum(own for _, (_, _, own, _, _) in stats.stats.items())
print(json.dumps({{"calls": stats.total_calls / {count}, "top": [(n, own / total) for n, own in top[:{top}]]}}))
"""


def _profile(count: int, env: dict[str, str]) -> dict[str, Any]:
    """Python calls per request and reply, and the functions with the most of the core's own time (cProfile;
    a compiled module's functions are not seen by it: only what stays Python is counted)."""
    code = PROFILE.format(root=str(ROOT), count=count, top=TOP)
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True, timeout=300
    )
    if done.returncode:
        return {"profile_error": done.stderr.strip()[-500:]}
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def _goal(goal: str, value: float | None, target: float, higher: bool, why: str, unit: str = "x") -> dict[str, Any]:
    """One goal: its figure, whether it is met, by how much it is missed (the factor to go), and why."""
    if value is None:
        return {"goal": goal, "value": None, "target": target, "met": None, "short_by": None, "why": why, "unit": unit}
    met = value >= target if higher else value <= target
    short = None if met or not value else (target / value if higher else value / target)
    return {"goal": goal, "value": value, "target": target, "met": met, "short_by": short, "why": why, "unit": unit}


def _core_goals(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    found = []
    for row in rows:
        calls, top = row.get("calls"), row.get("top", [])
        instructions = row.get("instructions")
        if row["compiled"]:  # cProfile sees only what still runs in the interpreter: name that, not the entry point
            top = [
                (name, share) for name, share in top if not name.endswith("~:0)") and "peer_instructions" not in name
            ]
        heaviest = ", ".join(f"{name} {share:.0%}" for name, share in top[:3])
        why = (
            f"{calls:.0f} Python calls per request and reply"
            + (
                f", about {instructions / calls:,.0f} instructions each"
                if instructions and calls and not row["compiled"]
                else ""
            )
            + (f"; the most own time: {heaviest}" if heaviest else "")
            if calls
            else "no profile: " + row.get("profile_error", "?")
        )
        shares = sorted(row.get("shares", {}).items(), key=lambda kv: -kv[1])
        if shares:  # where the instructions go: the compiled code's own work, the interpreter, CPython's objects
            why += "; callgrind: " + ", ".join(f"{kind} {share:.0%}" for kind, share in shares)
        path = f"{row['path']}{' (compiled)' if row['compiled'] else ''}"
        found.append(_goal(f"core instructions per request+reply, {path}", instructions, CORE_GOAL, False, why, "i"))
    return found


def _cpeers_goals(parts: dict[str, Any]) -> list[dict[str, Any]]:
    rows = parts.get("cpeers", {}).get("rows", [])
    if not rows:
        return [_goal("ROUTER broker / C mdbroker", None, C_BROKER_GOAL, True, "part cpeers did not run")]

    def rps(system: str, mode: str, workers: int) -> float | None:
        for r in rows:
            if r["system"] == system and r["mode"] == mode and r.get("workers", 1) == workers:
                return float(r["rps"])
        return None

    def core_of(system: str, mode: str, workers: int) -> str | None:
        return next(
            (r.get("core") for r in rows if (r["system"], r["mode"], r.get("workers", 1)) == (system, mode, workers)),
            None,
        )

    found = []
    for workers in sorted({r.get("workers", 1) for r in rows if r["system"] == "generaldomo ROUTER"}):
        for mode in ("sync", "pipelined"):
            ours, theirs = rps("generaldomo ROUTER", mode, workers), rps("zguide mdbroker (C)", mode, workers)
            loop = rps("minimal loop on the C accelerator", mode, workers)
            what = f"ROUTER broker / C mdbroker, {mode}, {workers} worker{'s' if workers > 1 else ''}"
            if theirs is None:
                why = "no C broker: give --c-broker PATH"
                if ours and loop:  # the ceiling of a core that cost nothing, on the same links
                    why += f"; against the minimal loop on the same accelerator (no core) {ours / loop:.2f}x"
                found.append(_goal(what, None, C_BROKER_GOAL, True, why))
                continue
            ceiling = f"the minimal loop on the same accelerator (no core) does {loop / theirs:.2f}x" if loop else ""
            why = f"{ceiling}: the rest is the core" if ceiling else "the core (see its instructions)"
            core = core_of("generaldomo ROUTER", mode, workers)
            why += f"; the broker ran the {core} core" if core else ""
            value = ours / theirs if ours else None
            stretch = (
                ""
                if value is None
                else f" (the stretch, {C_BROKER_STRETCH}x: {'met' if value >= C_BROKER_STRETCH else 'not met'})"
            )
            found.append(_goal(what, value, C_BROKER_GOAL, True, why + stretch))
    return found


def _instruction_goals(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The C broker's instructions per request over the ROUTER broker's (higher is better, as for throughput); why:
    the minimal loop's count, the work of a broker that only forwards on the same links."""
    found = {row["system"]: row for row in rows}
    ours, theirs, loop = (found.get(name) for name in (ROUTER_BROKER, C_BROKER, MIN_LOOP_C))
    if ours is None or theirs is None:
        return []
    goals = []
    for mode in ("sync", "pipelined"):
        why = f"{ours[mode]:,.0f} instructions per request against the C broker's {theirs[mode]:,.0f}"
        if loop is not None:
            ceiling = theirs[mode] / loop[mode]  # of a broker whose core cost nothing, on the same links
            why += f"; the minimal loop on the same accelerator (no core) {loop[mode]:,.0f} ({ceiling:.2f}x): the core"
            why += f" and the IO layer around it add {ours[mode] - loop[mode]:,.0f}"
        why += f"; the broker ran the {ours['core']} core" if ours.get("core") else ""
        what = f"ROUTER broker / C mdbroker in instructions per request (callgrind), {mode}, 1 worker"
        goals.append(_goal(what, theirs[mode] / ours[mode], C_BROKER_GOAL, True, why))
    return goals


def _peers_goals(parts: dict[str, Any]) -> list[dict[str, Any]]:
    rows = parts.get("peers", {}).get("rows", [])
    if not rows:
        return [_goal("own peers / majortomo", None, MAJORTOMO_GOAL, True, "part peers did not run")]
    payload = min(r["payload"] for r in rows)

    def find(system: str, transport: str, peers: str, mode: str) -> dict[str, Any] | None:
        for r in rows:
            if (r["system"], r["transport"], r["peers"], r["payload"], r["mode"]) == (
                system, transport, peers, payload, mode,
            ):  # fmt: skip
                return dict(r)
        return None

    found = []
    for transport in ("router", "server"):
        for mode in ("sync", "pipelined"):
            ours, theirs = (
                find("generaldomo", transport, "generaldomo", mode),
                find("majortomo", "router", "majortomo", mode),
            )
            what = f"own peers ({transport.upper()}) / majortomo, {mode}, {payload} B"
            if ours is None or theirs is None:
                continue
            why = f"CPU µs per request, broker / worker / client: ours {_cpu(ours)} against majortomo's {_cpu(theirs)}"
            found.append(_goal(what, ours["rps"] / theirs["rps"], MAJORTOMO_GOAL, True, why))
    return found


def _cpu(row: dict[str, Any]) -> str:
    figures = (row.get(k) for k in ("cpu_us_per_req", "worker_cpu_us_per_req", "client_cpu_us_per_req"))
    return " / ".join("-" if f is None else f"{f:.0f}" for f in figures)


def _openloop(parts: dict[str, Any]) -> list[dict[str, Any]]:
    part = parts.get("openloop", {})
    saturation = part.get("saturation", {}).get(SERVER)
    if saturation is None:
        return [_goal("SERVER open-loop saturation / before", None, 1.0, True, "part openloop did not run")]
    before = OPENLOOP_BEFORE
    found = [
        _goal(
            "SERVER open-loop saturation / before",
            saturation / before["saturation"],
            1.0,
            True,
            f"{saturation:,.0f} req/s against {before['saturation']:,.0f} (a closed-loop estimate: the machine's load"
            " moves it)",
        )
    ]
    majortomo = part.get("saturation", {}).get(MAJORTOMO)
    if majortomo:
        why = f"{saturation:,.0f} req/s against majortomo's {majortomo:,.0f} in the same run"
        found.append(_goal("SERVER open-loop saturation / majortomo's", saturation / majortomo, 1.0, True, why))
    at = next((r for r in part.get("rows", []) if r["system"] == SERVER and r["fraction"] == 0.8 and "p99" in r), None)
    if at is not None:
        why = f"p99 {at['p99'] / 1000:,.1f} ms against {before['p99_us'] / 1000:,.0f} ms; the generators' lag p99 "
        why += f"{at['worst_generator_lag_p99_us'] / 1000:,.1f} ms"
        found.append(
            _goal("SERVER p99 at 80 % / before (lower is better)", at["p99"] / before["p99_us"], 1.0, False, why)
        )
    return found


def markdown(part: dict[str, Any]) -> str:
    """The goals table: figure, goal, met or by how much it is missed, and why."""
    lines = ["### Goals (`python -m bench --only goals`)", "", "| goal | figure | goal | met | short by | why |"]
    lines.append("|---|---:|---:|---|---:|---|")
    for g in part["goals"]:
        unit = g["unit"]
        value = "-" if g["value"] is None else f"{g['value']:,.0f}" if unit == "i" else f"{g['value']:.2f}x"
        target = (
            f"{g['target']:,.0f}" if unit == "i" else f"{'≥' if 'lower' not in g['goal'] else '≤'} {g['target']:.2f}x"
        )
        met = {True: "yes", False: "no", None: "not measured"}[g["met"]]
        short = "-" if g["short_by"] is None else f"{g['short_by']:.2f}x"
        lines.append(f"| {g['goal']} | {value} | {target} | {met} | {short} | {g['why']} |")
    for row in part["core"]:
        if row.get("top"):
            heaviest = "; ".join(f"{name} {share:.0%}" for name, share in row["top"])
            lines.append(
                f"\nThe core's profile, {row['path']}: {row['calls']:.0f} calls per request and reply; {heaviest}."
            )
    lines.append(
        "\nThe wall-clock ratios are of one run, its systems measured side by side: a machine's load moves single "
        'figures by a factor of two or more (and a ratio less), the instruction counts not at all. "short by": the '
        "factor still to go."
    )
    lines += [f"- note: {n}" for n in part.get("notes", [])] + [f"- ERROR: {e}" for e in part.get("errors", [])]
    return "\n".join(lines)

"""Markdown tables, the JSON file and optional PNG plots of one run's results."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from bench import curve, goals, goodput, ha, openloop, scale, shared

Row = dict[str, Any]

REFERENCE = (
    "Reference (other machines, C): the C Majordomo broker does about 4.5-5k sync and 7-8k pipelined req/s with one "
    "worker over loopback tcp; brokerless libzmq request-reply about 11-13k sync."
)
SYSTEMS = {"router": "DEALER→ROUTER echo", "server": "CLIENT→SERVER echo"}


def fmt(value: float | None, kind: str = "n") -> str:
    """Numbers for tables: ``n`` integer with separators, ``x`` ratio, ``p`` percent, ``f`` 2 decimals."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if kind == "x":
        return f"{value:.2f}x"
    if kind == "p":
        return f"{value * 100:.0f} %"
    if kind == "f":
        return f"{value:.2f}"
    return f"{value:,.0f}"


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, or None when either is missing."""
    if a is None or b is None or not b or math.isnan(a) or math.isnan(b):
        return None
    return a / b


def table(headers: list[str], rows: Iterable[list[str]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---:" for _ in headers) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _index(rows: list[Row], *keys: str) -> Callable[..., Row | None]:
    found = {tuple(r[k] for k in keys): r for r in rows}
    return lambda *values: found.get(tuple(values))


def _get(row: Row | None, metric: str) -> float | None:
    return None if row is None else row.get(metric)


# -------------------------------------------------------------------------------------------------- parts


def transport_md(part: dict[str, Any]) -> str:
    """Tables of part 1 (latency, throughput) and part 2 (broker CPU per request)."""
    rows = part["rows"]
    find = _index(rows, "system", "transport", "scheme", "payload", "workers", "mode")
    cells = sorted({(r["scheme"], r["payload"], r["workers"]) for r in rows if r["system"] == "generaldomo"})
    cells.sort(key=lambda c: (["tcp", "ipc", "inproc"].index(c[0]), c[1], c[2]))
    out = ["### 1a. Sync round trip: latency p50 / p99 (µs) and req/s", ""]
    body = []
    for scheme, payload, workers in cells:
        r, s = (
            find("generaldomo", "router", scheme, payload, workers, "sync"),
            find("generaldomo", "server", scheme, payload, workers, "sync"),
        )
        br, bs = (
            find("baseline", "router", scheme, payload, 0, "sync"),
            find("baseline", "server", scheme, payload, 0, "sync"),
        )
        body.append(
            [
                scheme,
                _size(payload),
                str(workers),
                _lat(br),
                _lat(r),
                fmt(_get(r, "rps")),
                _lat(bs),
                _lat(s),
                fmt(_get(s, "rps")),
                fmt(ratio(_get(r, "p50_us"), _get(br, "p50_us")), "x"),
                fmt(ratio(_get(s, "rps"), _get(r, "rps")), "x"),
            ]
        )
    out.append(
        table(
            [
                "scheme",
                "payload",
                "workers",
                "no broker D→R",
                "ROUTER",
                "ROUTER req/s",
                "no broker C→S",
                "SERVER",
                "SERVER req/s",
                "ROUTER p50 / no broker",
                "SERVER / ROUTER req/s",
            ],
            body,
        )
    )
    out += ["", "### 1b. Pipelined throughput (req/s)", ""]
    body = []
    for scheme, payload, workers in cells:
        r, s = (
            find("generaldomo", "router", scheme, payload, workers, "pipelined"),
            find("generaldomo", "server", scheme, payload, workers, "pipelined"),
        )
        br = find("baseline", "router", scheme, payload, 0, "pipelined")
        bs = find("baseline", "server", scheme, payload, 0, "pipelined")
        body.append(
            [
                scheme,
                _size(payload),
                str(workers),
                fmt(_get(br, "rps")),
                fmt(_get(r, "rps")),
                fmt(_get(bs, "rps")),
                fmt(_get(s, "rps")),
                fmt(ratio(_get(r, "rps"), _get(br, "rps")), "p"),
                fmt(ratio(_get(s, "rps"), _get(bs, "rps")), "p"),
                fmt(ratio(_get(s, "rps"), _get(r, "rps")), "x"),
            ]
        )
    out.append(
        table(
            [
                "scheme",
                "payload",
                "workers",
                "no broker D→R",
                "ROUTER",
                "no broker C→S",
                "SERVER",
                "ROUTER % of no broker",
                "SERVER % of no broker",
                "SERVER / ROUTER",
            ],
            body,
        )
    )
    out += [
        "",
        "### 2. Broker CPU per request (µs; busy = broker CPU / wall clock)",
        "",
        "tcp/ipc: the whole broker process (Python thread + libzmq I/O threads); inproc: the broker thread. "
        "Worker and client CPU per request are the worker processes' and this (client) process's (tcp/ipc only).",
        "",
    ]
    body = []
    for scheme, payload, workers in cells:
        for mode in ("sync", "pipelined"):
            r = find("generaldomo", "router", scheme, payload, workers, mode)
            s = find("generaldomo", "server", scheme, payload, workers, mode)
            body.append(
                [
                    scheme,
                    _size(payload),
                    str(workers),
                    mode,
                    fmt(_get(r, "cpu_us_per_req")),
                    fmt(_get(r, "busy"), "p"),
                    fmt(_get(r, "worker_cpu_us_per_req")),
                    fmt(_get(r, "client_cpu_us_per_req")),
                    fmt(_get(s, "cpu_us_per_req")),
                    fmt(_get(s, "busy"), "p"),
                    fmt(_get(s, "worker_cpu_us_per_req")),
                    fmt(_get(s, "client_cpu_us_per_req")),
                ]
            )
    out.append(
        table(
            [
                "scheme",
                "payload",
                "workers",
                "mode",
                "ROUTER broker",
                "busy",
                "workers",
                "client",
                "SERVER broker",
                "busy",
                "workers",
                "client",
            ],
            body,
        )
    )
    return "\n".join(out + _notes(part))


def core_md(part: dict[str, Any]) -> str:
    """Tables of part 3."""
    rows = part["rows"]
    out = ["### 3. Sans-IO core scaling (no sockets)", ""]
    body = [
        [
            row["case"],
            f"{row['size']:,}",
            fmt(row["dispatch_us"], "f"),
            fmt(row["complete_us"], "f"),
            fmt(row["total_us"], "f"),
            fmt(1e6 / row["total_us"]),
        ]
        for row in rows
        if row["case"] in ("workers", "services")
    ]
    out.append(
        table(["grows", "size", "request→dispatch µs", "reply→answer µs", "total µs/request", "requests/s"], body)
    )
    ticks = [[f"{row['size']:,}", fmt(row["sweep_ms"], "f")] for row in rows if row["case"] == "tick"]
    out += ["", "Heartbeat sweep (`tick`), every heartbeat interval:", "", table(["workers", "ms per sweep"], ticks)]
    mem = part["memory"]
    out += [
        "",
        f"Memory: {mem['queued']:,} queued requests (16-byte payload) hold {mem['bytes_total'] / 2**20:.1f} MiB, "
        f"**{mem['bytes_per_request']:.0f} bytes per queued request** (tracemalloc).",
    ]
    return "\n".join(out)


def flow_md(part: dict[str, Any]) -> str:
    """Part 4: the flow-control timeline."""
    requests = part["requests"]
    queued = sorted(r["queued"] for r in requests)
    lines = [
        "### 4. Flow control (the Ray experiment)",
        f"Bursts of {part['burst_size']} requests every {part['burst_every']:g} s ({part['bursts']} bursts), service "
        f"limited to {part['rate_limit']:g} dispatches/s and {part['concurrency_limit']} in flight, "
        f"{part['work']:g} s of simulated work per request ({part['concurrency_limit']} workers). "
        f"Achieved dispatch rate **{fmt(part['achieved_dispatch_rate'], 'f')}/s**; at most "
        f"{part['max_in_flight']} in flight; queued time per request from {queued[0]:.2f} s to {queued[-1]:.2f} s "
        "(the rate limit paces each burst, the cap holds dispatches back while it is full).",
    ]
    if part.get("plot"):
        lines.append(f"Timeline (queued in blue, processing in orange; tasks in flight below): `{part['plot']}`")
    return "\n\n".join(lines)


def ray_md(part: dict[str, Any]) -> str:
    """Part 6: the Ray experiment, generaldomo's broker against the flow-controlled actor."""
    from bench.ray_results import LATE, verdict

    out = ["### 6. Ray tasks through generaldomo's flow control and through a flow-controlled actor", ""]
    if not part["scenarios"]:
        return "\n".join(out + _notes(part))
    out += [
        f"{part['clients']} Ray tasks send the requests; limits: rate (burst 1) and in flight; queued = work start "
        "- send; released = when the flow control let the request go (the broker's dispatch; the actor's turn). "
        "*holds*: no 1 s window with more work starts than the rate (+1, +10 %), never more in flight than the "
        "limit, and at least 90 % of the rate achieved; latest send: how late a client task sent a request (over "
        f"{LATE:g} s: the load was not offered as scheduled, and the scenario is not judged).",
        "",
        "| scenario | approach | requests | limit /s, in flight | achieved /s | peak 1 s released / started "
        "| peak in flight | queued p50 / p90 / p99 / max (s) | latest send (s) | verdict |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for entry in part["scenarios"]:
        s = entry["scenario"]
        for approach, a in entry["approaches"].items():
            queued = " / ".join(f"{a[k]:.2f}" for k in ("queued_p50", "queued_p90", "queued_p99", "queued_max"))
            out.append(
                f"| {s['name']} | {approach} | {a['requests']:,} | {s['rate']:g}, {s['concurrency']} | "
                f"{fmt(a['achieved_rate'], 'f')} | {a['peak_1s_released']} / {a['peak_1s_starts']} | "
                f"{a['peak_in_flight']} | {queued} | "
                f"{a['late_send_max']:.2f} | {verdict(a)} |"
            )
    article = part["scenarios"][0]["approaches"]
    overheads = [
        f"{name} {a['overhead_p50'] * 1e6:,.0f} / {a['overhead_p99'] * 1e6:,.0f} µs"
        for name, a in article.items()
        if "overhead_p50" in a
    ]
    if overheads:
        out += [
            "",
            "Overhead per request (p50 / p99 round trip, one at a time, no work, no limit): "
            + "; ".join(overheads)
            + ".",
        ]
    out += ["", _ray_limits(part["scenarios"])]
    if part.get("plot"):
        out += ["", f"Timelines (queued in blue, processing in orange): `{part['plot']}`"]
    if part.get("adaptive"):
        out += ["", adaptive_md(part["adaptive"]).replace("### 7.", "#### 6b.", 1)]
    return "\n".join(out + _notes(part))


def _ray_limits(scenarios: list[dict[str, Any]]) -> str:
    """Per approach: the scaled rates it holds and fails (those with late clients left out)."""
    from bench.ray_results import LATE, verdict

    said = []
    for approach in scenarios[0]["approaches"]:
        found: dict[str, list[str]] = {"holds": [], "fails": [], "clients late": []}
        for entry in scenarios[1:]:
            found[verdict(entry["approaches"][approach])].append(f"{entry['scenario']['rate']:g}")
        held, failed, late = (", ".join(found[k]) or "none" for k in ("holds", "fails", "clients late"))
        said.append(f"{approach} holds at {held}/s, fails at {failed}")
        if found["clients late"]:
            said[-1] += f", not judged (clients over {LATE:g} s late) at {late}"
    return "Scaled up: " + "; ".join(said) + "."


def peers_md(part: dict[str, Any]) -> str:
    """Table of part 5."""
    out = ["### 5. Peers over loopback tcp, 1 worker", ""]
    rows = part["rows"]
    if not rows:
        return "\n".join(out + _notes(part))
    find = _index(rows, "system", "transport", "peers", "payload", "mode")
    body = []
    for payload in sorted({r["payload"] for r in rows}):
        mt_sync, mt_pipe = (
            find("majortomo", "router", "majortomo", payload, "sync"),
            find("majortomo", "router", "majortomo", payload, "pipelined"),
        )
        for system, transport, peers in sorted({(r["system"], r["transport"], r["peers"]) for r in rows}, reverse=True):
            sync, pipe = (
                find(system, transport, peers, payload, "sync"),
                find(system, transport, peers, payload, "pipelined"),
            )
            body.append(
                [
                    f"{system} broker ({transport.upper()})" if system == "generaldomo" else "majortomo broker",
                    f"{peers} client+worker",
                    _size(payload),
                    _lat(sync),
                    fmt(_get(sync, "rps")),
                    fmt(_get(pipe, "rps")),
                    fmt(_get(sync, "cpu_us_per_req")),
                    fmt(_get(pipe, "cpu_us_per_req")),
                    fmt(_get(pipe, "worker_cpu_us_per_req")),
                    fmt(_get(pipe, "client_cpu_us_per_req")),
                    fmt(ratio(_get(sync, "rps"), _get(mt_sync, "rps")), "x"),
                    fmt(ratio(_get(pipe, "rps"), _get(mt_pipe, "rps")), "x"),
                ]
            )
    out.append(
        table(
            [
                "broker",
                "peers",
                "payload",
                "sync p50 / p99 µs",
                "sync req/s",
                "pipelined req/s",
                "broker CPU µs/req sync",
                "pipelined",
                "worker CPU µs/req pipelined",
                "client CPU µs/req pipelined",
                "sync vs majortomo",
                "pipelined vs majortomo",
            ],
            body,
        )
    )
    return "\n".join(out + _notes(part))


C_BROKER = "zguide mdbroker (C)"  # a row only when given the reference broker (python -m bench --c-broker PATH)
MIN_LOOP = "minimal Python loop"


def cpeers_md(part: dict[str, Any]) -> str:
    """Table of the C-peers part: brokers with the same C peers (1 and 4 workers); the C++ client next to the
    Python one."""
    out = ["### 7. C peers and the C++ client over loopback tcp, 16 B", ""]
    rows = part["rows"]
    if not rows:
        return "\n".join(out + _notes(part))
    find = _index(rows, "system", "mode", "workers")
    reference = C_BROKER if find(C_BROKER, "sync", 1) else MIN_LOOP
    body = []
    for system, peers, transport, workers in dict.fromkeys(
        (r["system"], r["peers"], r["transport"], r.get("workers", 1)) for r in rows
    ):
        sync, pipe = find(system, "sync", workers), find(system, "pipelined", workers)
        versus = reference if transport == "router" else "Python Client"
        core = next((r["core"] for r in (sync, pipe) if r and r.get("core")), "")  # a generaldomo broker's, as it ran
        body.append(
            [
                f"{system} ({transport.upper()} broker{f', {core} core' if core else ''})",
                peers,
                str(workers),
                fmt(_get(sync, "rps")),
                fmt(_get(pipe, "rps")),
                fmt(_get(sync, "cpu_us_per_req")),
                fmt(_get(pipe, "cpu_us_per_req")),
                fmt(ratio(_get(sync, "rps"), _get(find(versus, "sync", workers), "rps")), "x"),
                fmt(ratio(_get(pipe, "rps"), _get(find(versus, "pipelined", workers), "rps")), "x"),
            ]
        )
    headers = ["system", "peers", "workers", "sync req/s", "pipelined req/s", "broker CPU µs/req sync", "pipelined"]
    out.append(table([*headers, "sync ratio", "pipelined ratio"], body))
    out += [
        "",
        f"Ratios: ROUTER rows against the {'C reference broker' if reference == C_BROKER else 'minimal Python loop'}"
        " with as many workers, SERVER rows against the Python Client. C-client "
        "req/s include the client process's start (one process per measurement); pipelined C clients send "
        "every request before reading a reply, the C++ and Python clients keep `window` outstanding.",
    ]
    return "\n".join(out + _notes(part))


def profile_md(part: dict[str, Any]) -> str:
    """Where the broker's time goes per request."""
    out = ["### Broker hot path: CPU per request, pipelined 16 B over tcp, 1 worker", ""]
    for row in part["rows"]:
        out += [
            f"**{row['transport'].upper()}**: {row['n']:,} requests at {fmt(row['rps'])} req/s; broker process "
            f"{fmt(row['cpu_us_per_req'])} µs CPU/request = Python thread {fmt(row['main_cpu_us_per_req'])} + libzmq "
            f"I/O threads {fmt(row['io_cpu_us_per_req'])}. The Python thread's µs per request, parts measured alone:",
            "",
            table(
                ["part of the broker loop", "µs/request", "share", "share under cProfile"],
                [
                    [c["component"], fmt(c["us_per_req"], "f"), fmt(c["share"], "p"), fmt(c["cprofile_share"], "p")]
                    for c in row["components"]
                ],
            ),
            "",
            "cProfile, calls per request: "
            + ", ".join(f"{k} {v:.2f}" for k, v in row["calls_per_req"].items())
            + ". Top functions by self time (profiled µs/request, calls/request): "
            + "; ".join(
                f"`{f['function']}` {f['self_us_per_req']:.1f} ({f['calls_per_req']:.1f})" for f in row["top"][:10]
            ),
            "",
        ]
    return "\n".join(out)


def headline_md(results: dict[str, Any]) -> str:
    """The figures to hold against the reference targets."""
    parts = results["parts"]
    lines = ["### Headline (tcp 127.0.0.1, 16 B, 1 worker)", "", REFERENCE, ""]
    if "transport" in parts:
        find = _index(parts["transport"]["rows"], "system", "transport", "scheme", "payload", "workers", "mode")
        for transport in ("router", "server"):
            sync, pipe = (
                find("generaldomo", transport, "tcp", 16, 1, "sync"),
                find("generaldomo", transport, "tcp", 16, 1, "pipelined"),
            )
            base = find("baseline", transport, "tcp", 16, 0, "sync")
            if sync or pipe:
                lines.append(
                    f"- generaldomo {transport.upper()}: {fmt(_get(sync, 'rps'))} sync req/s, "
                    f"{fmt(_get(pipe, 'rps'))} pipelined req/s; brokerless {SYSTEMS[transport]} "
                    f"{fmt(_get(base, 'rps'))} sync req/s."
                )
        r = find("generaldomo", "router", "tcp", 16, 1, "pipelined")
        s = find("generaldomo", "server", "tcp", 16, 1, "pipelined")
        if r and s:
            lines.append(f"- SERVER / ROUTER pipelined: {fmt(ratio(_get(s, 'rps'), _get(r, 'rps')), 'x')}.")
    if parts.get("peers", {}).get("rows"):
        find = _index(parts["peers"]["rows"], "system", "transport", "peers", "payload", "mode")
        for mode in ("sync", "pipelined"):
            mt = find("majortomo", "router", "majortomo", 16, mode)
            gd = find("generaldomo", "router", "generaldomo", 16, mode)
            same = find("generaldomo", "router", "majortomo", 16, mode)
            lines.append(
                f"- {mode}: generaldomo (own peers) / majortomo {fmt(ratio(_get(gd, 'rps'), _get(mt, 'rps')), 'x')}; "
                f"generaldomo broker / majortomo broker with the same majortomo peers "
                f"{fmt(ratio(_get(same, 'rps'), _get(mt, 'rps')), 'x')}."
            )
    if parts.get("cpeers", {}).get("rows"):
        find = _index(parts["cpeers"]["rows"], "system", "mode", "workers")
        for mode in ("sync", "pipelined"):
            ours, pure = find("generaldomo ROUTER", mode, 1), find("generaldomo ROUTER, pure Python", mode, 1)
            c_ref, loop = find(C_BROKER, mode, 1), find(MIN_LOOP, mode, 1)
            cpp, py = find("C++ Client", mode, 1), find("Python Client", mode, 1)
            versus_c = f"C broker {fmt(ratio(_get(ours, 'rps'), _get(c_ref, 'rps')), 'x')}, " if c_ref else ""
            four, c_four = find("generaldomo ROUTER", mode, 4), find(C_BROKER, mode, 4)
            if four and c_four:
                versus_c += f"with 4 workers {fmt(ratio(_get(four, 'rps'), _get(c_four, 'rps')), 'x')}, "
            lines.append(
                f"- {mode}, C MDP/0.1 peers: generaldomo ROUTER / {versus_c}minimal Python loop "
                f"{fmt(ratio(_get(ours, 'rps'), _get(loop, 'rps')), 'x')}; its pure-Python path / the minimal "
                f"Python loop {fmt(ratio(_get(pure, 'rps'), _get(loop, 'rps')), 'x')}; C++ Client / Python Client "
                f"(SERVER) {fmt(ratio(_get(cpp, 'rps'), _get(py, 'rps')), 'x')}."
            )
    if parts.get("scale", {}).get("rows"):
        lines += scale.headline(parts["scale"])
    if parts.get("openloop", {}).get("rows"):
        lines += openloop.headline(parts["openloop"])
    return "\n".join(lines)


def adaptive_md(part: dict[str, Any]) -> str:
    """Part 7: the adaptive concurrency cap against fixed caps."""
    lines = [
        f"### 7. Adaptive concurrency ({part.get('clients', 'client threads')})",
        f"A service of {part['cores']} cores ({1000 * part['base']:.0f} ms a task; a task started with n running "
        f"takes n / {part['cores']} times longer beyond {part['cores']}), {part['workers']} workers and as many "
        f"callers ({part.get('clients', 'client threads')}), {part['seconds']:g} s per phase; figures over "
        "each phase's second half.",
        "",
        table(
            ["phase", "replies/s", "service p50", "service p90", "cap (median)"],
            [
                [
                    p["name"],
                    fmt(p["throughput"], "f"),
                    _ms(p["service_p50"]),
                    _ms(p["service_p90"]),
                    str(p["settled_cap"]),
                ]
                for p in part["phases"]
            ],
        ),
    ]
    if part.get("plot"):
        lines.append(f"\nService times and caps: `{part['plot']}`")
    return "\n".join(lines)


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{1000 * seconds:.0f} ms"


def markdown(results: dict[str, Any]) -> str:
    """The whole report."""
    m = results["machine"]
    parts = results["parts"]
    head = [
        f"## generaldomo benchmark ({results['config']['name']}, {results['started']})",
        f"`{results['command']}` on {m['nproc']} x {m['cpu']}; Python {m['python']}, pyzmq {m['pyzmq']}, "
        f"libzmq {m['libzmq']}; generaldomo {m.get('generaldomo', '?')}; broker links: {m.get('links', '?')}; "
        f"load average at start {m['loadavg_at_start']}; {results['duration_s']:.0f} s. "
        f"Medians of {results['config']['rounds']} interleaved round(s).",
        headline_md(results),
    ]
    sections = {
        "transport": transport_md,
        "core": core_md,
        "flow": flow_md,
        "peers": peers_md,
        "profile": profile_md,
        "cpeers": cpeers_md,
        "ray": ray_md,
        "adaptive": adaptive_md,
        "curve": curve.markdown,
        "scale": scale.markdown,
        "openloop": openloop.markdown,
        "shared": shared.markdown,
        "goodput": goodput.markdown,
        "goals": goals.markdown,
        "ha": ha.markdown,
    }
    body = [sections[name](parts[name]) for name in sections if name in parts]
    body += [f"- ERROR: {e}" for e in results.get("errors", [])]
    return "\n\n".join([*head, *body]) + "\n"


def _notes(part: dict[str, Any]) -> list[str]:
    lines = [f"- note: {n}" for n in part.get("notes", [])] + [f"- ERROR: {e}" for e in part.get("errors", [])]
    return ["", *lines] if lines else []


def _lat(row: Row | None) -> str:
    return f"{fmt(_get(row, 'p50_us'))} / {fmt(_get(row, 'p99_us'))}" if row else "-"


def _size(payload: int) -> str:
    return f"{payload // 1024} KiB" if payload >= 1024 else f"{payload} B"


# -------------------------------------------------------------------------------------------------- files


def write(results: dict[str, Any], out: Path, stem: str) -> list[Path]:
    """Write ``stem.json``, ``stem.md`` and, with matplotlib, ``stem-*.png`` into ``out``; return the paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{stem}.json", out / f"{stem}.md"]
    paths[0].write_text(json.dumps(results, indent=1, default=_json_default) + "\n")
    paths[1].write_text(markdown(results))
    try:
        paths += plots(results, out, stem)
    except Exception as error:  # charts are optional; the figures are in the JSON and the tables
        print(f"[bench] no charts: {type(error).__name__}: {error}", file=sys.stderr)
    return paths


def _json_default(value: object) -> object:
    return str(value)


def plots(results: dict[str, Any], out: Path, stem: str) -> list[Path]:
    """PNG bar charts of the transport and peers parts, if matplotlib is installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    paths = []
    rows = results["parts"].get("transport", {}).get("rows", [])
    for mode, metric, label in (("pipelined", "rps", "req/s"), ("sync", "p50_us", "p50 latency (µs)")):
        selected = [r for r in rows if r["mode"] == mode and r["workers"] in (0, 1)]
        if not selected:
            continue
        groups = sorted({(r["scheme"], r["payload"]) for r in selected}, key=lambda g: (g[0], g[1]))
        series = sorted({(r["system"], r["transport"]) for r in selected})
        find = _index(selected, "system", "transport", "scheme", "payload")
        fig, ax = plt.subplots(figsize=(max(6, len(groups) * 1.2), 4))
        width = 0.8 / len(series)
        for i, (system, transport) in enumerate(series):
            values = [_get(find(system, transport, *g), metric) or 0 for g in groups]
            name = f"{system} {transport}" if system != "baseline" else f"no broker {SYSTEMS[transport]}"
            ax.bar([x + i * width for x in range(len(groups))], values, width, label=name)
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(groups))], [f"{s}\n{_size(p)}" for s, p in groups])
        ax.set_ylabel(label)
        ax.set_yscale("log")
        ax.set_title(f"{mode}, 1 worker")
        # Beside the axes, not over them: no bar is ever hidden behind the legend.
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
        fig.tight_layout()
        path = out / f"{stem}-{mode}.png"
        fig.savefig(path, dpi=100, bbox_inches="tight")
        plt.close(fig)
        paths.append(path)
    return paths


if __name__ == "__main__":  # python -m bench.report RESULTS.json: print the report of a run again
    print(markdown(json.loads(Path(sys.argv[1]).read_text())))

"""Part ``shared``: flow control for a service many jobs share, on one broker with worker threads in
this process, over loopback tcp; the clients are threads in this process, except in (b).

(a) *Fair shares*: two tenants share a service of :data:`WORKERS` workers (:data:`WORK` s a task). One floods it
at 10x its capacity (open loop), the other sends one request at a time; the light tenant's latency (p50, p99)
with fair shares (two tenants) against first come, first served (both under one tenant name), in one run. At
the end of each phase the flood is cancelled, so the next starts empty.

(b) *A remote API with a hidden limit*, Ray tasks as its callers (:data:`TASKS` tasks on a local Ray, the ``ray``
part's set-up, each keeping one call per thread outstanding on its process's generaldomo client or on the actor):
the API takes :data:`API_LIMIT` calls per second (a sliding second) and answers 429 with ``retry_after`` beyond
it (:mod:`bench.hidden_api`). generaldomo, with no rate configured, its :data:`API_WORKERS` worker threads in this
process calling the one API object (they raise ``Reject(429, retry_after=...)``), against the Ray article's
flow-controlled actor (:class:`bench.ray_actor.FlowControlledActorBase`) run as a Ray actor of
:data:`API_WORKERS` threads (``max_concurrency``) that holds the API and calls it, given a guess too high (2x:
every call over the limit comes back 429 and is tried again by its caller) and too low (half: capacity left
idle). Both sides have one API in one process, called in-process by as many threads, with the same work per
call; only who paces the calls differs. Timelines of calls that got through and of 429s, per second.

(c) *Overload with deadlines*: open-loop arrivals at :data:`OVERLOAD` times the capacity for the first half of
the phase, then at :data:`CALM` times it, each request wanting its answer within :data:`DEADLINE` s; goodput
(answers within their deadline, per second), over the overload and over the calm after it, when the requests
carry the deadline (the broker drops the expired ones unserved) and when they do not
(``Client(deadlines=False)``: the backlog of the overload is served after it, late).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from bench.config import Config, progress, say
from bench.hidden_api import HiddenLimitAPI, LimitedAPIActor
from bench.procs import ROOT
from generaldomo import Broker, Client, Reject, RequestFailed, Settings, Worker
from generaldomo.sansio.broker.services.stats import percentile

WORKERS = 4
WORK = 0.02  # seconds a task takes: the service does WORKERS / WORK tasks a second
FLOOD = 10.0  # the heavy tenant's offered load, in capacities
API_LIMIT = 20.0  # calls per second the simulated API takes
API_WORKERS = 8  # workers calling the API (the actor's max_concurrency), and callers of the service
TASKS = 4  # Ray tasks the callers run in, API_WORKERS // TASKS threads each
DEADLINE = 0.5  # seconds a request of part (c) wants its answer within
OVERLOAD = 2.0  # part (c)'s offered load in its first half, in capacities
CALM = 0.5  # and in its second half
PHASE = {"full": 6.0, "quick": 3.0, "smoke": 1.0}  # seconds of each phase
API_PHASE = {"full": 30.0, "quick": 15.0, "smoke": 3.0}


def run(cfg: Config, plot: Path | None = None) -> dict[str, Any]:
    """The three experiments; their figures and traces, and the plot's path (if drawn)."""
    seconds, api_seconds = PHASE.get(cfg.name, 3.0), API_PHASE.get(cfg.name, 15.0)
    result: dict[str, Any] = {"workers": WORKERS, "work": WORK, "flood": FLOOD, "api_limit": API_LIMIT}
    result["fairness"] = fairness(seconds)
    result["api"] = hidden_limit(api_seconds)
    result["deadlines"] = deadlines(seconds)
    if plot is not None:
        result["plot"] = str(draw(result, plot))
    return result


class _Service:
    """A broker on loopback with ``count`` worker threads serving ``service`` with ``handler``."""

    def __init__(
        self, service: str, handler: Callable[[bytes], bytes], count: int, settings: Settings | None = None
    ) -> None:
        self.broker = Broker("router", ["tcp://127.0.0.1:*"], settings=settings).start()
        self.endpoint = self.broker.endpoint("router", "tcp")
        self.workers = [Worker(self.endpoint, service, handler) for _ in range(count)]
        self.threads = [threading.Thread(target=w.serve, daemon=True) for w in self.workers]
        for thread in self.threads:
            thread.start()
        for _ in range(600):
            if len(self.broker.core.workers) >= count:
                break
            time.sleep(0.05)
        else:
            raise TimeoutError(f"fewer than {count} workers registered")

    def close(self) -> None:
        for worker in self.workers:
            worker.stop()
        for thread in self.threads:
            thread.join(10)
        self.broker.stop()


def _work(payload: bytes) -> bytes:
    time.sleep(WORK)
    return payload


# ------------------------------------------------------------------------------------------ (a) fair shares


def fairness(seconds: float) -> dict[str, Any]:
    """The light tenant's latencies behind a flood, with fair shares and first come first served."""
    service = _Service("shared", _work, WORKERS)
    try:
        phases = [_fair_phase(service.endpoint, seconds, name, heavy, light) for name, heavy, light in (
            ("fair shares", "heavy", "light"),
            ("first come, first served", "everyone", "everyone"),
        )]  # fmt: skip
    finally:
        service.close()
    return {"phases": phases, "capacity": WORKERS / WORK}


def _fair_phase(endpoint: str, seconds: float, name: str, heavy_tenant: str, light_tenant: str) -> dict[str, Any]:
    say(f"shared: {name}, {seconds:g} s")
    progress["last"] = time.monotonic()
    rate = FLOOD * WORKERS / WORK
    latencies: list[float] = []
    with Client(endpoint, tenant=heavy_tenant) as heavy, Client(endpoint, tenant=light_tenant) as light:
        start = time.monotonic()
        stop = start + seconds
        flood: list[Future[Any]] = []

        def offer() -> None:
            sent = 0
            while (now := time.monotonic()) < stop:
                due = int((now - start) * rate)
                while sent < due:
                    flood.append(heavy.submit("shared", b"h"))
                    sent += 1
                time.sleep(0.002)

        flooder = threading.Thread(target=offer, daemon=True)
        flooder.start()
        while time.monotonic() < stop:
            sent = time.monotonic()
            try:
                light.request("shared", b"l", timeout=seconds + 30)
            except (TimeoutError, RequestFailed):
                continue
            latencies.append(time.monotonic() - sent)
        flooder.join()
        served = sum(f.done() and not f.cancelled() and f.exception() is None for f in flood)
        for future in flood:
            future.cancel()  # the next phase starts empty
    return {
        "name": name,
        "light_requests": len(latencies),
        "light_p50": percentile(latencies, 50),
        "light_p99": percentile(latencies, 99),
        "heavy_offered": len(flood),
        "heavy_served": served,
        "latencies": latencies,
    }


# ------------------------------------------------------------------------------------------ (b) hidden limit


def hidden_limit(seconds: float) -> dict[str, Any]:
    """generaldomo (no rate configured) against the actor with a guess too high and one too low, Ray tasks the
    callers of both, on a local Ray started here (loopback, 2 CPUs) and stopped at the end."""
    result: dict[str, Any] = {"limit": API_LIMIT, "callers": "Ray tasks", "tasks": TASKS, "runs": [], "notes": []}
    try:
        import ray

        import generaldomo.ray as gdray
    except ImportError:
        result["notes"].append("ray not installed: pip install 'generaldomo[ray]'")
        return result
    say("shared: starting a local Ray (loopback, 2 CPUs)")
    gdray.start_local(num_cpus=2, runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}}, log_to_driver=False)
    try:
        result["runs"].append(_broker_api(seconds))
        for guess in (2 * API_LIMIT, API_LIMIT / 2):
            result["runs"].append(_actor_api(seconds, guess))
    finally:
        ray.shutdown()
    return result


def _callers(launch: Callable[[Any], Any], seconds: float) -> tuple[float, int]:
    """:data:`TASKS` Ray tasks made by ``launch(gate)``, timed together by one gate: their start, calls answered."""
    import ray

    from bench.ray_clients import GATE_WAIT, RETRY_GRACE, Gate

    gate = Gate.remote(TASKS)
    try:
        runs = ray.get([launch(gate) for _ in range(TASKS)], timeout=GATE_WAIT + seconds + RETRY_GRACE + 180)
    finally:
        ray.kill(gate)
    (start,) = {start for start, _ in runs}
    return start, sum(len(answers) for _, answers in runs)


def _broker_api(seconds: float) -> dict[str, Any]:
    """The API in this process behind :data:`API_WORKERS` worker threads, Ray tasks calling the broker."""
    from bench.ray_clients import closed_loop

    say(f"shared: hidden limit {API_LIMIT:g}/s through the broker, no rate configured, {seconds:g} s")
    progress["last"] = time.monotonic()
    api = HiddenLimitAPI(API_LIMIT)

    def handler(payload: bytes) -> bytes:
        wait = api.call()
        if wait is not None:
            raise Reject(429, "the API says: too many requests", retry_after=wait)
        time.sleep(WORK)
        return payload

    service = _Service("api", handler, API_WORKERS)
    threads = API_WORKERS // TASKS
    try:
        with Client(service.endpoint) as client:
            start, done = _callers(
                lambda gate: closed_loop.remote(service.endpoint, "api", gate, seconds, threads), seconds
            )
            backoff = next(s for s in client.status()["services"] if s["name"] == "api")["flow"]["backoff"]
    finally:
        service.close()
    adapted = None if backoff is None else backoff["rate"]  # None: no 429 ever came, the rate was never adapted
    return _api_figures("generaldomo, no rate set", api.record(), start, seconds, done, {"adapted_rate": adapted})


def _actor_api(seconds: float, guess: float) -> dict[str, Any]:
    """The API inside the article's actor (a Ray actor of :data:`API_WORKERS` threads), Ray tasks calling it."""
    import ray

    from bench.ray_clients import actor_loop

    say(f"shared: hidden limit {API_LIMIT:g}/s through the article's actor guessing {guess:g}/s, {seconds:g} s")
    progress["last"] = time.monotonic()
    remote: Any = ray.remote(LimitedAPIActor).options(max_concurrency=API_WORKERS, num_cpus=0)
    actor = remote.remote(API_LIMIT, WORK)
    threads = API_WORKERS // TASKS
    try:
        ray.get(actor.set_rate_limit.remote(guess), timeout=120)
        start, done = _callers(lambda gate: actor_loop.remote(actor, gate, seconds, threads), seconds)
        calls = ray.get(actor.calls.remote(), timeout=60)
    finally:
        ray.kill(actor)
    return _api_figures(f"actor guessing {guess:g}/s", calls, start, seconds, done, {"guess": guess})


def _api_figures(
    name: str, calls: list[tuple[float, bool]], start: float, seconds: float, done: int, extra: dict[str, Any]
) -> dict[str, Any]:
    """Calls that went through and 429s per second, overall and over the second half."""
    ok = [t - start for t, passed in calls if passed and 0 <= t - start < seconds]
    refused = [t - start for t, passed in calls if not passed and 0 <= t - start < seconds]
    half = seconds / 2
    return {
        "name": name,
        "answered": done,
        "through_per_s": len(ok) / seconds,
        "through_late_per_s": sum(t >= half for t in ok) / half,
        "refused_per_s": len(refused) / seconds,
        "refused_late_per_s": sum(t >= half for t in refused) / half,
        "timeline": _per_second(ok, seconds),
        "refusals": _per_second(refused, seconds),
        **extra,
    }


def _per_second(times: list[float], seconds: float) -> list[int]:
    counts = [0] * max(1, int(seconds + 0.999))
    for t in times:
        counts[min(len(counts) - 1, int(t))] += 1
    return counts


# ------------------------------------------------------------------------------------------ (c) deadlines


def deadlines(seconds: float) -> dict[str, Any]:
    """Goodput under overload, with and without the deadline in the requests."""
    service = _Service("busy", _work, WORKERS)
    try:
        phases = [_deadline_phase(service.endpoint, seconds, carried) for carried in (True, False)]
    finally:
        service.close()
    return {"phases": phases, "deadline": DEADLINE, "overload": OVERLOAD, "calm": CALM}


def _deadline_phase(
    endpoint: str, seconds: float, carried: bool, *, capacity: float = WORKERS / WORK, overload: float = OVERLOAD,
    calm: float = CALM, deadline: float = DEADLINE, name: str = "",
) -> dict[str, Any]:  # fmt: skip
    """Open-loop arrivals at ``overload`` x ``capacity`` for half of ``seconds``, then at ``calm`` x it, each
    request wanting its answer within ``deadline`` (sent with it if ``carried``); how they ended."""
    name = name or ("deadlines dropped by the broker" if carried else "no deadline sent")
    say(f"shared: overload, {name}, {seconds:g} s")
    progress["last"] = time.monotonic()
    half = seconds / 2
    lock = threading.Lock()
    counts = {"on_time": 0, "late": 0, "dropped": 0, "calm_on_time": 0}
    with Client(endpoint, deadlines=carried) as client:
        start = time.monotonic()
        futures: list[Future[Any]] = []

        def settle(scheduled: float) -> Callable[[Future[Any]], None]:
            def done(future: Future[Any]) -> None:
                with lock:
                    if future.cancelled() or future.exception() is not None:
                        counts["dropped"] += 1
                    elif time.monotonic() - scheduled <= deadline:
                        counts["on_time"] += 1
                        counts["calm_on_time"] += scheduled - start >= half
                    else:
                        counts["late"] += 1

            return done

        def due(elapsed: float) -> int:  # arrivals scheduled by then: overload x capacity, then calm x capacity
            return int(capacity * (overload * min(elapsed, half) + calm * max(0.0, elapsed - half)))

        def scheduled_at(n: int) -> float:
            first = overload * capacity * half
            return n / (overload * capacity) if n < first else half + (n - first) / (calm * capacity)

        sent = 0
        while (now := time.monotonic()) < start + seconds:
            while sent < due(now - start):
                future = client.submit("busy", b"x", deadline=deadline if carried else None)
                future.add_done_callback(settle(start + scheduled_at(sent)))
                futures.append(future)
                sent += 1
            time.sleep(0.002)
        wait_until = time.monotonic() + deadline + 5
        while time.monotonic() < wait_until and not all(f.done() for f in futures):
            time.sleep(0.05)
        for future in futures:
            future.cancel()
    return {
        "name": name,
        "offered": sent,
        **counts,
        "goodput_per_s": counts["on_time"] / seconds,
        "calm_goodput_per_s": counts["calm_on_time"] / half,
    }


# ------------------------------------------------------------------------------------------ the report


def markdown(part: dict[str, Any]) -> str:
    """Part 12's tables."""

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{1000 * value:.0f}"

    out = [
        "### 12. A shared service: fair shares, backpressure from the service, deadlines",
        "",
        f"(a) Two tenants, {WORKERS} workers of {1000 * WORK:g} ms (capacity {WORKERS / WORK:.0f}/s); one floods at "
        f"{FLOOD:g}x capacity, the other sends one request at a time:",
        "",
        "| queueing | light requests | light p50 (ms) | light p99 (ms) | flood offered | flood served |",
        "|---|---|---|---|---|---|",
    ]
    for p in part["fairness"]["phases"]:
        out.append(
            f"| {p['name']} | {p['light_requests']} | {ms(p['light_p50'])} | {ms(p['light_p99'])} | "
            f"{p['heavy_offered']} | {p['heavy_served']} |"
        )
    out += [
        "",
        f"(b) A remote API that takes {part['api']['limit']:g} calls/s (429 with retry_after beyond), "
        f"{API_WORKERS} callers in {part['api'].get('tasks', TASKS)} Ray tasks; per second, over the whole run and "
        "its second half (generaldomo: the rate it adapted to, at the end):",
        "",
        "| who paces the calls | answered | through/s | through/s, 2nd half | 429s/s | 429s/s, 2nd half |",
        "|---|---|---|---|---|---|",
    ]
    for r in part["api"]["runs"]:
        adapted = f" (adapted to {r['adapted_rate']:.1f}/s)" if r.get("adapted_rate") is not None else ""
        out.append(
            f"| {r['name']}{adapted} | {r['answered']} | {r['through_per_s']:.1f} | {r['through_late_per_s']:.1f} | "
            f"{r['refused_per_s']:.1f} | {r['refused_late_per_s']:.1f} |"
        )
    out += [f"\n{note}" for note in part["api"].get("notes", [])]
    out += [
        "",
        f"(c) Open-loop arrivals at {OVERLOAD:g}x capacity, then (second half) at {CALM:g}x, each wanting its "
        f"answer within {part['deadlines']['deadline']:g} s:",
        "",
        "| requests | offered | on time | late | dropped | goodput/s | goodput/s after the overload |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in part["deadlines"]["phases"]:
        out.append(
            f"| {p['name']} | {p['offered']} | {p['on_time']} | {p['late']} | {p['dropped']} | "
            f"{p['goodput_per_s']:.0f} | {p['calm_goodput_per_s']:.0f} |"
        )
    if part.get("plot"):
        out += ["", f"![shared service]({Path(part['plot']).name})"]
    return "\n".join(out)


# ------------------------------------------------------------------------------------------ the plot


def draw(result: dict[str, Any], path: Path) -> Path:
    """Three panels: the light tenant's latency, the API timelines, goodput."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(15, 4.5), width_ratios=(1, 2, 1))
    phases = result["fairness"]["phases"]
    names = [p["name"] for p in phases]
    for n, key in enumerate(("light_p50", "light_p99")):
        values = [1000 * (p[key] or 0) for p in phases]
        left.bar([x + 0.4 * n for x in range(len(phases))], values, width=0.4, label=key.split("_")[1])
    left.set_xticks([x + 0.2 for x in range(len(phases))], names, fontsize="small")
    left.set_yscale("log")
    left.set_ylabel("light tenant's latency (ms)")
    left.set_title(f"a tenant flooding at {FLOOD:g}x capacity", fontsize="medium")
    left.legend(fontsize="small")
    for n, run in enumerate(result["api"]["runs"]):
        seconds = range(len(run["timeline"]))
        middle.plot(seconds, run["timeline"], color=f"C{n}", label=f"{run['name']}: through")
        middle.plot(seconds, run["refusals"], color=f"C{n}", linestyle=":", label=f"{run['name']}: 429s")
    middle.axhline(result["api_limit"], color="grey", linestyle="--", linewidth=0.8, label="the hidden limit")
    middle.set_xlabel("seconds")
    middle.set_ylabel("calls per second")
    middle.set_yscale("symlog", linthresh=10)
    middle.set_title(f"a remote API taking {result['api_limit']:g} calls/s, Ray tasks calling", fontsize="medium")
    middle.legend(fontsize="x-small")
    deadline_phases = result["deadlines"]["phases"]
    for n, (key, label) in enumerate((("goodput_per_s", "whole run"), ("calm_goodput_per_s", "after the overload"))):
        values = [p[key] for p in deadline_phases]
        right.bar([x + 0.4 * n for x in range(len(deadline_phases))], values, width=0.4, label=label)
    right.set_xticks([x + 0.2 for x in range(len(deadline_phases))], [p["name"] for p in deadline_phases])
    right.set_ylabel("answers within the deadline per second")
    right.set_title(f"{OVERLOAD:g}x capacity, then {CALM:g}x; deadline {DEADLINE:g} s", fontsize="medium")
    right.tick_params(axis="x", labelsize="x-small")
    right.legend(fontsize="small")
    fig.suptitle(f"A shared service: {WORKERS} workers, {1000 * WORK:g} ms a task", fontsize="medium")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path

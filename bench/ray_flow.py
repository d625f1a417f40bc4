"""Part ``ray``: the Ray flow-control experiment side by side, generaldomo's broker against an actor.

Ray tasks are the clients (``ray_clients`` of them, each sending its share of the requests at their scheduled
times). (a) *generaldomo*: the tasks call a service through the broker, which limits it (``mmi.flow``: rate with a
burst of 1, concurrency); one pool actor (:class:`generaldomo.ray.WorkerPool`) holds one worker per concurrency
slot. (b) *actor*: the tasks call the flow-controlled actor written from the article (:mod:`bench.ray_actor`), made
with ``max_concurrency`` equal to the concurrency limit. The same work (a sleep) runs in both. First the article's
microbenchmark (bursts of 10 every 2 s, 5/s, 10 in flight, 1 s of work), drawn as two timelines, with the overhead
of each path (one request at a time, no work, no limit); then the same shape scaled up (bursts of 2 s worth of
requests, concurrency twice the rate) to find where each stops holding its limit; last the adaptive concurrency cap
against fixed caps before a service that slows under load, Ray tasks as its clients (:mod:`bench.ray_adaptive`).
Ray runs on this machine, on loopback (:func:`generaldomo.ray.start_local`).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import adaptive_flow
from bench.config import Config, say
from bench.procs import ROOT
from generaldomo import Broker, Client

LEAD = 1.0  # seconds between handing the schedule to the client tasks and the first send


@dataclass(frozen=True)
class Scenario:
    """Bursts of ``burst`` requests every ``every`` s, ``requests`` in all, limited to ``rate`` and
    ``concurrency``, ``work`` seconds each."""

    name: str
    rate: float
    concurrency: int
    requests: int
    burst: int
    every: float = 2.0
    work: float = 1.0

    @property
    def offsets(self) -> list[float]:
        """When each request is sent, in seconds from the first burst."""
        return [(n // self.burst) * self.every for n in range(self.requests)]

    @property
    def service(self) -> str:
        return f"sim-{self.rate:g}-{self.requests}"

    @property
    def timeout(self) -> float:
        return self.requests / self.rate * 3 + self.every + self.work + 120.0


def scenarios(cfg: Config) -> list[Scenario]:
    """The article's microbenchmark, then the scaled-up rungs."""
    article = Scenario("article", 5.0, 10, 10 * cfg.ray_bursts, 10)
    scaled = [
        Scenario(f"{rate:g}/s", rate, round(2 * rate * work), n, round(2 * rate), work=work)
        for rate, n, work in cfg.ray_scale
    ]
    return [article, *scaled]


def run(cfg: Config, plot: Path | None = None) -> dict[str, Any]:
    """Run every scenario through both approaches; the figures, and the timeline's path when drawn."""
    try:
        import ray

        import generaldomo.ray as gdray
    except ImportError:
        return {"scenarios": [], "errors": [], "notes": ["ray not installed: pip install 'generaldomo[ray]'"]}
    broker = Broker("router", ["tcp://127.0.0.1:*"]).start()
    endpoint = broker.endpoint("router", "tcp")
    say("ray: starting a local Ray (loopback, 2 CPUs)")
    gdray.start_local(num_cpus=2, runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}}, log_to_driver=False)
    result: dict[str, Any] = {"clients": cfg.ray_clients, "scenarios": [], "errors": [], "notes": []}
    try:
        client = gdray.client(endpoint)
        for n, scenario in enumerate(scenarios(cfg)):
            try:
                result["scenarios"].append(_scenario(scenario, endpoint, client, cfg, keep=n == 0))
            except Exception as error:  # a scenario that fails is reported; the others' results stand
                result["errors"].append(f"{scenario.name}: {type(error).__name__}: {error}")
        result["adaptive"] = _adaptive(endpoint, client, cfg, result["errors"])
    finally:
        gdray.close()
        ray.shutdown()
        broker.stop()
    if plot is not None and result["scenarios"] and result["scenarios"][0]["scenario"]["name"] == "article":
        result["plot"] = str(_draw(result["scenarios"][0], plot))
    if plot is not None and result["adaptive"] is not None:
        adaptive = plot.with_name(plot.name.replace("ray-flow", "ray-adaptive"))
        result["adaptive"]["plot"] = str(adaptive_flow.draw(result["adaptive"], adaptive))
    return result


def _adaptive(endpoint: str, client: Client, cfg: Config, errors: list[str]) -> dict[str, Any] | None:
    """The adaptive cap against fixed caps with Ray tasks as the clients (:mod:`bench.ray_adaptive`)."""
    from bench import ray_adaptive

    try:
        return ray_adaptive.run(endpoint, client, cfg.adaptive_seconds)
    except Exception as error:  # reported; the scenarios' results stand
        errors.append(f"adaptive: {type(error).__name__}: {error}")
        return None


def _scenario(scenario: Scenario, endpoint: str, client: Client, cfg: Config, keep: bool) -> dict[str, Any]:
    from bench.ray_results import summarize

    probe = cfg.ray_probe if keep else 0
    out: dict[str, Any] = {"scenario": asdict(scenario), "approaches": {}}
    for approach, through in (("generaldomo", _through_broker), ("actor", _through_actor)):
        say(f"ray: {scenario.name}, {scenario.requests} requests, through {approach}")
        records, probed = through(scenario, endpoint, client, cfg.ray_clients, probe)
        summary = summarize(scenario.rate, scenario.concurrency, records, probed)
        out["approaches"][approach] = summary | ({"records": records} if keep else {})
    return out


def _through_broker(
    scenario: Scenario, endpoint: str, client: Client, clients: int, probe: int
) -> tuple[list[dict[str, float]], list[float] | None]:
    import ray

    import generaldomo.ray as gdray
    from bench.ray_clients import probe_broker, via_broker

    service = scenario.service
    pool = gdray.WorkerPool(endpoint, service, "bench.ray_actor:simulated", 1, threads=scenario.concurrency, num_cpus=0)
    try:
        pool.wait()
        _registered(client, service, scenario.concurrency)
        client.flow(service, rate=scenario.rate, burst=1, concurrency=scenario.concurrency)
        records = _drive(
            scenario,
            clients,
            lambda share: via_broker.remote(endpoint, service, share, scenario.work, scenario.timeout),
        )
        probed = None
        if probe:
            client.flow(service, rate=None, concurrency=None)
            probed = ray.get(probe_broker.remote(endpoint, service, probe), timeout=300)
    finally:
        pool.close()
    return records, probed


def _through_actor(
    scenario: Scenario, endpoint: str, client: Client, clients: int, probe: int
) -> tuple[list[dict[str, float]], list[float] | None]:
    import ray

    from bench.ray_actor import SimulatedService
    from bench.ray_clients import probe_actor, via_actor

    actor: Any = ray.remote(SimulatedService).options(max_concurrency=scenario.concurrency, num_cpus=0).remote()
    try:
        ray.get(actor.set_rate_limit.remote(scenario.rate), timeout=120)
        records = _drive(
            scenario, clients, lambda share: via_actor.remote(actor, share, scenario.work, scenario.timeout)
        )
        probed = None
        if probe:
            ray.get(actor.set_rate_limit.remote(None), timeout=60)
            probed = ray.get(probe_actor.remote(actor, probe), timeout=300)
    finally:
        ray.kill(actor)
    return records, probed


def _drive(scenario: Scenario, clients: int, launch: Any) -> list[dict[str, float]]:
    """Hand each client task its share of the schedule; gather the records, times relative to the start."""
    import ray

    from bench.ray_clients import warm

    ray.get([warm.remote(0.5) for _ in range(clients)], timeout=120)  # their processes run before the clock starts
    offsets = scenario.offsets
    start = time.monotonic() + LEAD
    shares = [[(n, start + offsets[n]) for n in range(k, scenario.requests, clients)] for k in range(clients)]
    batches = ray.get([launch(share) for share in shares], timeout=scenario.timeout + 60)
    records = sorted((r for batch in batches for r in batch), key=lambda r: r["index"])
    fields = ("sent", "released", "start", "end", "received")
    return [{**{f: r[f] - start for f in fields}, "scheduled": offsets[int(r["index"])]} for r in records]


def _registered(client: Client, service: str, count: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        services = {s["name"]: s for s in client.status()["services"]}
        if services.get(service, {}).get("workers", 0) >= count:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"fewer than {count} workers of {service} registered in {timeout:g} s")
        time.sleep(0.1)


def _draw(article: dict[str, Any], path: Path) -> Path:
    from bench.ray_results import draw

    s = article["scenario"]
    runs = {
        "(a) generaldomo broker flow control": article["approaches"]["generaldomo"]["records"],
        "(b) flow-controlled Ray actor": article["approaches"]["actor"]["records"],
    }
    limits = f"limited to {s['rate']:g}/s and {s['concurrency']} in flight"
    title = f"Ray tasks, bursts of {s['burst']} every {s['every']:g} s, {limits}, {s['work']:g} s of work each"
    return draw(runs, title, path)

"""Part 4: flow control, reproducing the Ray flow-control experiment.

Bursts of 10 requests every 2 s go to a service limited to 5 dispatches per second and 10 in flight. The
simulated work takes 2.5 s per request, so that both limits show: at 5/s, 2.5 s of work would keep 12.5 tasks in
flight, so after the first burst's 10 dispatches (paced by the rate limit) the concurrency cap holds the next
burst back until a task finishes. (With the article's 1 s of work, 5 in flight at most, the cap never binds.)
Each request's queued time and processing time come back with its reply; the plot draws one horizontal bar per
request in two colours, as in the article, with each burst's arrival and the rate limit marked, and below it the
tasks in flight against the cap.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from generaldomo import Broker, Client, Reply, Worker

RATE = 5.0
CONCURRENCY = 10
BURST_SIZE = 10
BURST_EVERY = 2.0
WORK = 2.5  # seconds; above CONCURRENCY / RATE = 2 s, so the cap binds (see the docstring)


def run(bursts: int = 4, transport: str = "router", plot: Path | None = None) -> dict[str, Any]:
    """Run the experiment; return per-request times, the achieved rates and the plot's path (if drawn)."""
    replies, spans, start = _experiment(bursts, transport)
    requests = [_times(n // BURST_SIZE, reply, start) for n, reply in enumerate(replies)]
    work = [(begun - start, ended - start) for begun, ended in spans]
    dispatched = sorted(r["sent"] + r["queued"] for r in requests)
    result: dict[str, Any] = {
        "rate_limit": RATE,
        "concurrency_limit": CONCURRENCY,
        "bursts": bursts,
        "burst_size": BURST_SIZE,
        "burst_every": BURST_EVERY,
        "work": WORK,
        "achieved_dispatch_rate": _rate(dispatched),
        "first_burst_dispatch_rate": _rate(dispatched[:BURST_SIZE]),
        "max_in_flight": max((level for _, level in _in_flight(work)), default=0),
        "requests": requests,
        "work_spans": work,
    }
    if plot is not None:
        result["plot"] = str(draw(requests, work, plot))
    return result


def _times(burst: int, reply: Reply, start: float) -> dict[str, float]:
    """A request's times in seconds since ``start``, as its reply tells them (a broker always sends timing)."""
    if reply.sent is None or reply.queued is None or reply.served is None or reply.received is None:
        raise ValueError("a reply without timing")
    sent, received = reply.sent - start, reply.received - start
    return {"burst": burst, "sent": sent, "queued": reply.queued, "served": reply.served, "received": received}


def _experiment(bursts: int, transport: str) -> tuple[list[Reply], list[tuple[float, float]], float]:
    """Serve the bursts; the replies, each task's (start, end) as its worker saw them, and the start time."""
    spans: list[tuple[float, float]] = []  # appended by the worker threads (list.append is atomic)

    def slow(payload: bytes | tuple[bytes, ...]) -> bytes | tuple[bytes, ...]:
        begun = time.monotonic()
        time.sleep(WORK)
        spans.append((begun, time.monotonic()))
        return payload

    broker = Broker(transport, ["tcp://127.0.0.1:*"]).start()
    endpoint = broker.endpoint(transport, "tcp")
    workers = [Worker(endpoint, "nlu", slow, transport) for _ in range(CONCURRENCY)]
    threads = [threading.Thread(target=w.serve, daemon=True) for w in workers]
    for thread in threads:
        thread.start()
    try:
        with Client(endpoint, transport) as client:
            client.flow("nlu", rate=RATE, burst=1, concurrency=CONCURRENCY)
            _wait_for_workers(client, len(workers))
            start = time.monotonic()
            futures = []
            for burst in range(bursts):
                time.sleep(max(0.0, start + burst * BURST_EVERY - time.monotonic()))
                futures += [client.submit("nlu", b"doc-%d-%d" % (burst, n)) for n in range(BURST_SIZE)]
            replies = [future.result(60 + bursts * BURST_SIZE * WORK) for future in futures]
    finally:
        for worker in workers:
            worker.stop()
        for thread in threads:
            thread.join(5)
        broker.stop()
    return replies, spans, start


def _rate(times: list[float]) -> float | None:
    """Events per second between the first and the last of ``times`` (sorted)."""
    return (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 and times[-1] > times[0] else None


def can_plot() -> bool:
    """True when matplotlib is installed."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _wait_for_workers(client: Client, count: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        services = {s["name"]: s for s in client.status()["services"]}
        if services.get("nlu", {}).get("workers", 0) >= count:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"only some of {count} workers registered")
        time.sleep(0.05)


def _in_flight(spans: list[tuple[float, float]]) -> list[tuple[float, int]]:
    """``(time, tasks running from then on)`` at each start and end of ``spans``; ends first on a tie."""
    events = sorted([(begun, 1) for begun, _ in spans] + [(ended, -1) for _, ended in spans])
    steps, level = [], 0
    for when, change in events:
        level += change
        steps.append((when, level))
    return steps


def draw(requests: list[dict[str, float]], work: list[tuple[float, float]], path: Path) -> Path:
    """Bars per request (queued, processing) with burst arrivals and the rate limit; below, tasks in flight."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ordered = sorted(requests, key=lambda r: r["sent"])
    figure, (bars, flight) = plt.subplots(
        2, 1, sharex=True, figsize=(9, 0.16 * len(ordered) + 3.5), height_ratios=[3, 1]
    )
    _draw_requests(bars, ordered)
    _draw_in_flight(flight, work)
    flight.set_xlim(left=0)
    flight.set_xlabel("seconds since the first burst")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def _draw_requests(axes: Any, ordered: list[dict[str, float]]) -> None:
    from matplotlib.patches import Rectangle

    for row, request in enumerate(ordered):
        axes.barh(row, request["queued"], left=request["sent"], color="tab:blue", height=0.8)
        axes.barh(row, request["served"], left=request["sent"] + request["queued"], color="tab:orange", height=0.8)
    arrivals = sorted({min(r["sent"] for r in ordered if r["burst"] == b) for b in {r["burst"] for r in ordered}})
    burst_lines = [axes.axvline(when, color="0.4", linestyle=":", linewidth=1) for when in arrivals]
    first = ordered[0]["sent"] + ordered[0]["queued"]
    rows = range(len(ordered))
    (rate_line,) = axes.plot([first + row / RATE for row in rows], list(rows), "k--", linewidth=1)
    axes.invert_yaxis()
    axes.set_ylabel("request (in order sent)")
    axes.set_title(
        f"Bursts of {BURST_SIZE} every {BURST_EVERY:g} s, {WORK:g} s of work each, "
        f"limited to {RATE:g}/s and {CONCURRENCY} in flight"
    )
    handles = [Rectangle((0, 0), 1, 1, color=colour) for colour in ("tab:blue", "tab:orange")]
    handles += [burst_lines[0], rate_line]
    labels = ["queued (flow control)", "processing", "a burst arrives", f"rate limit: dispatch at {RATE:g}/s"]
    axes.legend(handles=handles, labels=labels, loc="upper right", fontsize="small")


def _draw_in_flight(axes: Any, work: list[tuple[float, float]]) -> None:
    steps = [(0.0, 0), *_in_flight(work)]
    axes.step([t for t, _ in steps], [n for _, n in steps], where="post", color="tab:green", label="in flight")
    axes.axhline(CONCURRENCY, color="tab:red", linestyle="--", linewidth=1, label=f"concurrency cap: {CONCURRENCY}")
    axes.set_ylim(0, CONCURRENCY * 1.35)
    axes.set_ylabel("tasks in flight")
    axes.legend(loc="upper right", fontsize="small", ncol=2)

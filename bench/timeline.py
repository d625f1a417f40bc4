"""Part 4: flow control, reproducing the Ray flow-control experiment.

Bursts of 10 requests every 2 s go to a service limited to 5 dispatches per second and 10 in flight, whose
workers take about 1 s per request. Each request's queued time (held back by flow control) and processing
time come back with its reply; the plot draws one horizontal bar per request in two colours, as in the
article, and the achieved dispatch rate is reported next to the limit.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from generaldomo import Broker, Client, Worker

RATE = 5.0
CONCURRENCY = 10
BURST_SIZE = 10
BURST_EVERY = 2.0
WORK = 1.0


def run(bursts: int = 4, transport: str = "router", plot: Path | None = None) -> dict[str, Any]:
    """Run the experiment; return per-request times, the achieved rate and the plot's path (if drawn)."""
    broker = Broker(transport, ["tcp://127.0.0.1:*"]).start()
    endpoint = broker.endpoint(transport, "tcp")
    workers = [Worker(endpoint, "nlu", _slow, transport) for _ in range(CONCURRENCY)]
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
            replies = [future.result(60 + bursts * BURST_SIZE / RATE) for future in futures]
    finally:
        for worker in workers:
            worker.stop()
        for thread in threads:
            thread.join(5)
        broker.stop()
    requests = [
        {"sent": r.sent - start, "queued": r.queued, "served": r.served, "received": r.received - start}
        for r in replies
    ]
    dispatched = sorted(r["sent"] + r["queued"] for r in requests)
    achieved = (len(dispatched) - 1) / (dispatched[-1] - dispatched[0]) if len(dispatched) > 1 else None
    result: dict[str, Any] = {
        "rate_limit": RATE,
        "concurrency_limit": CONCURRENCY,
        "bursts": bursts,
        "achieved_dispatch_rate": achieved,
        "max_in_flight": _max_in_flight(requests),
        "requests": requests,
    }
    if plot is not None:
        result["plot"] = str(draw(requests, plot))
    return result


def can_plot() -> bool:
    """True when matplotlib is installed."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _slow(payload: bytes) -> bytes:
    time.sleep(WORK)
    return payload


def _wait_for_workers(client: Client, count: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        services = {s["name"]: s for s in client.status()["services"]}
        if services.get("nlu", {}).get("workers", 0) >= count:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"only some of {count} workers registered")
        time.sleep(0.05)


def _max_in_flight(requests: list[dict[str, float]]) -> int:
    events = sorted(
        [(r["sent"] + r["queued"], 1) for r in requests]
        + [(r["sent"] + r["queued"] + r["served"], -1) for r in requests]
    )
    level = peak = 0
    for _, change in events:
        level += change
        peak = max(peak, level)
    return peak


def draw(requests: list[dict[str, float]], path: Path) -> Path:
    """One horizontal bar per request: queued part and processing part in two colours."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(9, 0.18 * len(requests) + 1.5))
    for row, request in enumerate(sorted(requests, key=lambda r: r["sent"])):
        axes.barh(row, request["queued"], left=request["sent"], color="tab:blue", height=0.8)
        axes.barh(row, request["served"], left=request["sent"] + request["queued"], color="tab:orange", height=0.8)
    axes.invert_yaxis()
    axes.set_xlabel("seconds since the first burst")
    axes.set_ylabel("request")
    axes.set_title(f"Bursts of {BURST_SIZE} every {BURST_EVERY:g} s, limited to {RATE:g}/s and {CONCURRENCY} in flight")
    swatches = [plt.Rectangle((0, 0), 1, 1, color=colour) for colour in ("tab:blue", "tab:orange")]
    axes.legend(handles=swatches, labels=["queued (flow control)", "processing"], loc="upper right")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path

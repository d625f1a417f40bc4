"""What the Ray experiment's records say: achieved rate, peaks against the limits, queueing delay, overhead;
and the side-by-side timeline.

A record is one request, times in seconds from the scenario's first scheduled send: ``sent``, ``released``
(when the flow control let it go: the broker's dispatch, or the actor's turn), ``start`` and ``end`` of the
work, ``received``, and ``scheduled``. A limit is *kept* when no 1 s window holds more work
starts than the rate allows (``rate + 1``, the one request a token bucket of burst 1 or a minimum interval
lets through at a window's edge, with 10 % for clock jitter) and no more requests work at once than the
concurrency limit. The limit is *reached* when the achieved rate is at least 90 % of it (the offered load
averages exactly the limit). An approach *holds* a scenario when it does both. A scenario whose client tasks
sent a request more than ``LATE`` seconds after its time did not offer the load it was meant to (the machine
was saturated, by the run itself or by others): it is reported but not judged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from generaldomo.sansio.broker.services.stats import percentile

Record = dict[str, float]
COLOURS = ("tab:blue", "tab:orange")  # queued, processing
LATE = 0.5  # seconds a client may send late (a quarter of the time between bursts) for the scenario to count


def peak_window(starts: list[float], width: float = 1.0) -> int:
    """The most of sorted ``starts`` within any ``width`` seconds."""
    peak = first = 0
    for last, start in enumerate(starts):
        while start - starts[first] >= width:
            first += 1
        peak = max(peak, last - first + 1)
    return peak


def peak_in_flight(records: list[Record]) -> int:
    """The most requests whose work overlaps (an end before a start at the same instant)."""
    edges = sorted([(r["start"], 1) for r in records] + [(r["end"], -1) for r in records])
    level = peak = 0
    for _, change in edges:
        level += change
        peak = max(peak, level)
    return peak


def summarize(rate: float, concurrency: int, records: list[Record], probe: list[float] | None) -> dict[str, Any]:
    """The figures of one approach in one scenario."""
    starts = sorted(r["start"] for r in records)
    queued = sorted(r["start"] - r["sent"] for r in records)
    achieved = (len(starts) - 1) / (starts[-1] - starts[0]) if len(starts) > 1 else None
    window, in_flight = peak_window(starts), peak_in_flight(records)
    kept = window <= rate * 1.1 + 1 and in_flight <= concurrency
    reached = achieved is not None and achieved >= 0.9 * rate
    summary: dict[str, Any] = {
        "requests": len(records),
        "achieved_rate": achieved,
        "peak_1s_starts": window,
        "peak_1s_released": peak_window(sorted(r["released"] for r in records)),
        "peak_in_flight": in_flight,
        "queued_p50": percentile(queued, 50),
        "queued_p90": percentile(queued, 90),
        "queued_p99": percentile(queued, 99),
        "queued_max": queued[-1],
        "late_send_max": max(r["sent"] - r["scheduled"] for r in records),
        "return_p50": percentile(sorted(r["received"] - r["end"] for r in records), 50),
        "kept_limit": kept,
        "reached_limit": reached,
        "holds": kept and reached,
    }
    if probe:
        ordered = sorted(probe)
        summary |= {"overhead_p50": percentile(ordered, 50), "overhead_p99": percentile(ordered, 99)}
    return summary


def verdict(summary: dict[str, Any]) -> str:
    """``holds``, ``fails`` or ``clients late`` (not judged)."""
    if summary["late_send_max"] > LATE:
        return "clients late"
    return "holds" if summary["holds"] else "fails"


def draw(runs: dict[str, list[Record]], title: str, path: Path) -> Path:
    """Side by side, one panel per approach: a bar per request, queued part and processing part."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    rows = max(len(records) for records in runs.values())
    figure, panels = plt.subplots(1, len(runs), figsize=(6 * len(runs), 0.13 * rows + 1.8), sharex=True)
    for axes, (name, records) in zip(panels, runs.items(), strict=True):
        for row, r in enumerate(sorted(records, key=lambda r: (r["scheduled"], r["start"]))):
            axes.barh(row, r["start"] - r["sent"], left=r["sent"], color=COLOURS[0], height=0.8)
            axes.barh(row, r["end"] - r["start"], left=r["start"], color=COLOURS[1], height=0.8)
        axes.invert_yaxis()
        axes.yaxis.get_major_locator().set_params(integer=True)
        axes.set_title(name)
        axes.set_xlabel("seconds since the first burst")
    panels[0].set_ylabel("request")
    swatches = [Patch(color=colour) for colour in COLOURS]
    figure.legend(swatches, ["queued (flow control)", "processing"], loc="lower center", ncol=2)
    figure.suptitle(title)
    figure.tight_layout(rect=(0, 0.05, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path

"""The typed status report: its JSON form, reading older and newer reports, and its readers."""

from __future__ import annotations

import json

import pytest
from core_harness import Harness, client, worker

from generaldomo.cli.status_view import render
from generaldomo.io.hub.metrics import StatusCollector
from generaldomo.sansio.broker.accounts.kept import KeptAnswers
from generaldomo.sansio.broker.accounts.ledger import request_charge
from generaldomo.sansio.broker.report import StatusReport
from generaldomo.sansio.broker.services.stats import RECENT, nearest_rank, percentile, percentiles

# what the two requests of busy_report() cost the budgets (their ids, envelopes and overhead too)
ECHO = request_charge(len(b"echo") + 10, 1, b"r1", client(0).address)
OTHER = request_charge(len(b"other") + len(b"r2"), 1, b"r2", client(0).address)


def busy_report() -> StatusReport:
    h = Harness()
    h.core.set_endpoints([("router", "tcp://127.0.0.1:5555")])
    h.core.count("connections_refused", 2)
    h.ready(worker(1))
    h.request(client(0), b"r1", body=b"x" * 10)
    h.request(client(0), b"r2", b"other")
    return h.core.report(h.now + 1)


def test_json_round_trip_keeps_everything() -> None:
    report = busy_report()
    assert StatusReport.from_json(report.to_json()) == report
    data = json.loads(report.to_json())
    assert set(data) == {"broker", "services", "workers", "next"}
    assert data["broker"]["endpoints"] == [{"transport": "router", "endpoint": "tcp://127.0.0.1:5555"}]
    assert data["broker"]["counters"]["connections_refused"] == 2
    assert data["broker"]["queued_bytes"] == ECHO + OTHER
    assert {s["name"]: s["queued_bytes"] for s in data["services"]} == {"echo": ECHO, "other": OTHER}
    assert data["workers"][0]["state"] == "busy"


def test_reports_of_other_versions_are_read() -> None:
    older = {"broker": {"instance": "ab", "uptime": 1.0, "counters": {"requests": 3}}, "services": [{"name": "s"}]}
    report = StatusReport.from_dict({**older, "future": {"key": 1}})
    assert report.broker.counters == {"requests": 3} and report.broker.queued_bytes == 0
    assert report.service("s") is not None and report.service("s").queue_time.p50 is None
    assert "s" in render(older)


@pytest.mark.parametrize("text", ["[]", '{"broker": 3}', '{"services": [1]}', '{"workers": {"a": 1}}'])
def test_what_is_not_a_report_raises_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        StatusReport.from_json(text)


def test_metrics_read_the_typed_report() -> None:
    pytest.importorskip("prometheus_client")
    families = {f.name: f for f in StatusCollector(busy_report).collect()}
    queued = {s.labels["service"]: s.value for s in families["generaldomo_service_queued_bytes"].samples}
    assert queued == {"echo": ECHO, "other": OTHER}
    assert families["generaldomo_queued_bytes"].samples[0].value == ECHO + OTHER
    assert list(StatusCollector(lambda: None).collect()) == []


def test_kept_answers_expire_in_time_and_replace_older_ones() -> None:
    kept = KeptAnswers(seconds=5.0, budget=10_000)
    kept.keep("a", [b"one"], 0.0)
    kept.keep("b", [b"two"], 1.0)
    kept.keep("a", [b"three"], 2.0)
    assert kept.get("a", 4.0) == [b"three"] and len(kept) == 2
    kept.expire(6.0)
    assert kept.get("b", 6.0) is None and kept.get("a", 6.0) == [b"three"] and len(kept) == 1
    assert kept.get("a", 7.0) is None
    KeptAnswers(seconds=0.0, budget=10_000).keep("x", [b"y"], 0.0)  # keeping disabled: a no-op


def test_recent_completions_draw_a_timeline_and_stay_bounded() -> None:
    h = Harness()
    h.ready(worker(1))
    for n in range(40):
        h.request(client(0), b"r%d" % n)  # queued behind the one running
    for _ in range(40):
        h.advance(0.125)
        task_id = h.tasks_of(worker(1))[-1][0]
        h.answer(worker(1), task_id, b"done")
    report = h.core.report(h.now + 1)
    echo = report.service("echo")
    assert echo is not None and echo.completed == 40
    recent = echo.recent
    assert len(recent.ended) == len(recent.queued) == len(recent.served) == RECENT < 40
    assert recent.ended[-1] == 1.0 and recent.ended[0] == 1.0 + 0.125 * (RECENT - 1)  # oldest first
    assert recent.served == [0.125] * RECENT
    assert recent.queued[-1] == 0.125 * 39  # the last one waited for the 39 before it
    assert StatusReport.from_json(report.to_json()).service("echo") == echo


# ------------------------------------------------------------------------------ one nearest-rank percentile


@pytest.mark.parametrize(
    ("n", "p", "rank"),
    [(100, 50, 50), (100, 90, 90), (100, 99, 99), (100, 100, 100), (1000, 99.9, 999), (100, 7, 7), (1, 99, 1),
     (2, 50, 1), (2, 51, 2), (10, 50, 5), (10, 90, 9), (10, 99, 10), (3, 0.01, 1)],
)  # fmt: skip
def test_the_percentile_is_the_nearest_rank(n: int, p: float, rank: int) -> None:
    values = [float(v) for v in range(1, n + 1)]
    assert nearest_rank(values, p) == percentile(reversed(values), p) == rank
    assert percentile([], p) is None and percentiles([]) == (None, None, None)


def test_the_status_report_s_percentiles_are_nearest_rank() -> None:
    """Ten tasks served in 10, 20 ... 100 ms: the median is the fifth (the report said the sixth before)."""
    h = Harness()
    h.ready(worker(1))
    for n in range(1, 11):
        h.request(client(0), b"r%d" % n)
        h.advance(n / 100)
        h.answer(worker(1), h.tasks_of(worker(1))[-1][0], b"done")
    echo = h.core.report(h.now).service("echo")
    assert echo is not None and echo.completed == 10
    times = echo.service_time
    assert (times.p50, times.p90, times.p99) == (pytest.approx(0.05), pytest.approx(0.09), pytest.approx(0.10))

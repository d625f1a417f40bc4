"""The dashboard's frames (IO-free): bars from the reports' recent completions, bounds, counters and history."""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path

from core_harness import Harness, client, worker

from generaldomo.dashboard.frames import HISTORY, Framer, counter_group
from generaldomo.sansio.broker.flow.adaptive import AdaptiveLimits
from generaldomo.sansio.broker.report import PairReport, StatusReport
from generaldomo.sansio.broker.services.stats import RECENT

_ids = itertools.count()


def serve(h: Harness, tasks: int, seconds: float = 0.25) -> None:
    """``tasks`` requests answered one after the other by worker 1, each taking ``seconds``."""
    for _ in range(tasks):
        h.request(client(0), b"r%d" % next(_ids))
        h.advance(seconds)
        h.answer(worker(1), h.tasks_of(worker(1))[-1][0], b"done")


def test_each_completion_becomes_one_bar_once() -> None:
    h = Harness()
    h.ready(worker(1))
    framer = Framer()
    serve(h, 3)
    first = framer.frame(h.core.report(h.now), 1000.0)
    assert len(first["bars"]["echo"]) == 3 and first["bars_missed"] == {}
    arrived, dispatched, ended = first["bars"]["echo"][-1]
    assert ended == 1000.0 and dispatched == 1000.0 - 0.25 and arrived == dispatched  # no queue: dispatched at once
    assert framer.frame(h.core.report(h.now), 1001.0)["bars"] == {}  # nothing new: nothing drawn twice
    serve(h, 2)
    assert len(framer.frame(h.core.report(h.now), 1002.0)["bars"]["echo"]) == 2


def test_more_completions_than_the_report_lists_are_counted_as_missed() -> None:
    h = Harness()
    h.ready(worker(1))
    framer = Framer()
    serve(h, 1)
    framer.frame(h.core.report(h.now), 1000.0)
    serve(h, RECENT + 5, seconds=0.01)
    frame = framer.frame(h.core.report(h.now), 1001.0)
    assert len(frame["bars"]["echo"]) == RECENT and frame["bars_missed"] == {"echo": 5}


def test_a_new_broker_instance_starts_the_count_again() -> None:
    h = Harness()
    h.ready(worker(1))
    serve(h, 4)
    framer = Framer()
    framer.frame(h.core.report(h.now), 1000.0)
    data = json.loads(h.core.report(h.now).to_json())
    data["broker"]["instance"] = "another"
    data["services"][0]["completed"] = 1  # a restarted broker counts from the start
    data["services"][0]["recent"] = {key: values[-1:] for key, values in data["services"][0]["recent"].items()}
    frame = framer.frame(StatusReport.from_dict(data), 1001.0)
    assert len(frame["bars"]["echo"]) == 1


def test_frames_are_bounded_and_say_how_many_there_are() -> None:
    h = Harness()
    for n in range(5):
        h.ready(worker(n), b"service-%d" % n)
    frame = Framer(max_services=2, max_workers=3).frame(h.core.report(h.now), 1000.0)
    assert [s["name"] for s in frame["services"]] == ["service-0", "service-1"] and frame["services_total"] == 5
    assert len(frame["workers"]) == 3 and frame["workers_total"] == 5
    assert "recent" not in frame["services"][0]  # sent as bars
    json.dumps(frame)  # JSON-ready


def test_the_cap_is_the_lower_of_the_fixed_and_the_adaptive_one() -> None:
    h = Harness()
    h.ready(worker(1))
    h.core.set_flow("echo", h.now, concurrency=3)
    assert Framer().frame(h.core.report(h.now), 1.0)["services"][0]["cap"] == 3
    h.core.set_flow("echo", h.now, concurrency=3, adaptive=AdaptiveLimits(1, 2))
    assert Framer().frame(h.core.report(h.now), 1.0)["services"][0]["cap"] <= 2
    h.core.set_flow("echo", h.now)
    assert Framer().frame(h.core.report(h.now), 1.0)["services"][0]["cap"] is None


def test_history_keeps_what_a_late_page_needs_and_no_more() -> None:
    h = Harness()
    h.ready(worker(1))
    framer = Framer()
    for second in range(int(HISTORY) + 20):
        framer.frame(h.core.report(h.now), 1000.0 + second)
    history = framer.history()
    samples = history["samples"]["echo"]
    assert len(samples) == int(HISTORY) + 1 and samples[-1][0] == 1000.0 + HISTORY + 19
    assert history["last"]["at"] == 1000.0 + HISTORY + 19


def test_counters_are_grouped_for_the_page() -> None:
    assert counter_group("connections_refused") == counter_group("forbidden") == "refused"
    assert counter_group("duplicates_dropped") == counter_group("malformed") == "dropped"
    assert counter_group("completed") == counter_group("something_new") == "totals"


UPLOT = {  # uPlot 1.6.32 from the npm registry (see generaldomo/dashboard/__init__.py)
    "uPlot.iife.min.js": "19c8d4c6ad88929a79f4ae49d6f7161566dfd0ba3d15cc495e974f787eb78f1f",
    "uPlot.min.css": "df630c6a8d6f8eeaff264b50f73ce5b114f646ffd9a0bb74f049b0a00135fa04",
    "uPlot.LICENSE": "8f989229699b4fe2f1a0432d0e9edc338a8a911e250e2d1b01ecd770a5f5b1bd",
}


def test_the_shipped_chart_library_is_uplot_as_published() -> None:
    static = Path(__file__).resolve().parents[2] / "generaldomo" / "dashboard" / "static"
    for name, digest in UPLOT.items():
        assert hashlib.sha256((static / name).read_bytes()).hexdigest() == digest, name


def test_a_broker_pair_is_in_the_broker_frame_and_a_broker_alone_has_none() -> None:
    h = Harness()
    assert Framer().frame(h.core.report(h.now), 1000.0)["broker"]["pair"] is None
    h.core.set_pair(lambda now: PairReport(role="backup", state="passive", peer="tcp://b:1", peer_state="active",
                                           last_contact=0.5, changes=1, applied=7, replicated_requests=3,
                                           replicated_answers=2))  # fmt: skip
    report = StatusReport.from_json(h.core.report(h.now).to_json())  # as a status reader gets it
    assert Framer().frame(report, 1000.0)["broker"]["pair"] == {
        "role": "backup", "state": "passive", "peer": "tcp://b:1", "peer_state": "active", "last_contact": 0.5,
        "changes": 1, "sequence": 0, "applied": 7, "lag_records": None, "lag_seconds": None,
        "replicated_requests": 3, "replicated_answers": 2, "replicated_flows": 0,
    }  # fmt: skip

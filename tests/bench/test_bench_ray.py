"""The Ray part of the bench without Ray: its arithmetic on made-up records, and the article-style actor's pacing
as a plain object on threads (its lower bounds on start times follow from its logic, not from timing luck); part
``shared``'s API with a hidden limit and the actor in front of it, as plain objects."""

from __future__ import annotations

import struct
import threading
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(ROOT))
    from bench import ray_actor, ray_results

    return ray_actor, ray_results


def paced(rate: float, count: int, work: float) -> list[dict[str, float]]:
    """Records of requests all sent at 0 and started one every 1/rate s."""
    records = []
    for n in range(count):
        start = n / rate
        records.append({"sent": 0.0, "scheduled": 0.0, "released": start, "start": start, "end": start + work})
        records[-1]["received"] = start + work + 0.001
    return records


def test_percentiles_windows_and_overlaps(bench: Any) -> None:
    _, results = bench
    values = [float(n) for n in range(1, 101)]
    assert results.percentile(values, 50) == 50.0 and results.percentile(values, 99) == 99.0
    assert results.percentile([3.0], 99) == 3.0
    assert results.peak_window([0.0, 0.25, 0.5, 1.0, 1.25, 3.0]) == 3  # [0.25, 1.25)
    records = [{"start": 0.0, "end": 1.0}, {"start": 0.5, "end": 1.5}, {"start": 1.0, "end": 2.0}]
    assert results.peak_in_flight(records) == 2  # one ends as the third starts


def test_a_paced_run_holds_its_limit_and_a_bunched_one_does_not(bench: Any) -> None:
    _, results = bench
    steady = results.summarize(4.0, 10, paced(4.0, 20, 1.0), probe=[0.001, 0.002])
    assert steady["holds"] and steady["peak_in_flight"] == 4 and steady["peak_1s_starts"] == 4
    assert steady["achieved_rate"] == pytest.approx(4.0) and steady["overhead_p50"] == 0.001
    assert steady["queued_max"] == pytest.approx(19 / 4)
    bunched = results.summarize(4.0, 10, paced(16.0, 20, 1.0), probe=None)
    assert not bunched["kept_limit"] and not bunched["holds"] and bunched["peak_1s_starts"] == 16
    slow = results.summarize(4.0, 10, paced(2.0, 20, 1.0), probe=None)
    assert slow["kept_limit"] and not slow["reached_limit"]


def test_the_article_style_actor_gives_each_caller_its_own_turn(bench: Any) -> None:
    actor_module, _ = bench
    actor = actor_module.SimulatedService()
    actor.set_rate_limit(50.0)
    spans: list[tuple[float, float]] = []
    lock = threading.Lock()

    def call() -> None:
        span = actor.process(0.0)
        with lock:
            spans.append(span)

    threads = [threading.Thread(target=call) for _ in range(10)]
    before = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    starts = sorted(start for start, _ in spans)
    assert len(starts) == 10 and actor.pending == 0
    for n, start in enumerate(starts):  # the n-th turn comes n minimum intervals after the first
        assert start >= before + n * 0.02
    actor.set_rate_limit(None)
    assert actor.min_interval == 0.0
    with pytest.raises(NotImplementedError):
        actor_module.FlowControlledActorBase().process()
    began, ended = struct.unpack(actor_module.SPAN, actor_module.simulated(struct.pack(actor_module.WORK, 0.0)))
    assert began <= ended


def test_the_hidden_limit_api_refuses_beyond_its_limit_and_the_actor_passes_it_on(bench: Any) -> None:
    from bench.hidden_api import HiddenLimitAPI, LimitedAPIActor

    api = HiddenLimitAPI(3)
    began = time.monotonic()
    answers = [api.call() for _ in range(4)]
    if time.monotonic() - began < 1.0:  # all four within one second (else the window moved on: nothing to check)
        assert answers[:3] == [None, None, None]
        wait = answers[3]
        assert wait is not None and 0.0 < wait <= 1.0
        assert [ok for _, ok in api.record()] == [True, True, True, False]
    actor = LimitedAPIActor(2, 0.0)
    began = time.monotonic()
    passed = [actor.process() for _ in range(3)]  # no rate set: the actor lets each through at once
    if time.monotonic() - began < 1.0:
        assert passed == [True, True, False]  # the 429 comes back to the caller, to try again
        assert [ok for _, ok in actor.calls()] == [True, True, False]
    assert actor.pending == 0

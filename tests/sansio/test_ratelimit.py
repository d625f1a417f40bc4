"""The log limiter (generaldomo.sansio.lograte): a few lines per interval per key, everything else counted."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from generaldomo.sansio.lograte import LogLimiter

events = st.lists(st.tuples(st.sampled_from("abc"), st.floats(min_value=0, max_value=5)), max_size=200)


@given(events, st.integers(min_value=1, max_value=4), st.sampled_from([0.5, 1.0, 3.0]))
def test_few_lines_per_interval_and_every_event_accounted_for(steps, burst, interval) -> None:
    limiter = LogLimiter(interval=interval, burst=burst)
    now = 0.0
    allowed: dict[str, list[float]] = {}
    reported = 0
    for key, step in steps:
        now += step
        if limiter.allow(key, now):
            allowed.setdefault(key, []).append(now)
            reported += limiter.suppressed(key)
    for times in allowed.values():
        for start in times:  # fixed windows: at most two windows' worth in any span of one interval
            assert sum(1 for t in times if start <= t < start + interval) <= 2 * burst
    suppressed_now = sum(w.suppressed for w in limiter._windows.values())
    assert sum(map(len, allowed.values())) + reported + suppressed_now == len(steps)


def test_first_event_of_each_key_is_logged_and_the_next_line_counts_the_rest() -> None:
    limiter = LogLimiter(interval=10.0)
    assert limiter.allow("a", 0.0) and limiter.allow("b", 0.0)
    assert not any(limiter.allow("a", t) for t in (1.0, 2.0, 3.0))
    assert limiter.allow("a", 10.0) and limiter.suppressed("a") == 3
    assert limiter.allow("b", 10.0) and limiter.suppressed("b") == 0


def test_keys_are_bounded() -> None:
    limiter = LogLimiter(interval=10.0, max_keys=8)
    logged = sum(limiter.allow(("peer", n), 1.0) for n in range(1000))
    assert len(limiter._windows) <= 9 and logged == 8 + 1  # beyond 8 keys, all share one
    assert limiter.allow(("peer", 2000), 20.0)  # stale keys are forgotten to make room

"""Expensive management requests paced per connection (generaldomo.sansio.broker.accounts.pacing): beyond a connection's
work per second they wait their turn, beyond its line they get 429 with a retry-after; the lines go in turn; the
broker's bucket bounds the work of any moment; the tables stay bounded whatever the peers send."""

from __future__ import annotations

import json

from core_harness import Harness, client
from hypothesis import given
from hypothesis import strategies as st

from generaldomo.sansio.broker.accounts import pacing
from generaldomo.sansio.broker.accounts.pacing import Pacer
from generaldomo.sansio.broker.core import Peer
from generaldomo.sansio.wire import protocol


def status_request(rid: bytes, query: dict[str, object] | None = None) -> list[bytes]:
    return protocol.gdp_request(rid, b"mmi.status", [json.dumps(query).encode()] if query else [])


def answered(h: Harness, peer: Peer) -> list[tuple[bytes, bytes]]:
    """(request id, status) of the answers ``peer`` got so far, taken from its inbox."""
    got = [protocol.parse_client_reply(frames) for frames in h.inbox.pop(peer, [])]
    return [(reply[0], reply[1]) for reply in got if reply is not None and reply[1] is not None]


def crowded(services: int = 300) -> Harness:
    h = Harness(connection_services=10_000)
    for n in range(services):
        h.request(client(99), b"q%d" % n, b"service-%04d-" % n + b"x" * 200)
    return h


def test_pages_beyond_the_connection_budget_wait_then_go_in_turn() -> None:
    h = crowded()
    for n in range(20):
        h.feed(client(0), status_request(b"p%d" % n, {"limit": 1000}))
    now = answered(h, client(0))
    pages = [rid for rid, status in now if status == protocol.OK]
    refused = [rid for rid, status in now if status == protocol.OVER_BUDGET]
    assert 0 < len(pages) < 20 and h.core.counters["paced"] == pacing.LINE
    assert len(pages) + pacing.LINE + len(refused) == 20 and h.core.counters["paced_refused"] == len(refused)
    for _ in range(600):  # time passes: the waiting ones are answered, in order, within the work per second
        if not h.core._clients.pacer.waiting:
            break
        h.advance(0.1)
    later = answered(h, client(0))
    assert [status for _, status in later] == [protocol.OK] * pacing.LINE
    assert [int(rid[1:]) for rid, _ in later] == sorted(int(rid[1:]) for rid, _ in later)
    assert h.now < 60, "the waiting pages went within their work per second"


def test_a_refused_page_says_when_to_ask_again() -> None:
    h = crowded()
    for n in range(40):
        h.feed(client(0), status_request(b"p%d" % n, {"limit": 1000}))
    refused = [frames for frames in h.inbox[client(0)] if (r := protocol.parse_client_reply(frames)) and r[1] == b"429"]
    assert len(refused) == h.core.counters["paced_refused"] > 0
    body = protocol.parse_client_reply(refused[0])[3]  # type: ignore[index]
    later = protocol.parse_retry_after(body)
    assert later is not None and 0 < later < 10


def test_another_connection_is_not_held_behind_the_first_ones_line() -> None:
    h = crowded()
    for n in range(8):
        h.feed(client(0), status_request(b"p%d" % n, {"limit": 1000}))
    assert h.core._clients.pacer.waiting > 0
    h.advance(1.0)  # the broker's bucket refills faster than the connection's
    answered(h, client(0))
    h.now += 0.001  # the loop's next turn
    h.feed(client(1), status_request(b"other"))
    assert answered(h, client(1)) == [(b"other", protocol.OK)]


def test_one_turn_starts_expensive_work_up_to_its_budget_and_the_next_turns_the_rest() -> None:
    h = crowded()
    for n in range(10):  # ten connections, one page each, in one turn of the loop (one clock reading)
        h.feed(client(n), status_request(b"p", {"limit": 1000}))
    now = sum(len(answered(h, client(n))) for n in range(10))
    assert 1 <= now < 10 and h.core._clients.pacer.work - h.core._clients.pacer._turn_work == 0
    for _ in range(100):
        if not h.core._clients.pacer.waiting:
            break
        before = h.core._clients.pacer.work
        h.advance(0.01)
        assert h.core._clients.pacer.work - before < pacing.TURN_WORK + 128 * 1024  # its budget, and one page beyond
    assert now + sum(len(answered(h, client(n))) for n in range(10)) == 10


def test_small_requests_are_not_paced() -> None:
    h = Harness()
    for n in range(2000):
        h.feed(client(0), protocol.gdp_request(b"s%d" % n, b"mmi.service", [b"echo"]))
    assert len(answered(h, client(0))) == 2000 and h.core.counters["paced"] == 0


@given(
    script=st.lists(st.tuples(st.integers(0, 50), st.integers(0, 300_000), st.floats(0, 0.5)), min_size=1, max_size=300)
)
def test_the_pacer_stays_bounded_and_each_line_in_order(script: list[tuple[int, int, float]]) -> None:
    pacer: Pacer[tuple[int, int]] = Pacer(buckets=16, line=3, waiting_bytes=10_000)
    now, sent, served = 0.0, 0, []
    for key, cost, wait in script:
        now += wait
        if pacer.may_go(key, now):
            pacer.charge(key, cost, now)
        else:
            pacer.wait(key, (key, sent), 1000, now)
            sent += 1
        for got_key, item in pacer.ready(now):
            served.append(item)
            pacer.charge(got_key, cost, now)
        assert pacer.waiting <= 10 and pacer.bytes <= 10_000 and len(pacer._buckets) <= 16
        assert all(len(line) <= 3 for line in pacer._lines.values())
    for key in {k for k, _ in served}:
        mine = [n for k, n in served if k == key]
        assert mine == sorted(mine)

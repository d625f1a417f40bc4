"""The ledger (generaldomo.sansio.broker.accounts.ledger) alone, and the broker core's use of it: every holding charged
to the connection it came from (a forged hop is not a new connection), the budgets and caps refuse what does not
fit, everything is released when it goes, and the overhead constants are not below what CPython spends."""

from __future__ import annotations

import gc
import logging
import tracemalloc
from collections.abc import Callable

import pytest
from core_harness import Harness, client, worker
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from generaldomo.sansio.broker.accounts.ledger import ASIDE, MARGIN, RESERVE, Holding, Ledger, Refusal, connection
from generaldomo.sansio.broker.core import Peer
from generaldomo.sansio.broker.core.clients import ECHO_BYTES
from generaldomo.sansio.broker.core.workers import BEATS_PER_TICK
from generaldomo.sansio.wire import limits, protocol
from generaldomo.sansio.wire.events import Dialect

MIB = 1024 * 1024
KINDS = tuple(Holding)


class LedgerMachine(RuleBasedStateMachine):
    """Random charges and releases: the totals add up, admit() tells the truth, empty accounts go."""

    def __init__(self) -> None:
        super().__init__()
        self.ledger = Ledger(
            total=4 * RESERVE, per_connection=2 * RESERVE, caps={Holding.TASK: 3, Holding.WORKER: None}
        )
        self.charges: list[tuple[tuple[int, bytes], Holding, int]] = []

    @rule(who=st.integers(0, 5), kind=st.sampled_from(KINDS), size=st.integers(0, RESERVE))
    def charge_if_admitted(self, who: int, kind: Holding, size: int) -> None:
        where = (0, b"c%d" % who)
        account = self.ledger.account(where)
        refusal = self.ledger.admit(where, kind, size)
        kept = sum(self.ledger.by_kind[kind] for kind in ASIDE)  # kept answers, dead letters: budgets of their own
        total, held = self.ledger.total - kept + size, account.bytes - account.kept + size
        if kind is Holding.TASK and account.count(kind) >= 3:
            assert refusal is Refusal.CONNECTION_COUNT
        elif total > 4 * RESERVE and (held > RESERVE or total > 4 * RESERVE * (1 + MARGIN)):
            assert refusal is Refusal.TOTAL_BYTES
        elif held > 2 * RESERVE:
            assert refusal is Refusal.CONNECTION_BYTES
        else:
            assert refusal is None
        if refusal is None:
            self.ledger.charge(where, kind, size)
            self.charges.append((where, kind, size))

    @rule(who=st.integers(0, 5), size=st.integers(0, 2 * RESERVE))
    def charge_anyway(self, who: int, size: int) -> None:
        self.ledger.charge((0, b"c%d" % who), Holding.UNSENT, size)  # what the IO layer charges, whatever the budgets
        self.charges.append(((0, b"c%d" % who), Holding.UNSENT, size))

    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        if self.charges:
            where, kind, size = self.charges.pop(data.draw(st.integers(0, len(self.charges) - 1)))
            self.ledger.release(where, kind, size)

    @invariant()
    def adds_up(self) -> None:
        ledger = self.ledger
        assert ledger.total == sum(size for _, _, size in self.charges)
        assert len(ledger) == len({where for where, _, _ in self.charges})
        for kind in KINDS:
            assert ledger.by_kind[kind] == sum(size for _, k, size in self.charges if k is kind)
        for where in {where for where, _, _ in self.charges}:
            mine = [(k, size) for w, k, size in self.charges if w == where]
            assert ledger.held(where) == sum(size for _, size in mine)
            assert all(ledger.account(where).count(k) == sum(1 for x, _ in mine if x is k) for k in KINDS)
            assert ledger.account(where).kept == sum(size for k, size in mine if k in ASIDE)
        top = ledger.top(2)
        assert [account.bytes for _, account in top] == sorted(
            (ledger.held(w) for w in {w for w, _, _ in self.charges}), reverse=True
        )[:2]


TestLedger = LedgerMachine.TestCase


def test_a_connection_is_the_link_and_the_first_hop() -> None:
    assert connection(0, b"id") == (0, b"id") and connection(1, 7) == (1, 7)
    assert connection(0, (b"proxy", b"claimed-1")) == connection(0, (b"proxy", b"claimed-2")) == (0, b"proxy")
    assert connection(0, b"proxy") != connection(1, b"proxy")


# --------------------------------------------------------------------------------------------- the core


def forged(n: int, hop: bytes = b"") -> Peer:
    """One of many peers a single connection claims to speak for, through envelope hops."""
    return Peer(0, (b"attacker", b"%s%06d" % (hop, n)))


def test_forged_hops_are_charged_to_one_connection_with_their_bytes() -> None:
    h = Harness(connection_bytes=2 * MIB, held_bytes=64 * MIB)
    hop = b"h" * 64 * 1024
    for n in range(100):
        h.feed(forged(n, hop), protocol.gdp_request(b"r%d" % n, b"echo", [b"x"]))
    account = h.core.ledger.account((0, b"attacker"))
    accepted = account.count(Holding.TASK)
    assert 0 < accepted < 40  # 64 KiB hops, counted in the task and its client's entry
    assert account.bytes <= 2 * MIB and h.core.counters["refused_connection_bytes"] == 100 - accepted
    assert len(h.core.ledger) == 1  # one connection, whatever the hops say
    h.request(client(1), b"honest")  # another connection still gets in
    assert len(h.core.tasks) == accepted + 1


def test_mdp01_requests_with_large_hops_are_charged_though_they_have_no_id() -> None:
    h = Harness(connection_bytes=4 * MIB)
    hop = b"h" * 1024 * 1024
    for n in range(8):
        h.feed(forged(n, hop), [b"", b"MDPC01", b"nobody", b"x"])
    assert len(h.core.tasks) == 3 and h.core.ledger.held((0, b"attacker")) <= 4 * MIB
    assert [frames[3] for frames in h.inbox[forged(7, hop)]] == [protocol.OVER_BUDGET]


def test_the_total_budget_holds_across_connections_and_leaves_room_for_small_ones() -> None:
    h = Harness(held_bytes=4 * MIB, connection_bytes=None, queue_bytes=None, service_queue_bytes=None)
    for n in range(4):
        for k in range(50):
            h.request(client(n), b"r%d-%d" % (n, k), body=b"x" * 32 * 1024)
    assert h.core.ledger.total <= (1 + MARGIN) * 4 * MIB and h.core.counters["refused_total_bytes"] > 50
    refused = h.replies_of(client(3))
    assert {status for _, status, _ in refused} == {b"429"} and 48 <= len(refused) < 50  # the reserve took one
    assert b"held_bytes" in h.replies_of(client(3))[-1][2][0]
    for n in range(100, 120):  # connections that hold little still get in, within a margin of the budget
        h.request(client(n), b"small", body=b"x" * 1024)
    assert not any(h.replies_of(client(n)) for n in range(100, 120))
    assert 4 * MIB < h.core.ledger.total <= (1 + MARGIN) * 4 * MIB


def test_outstanding_requests_per_connection_are_capped() -> None:
    h = Harness(connection_requests=5)
    for n in range(8):
        h.request(client(0), b"r%d" % n)
    assert len(h.core.tasks) == 5 and h.core.counters["refused_connection_tasks"] == 3
    assert b"5 tasks" in h.replies_of(client(0))[0][2][0]
    h.ready(worker(1))
    h.answer(worker(1), h.tasks_of(worker(1))[0][0], b"done")  # an answer makes room
    h.request(client(0), b"more")
    assert h.replies_of(client(0))[-1][1] == b"200" and len(h.core.tasks) == 5


def test_services_a_connection_makes_are_capped_and_forgotten_when_idle() -> None:
    h = Harness(connection_services=10, service_idle=1.0, heartbeat_interval=0.5)
    for n in range(15):
        h.feed(forged(n), protocol.gdp_request(b"r%d" % n, b"svc-%d" % n, [b"x"]))
    assert len(list(h.core.resolver.services())) == 10  # the refused ones are not kept either
    assert h.core.counters["refused_connection_services"] == 5
    h.request(client(1), b"mine", b"svc-mine")  # another connection may still make one
    assert h.core.resolver.find(b"svc-mine") is not None
    for n in range(15):
        h.feed(forged(n), protocol.gdp_cancel(b"r%d" % n))
    h.feed(client(1), protocol.gdp_cancel(b"mine"))
    for _ in range(6):
        h.advance(0.5)
    assert not list(h.core.resolver.services()) and h.core.counters["services_forgotten"] == 11
    assert (
        h.core.ledger.by_kind[Holding.SERVICE] == 0
        and h.core.ledger.account((0, b"attacker")).count(Holding.SERVICE) == 0
    )


def test_workers_a_connection_registers_are_capped_and_released() -> None:
    h = Harness(max_workers=40, connection_worker_share=0.5)
    for n in range(30):
        h.feed(forged(n), protocol.gdp_ready(b"echo"))
    assert len(h.core.workers) == 20 and h.core.counters["refused_connection_workers"] == 10
    told = [frames for n in range(20, 30) for frames in h.inbox[forged(n)]]
    assert told == [protocol.worker_command(Dialect.GDP, protocol.DISCONNECT)] * 10
    for n in range(20):
        h.ready(worker(n))
    assert len(h.core.workers) == 40  # the table's own limit, reached by many connections
    for n in range(20):
        h.feed(forged(n), protocol.worker_command(Dialect.GDP, protocol.DISCONNECT))
    assert h.core.ledger.account((0, b"attacker")).count(Holding.WORKER) == 0


def test_the_worker_share_is_at_most_half() -> None:
    from generaldomo.sansio.config.settings import Settings

    with pytest.raises(ValueError):
        Settings(connection_worker_share=0.6)
    assert Settings(max_workers=100_000).connection_workers == 25_000


def test_forged_hops_are_one_peer_for_the_log_limiter(caplog: pytest.LogCaptureFixture) -> None:
    h = Harness()
    with caplog.at_level(logging.WARNING, "generaldomo.sansio.broker.core"):
        for n in range(500):
            h.feed(forged(n), [b"GDPC01", b"\x77"])
    assert h.core.counters["malformed"] == 500
    assert len([r for r in caplog.records if "malformed" in r.getMessage()]) == 1


def test_a_heartbeat_answer_echoes_a_bounded_number_of_unknown_ids() -> None:
    h = Harness()
    longest = limits.REQUEST_ID.high
    h.feed(client(0), protocol.gdp_client_heartbeat(None, [b"%0*d" % (longest + 1, 0)]))
    assert not h.inbox[client(0)] and h.core.counters["malformed"] == 1  # an id beyond its bound: no answer
    ids = [b"%0*d" % (longest, n) for n in range(protocol.MAX_REASKED)]  # the most one HEARTBEAT may ask
    h.feed(client(0), protocol.gdp_client_heartbeat(None, ids))
    echoed = h.inbox[client(0)][-1][3:]
    assert echoed == ids[: len(echoed)] and sum(map(len, echoed)) <= ECHO_BYTES
    assert h.core.counters["echoes_refused"] == len(ids) - len(echoed)


def test_a_connection_over_its_budget_gets_no_echo_and_no_resend() -> None:
    h = Harness(connection_bytes=64 * 1024)
    h.ready(worker(1))
    h.request(client(0), b"r1")
    h.answer(worker(1), h.tasks_of(worker(1))[0][0], b"done")
    where = connection(client(0).link, client(0).address)
    h.core.ledger.charge(where, Holding.UNSENT, 100 * 1024)  # what the IO layer charges for unread replies
    before = len(h.inbox[client(0)])
    h.feed(client(0), protocol.gdp_client_heartbeat(None, [b"r1", b"unknown"]))
    assert h.inbox[client(0)][before:] == [[protocol.GDP_CLIENT, b"\x04", b"test"]]  # no resend, no echo
    assert h.core.counters["resends_refused"] == 1 and h.core.counters["echoes_refused"] == 1
    h.core.ledger.release(where, Holding.UNSENT, 100 * 1024)  # it read them
    h.feed(client(0), protocol.gdp_client_heartbeat(None, [b"r1", b"unknown"]))
    assert h.inbox[client(0)][-1][3:] == [b"unknown"] and h.inbox[client(0)][-2][2] == b"r1"


def test_flow_limits_peers_set_are_charged_and_forgotten_when_idle_the_operators_kept() -> None:
    h = Harness(service_idle=1.0, heartbeat_interval=0.5, connection_services=3)
    h.core.set_flow("pinned", h.now, rate=5.0)  # the operator's (the API, the CLI's --flow)
    for n in range(5):
        h.feed(client(0), protocol.gdp_request(b"f%d" % n, b"mmi.flow", [b"svc-%d" % n, b'{"rate": 2}']))
    statuses = [status for _, status, _ in h.replies_of(client(0))]
    assert statuses == [b"200"] * 3 + [b"429"] * 2 and h.core.counters["refused_connection_flows"] == 2
    assert h.core.ledger.by_kind[Holding.FLOW] > 0
    h.feed(client(0), protocol.gdp_request(b"busy", b"svc-0", [b"x"]))  # a busy service keeps its limits
    for _ in range(6):
        h.advance(0.5)
    assert set(h.core.flows) == {"pinned", "svc-0"} and h.core.counters["flows_forgotten"] == 2
    h.feed(client(0), protocol.gdp_cancel(b"busy"))
    for _ in range(8):
        h.advance(0.5)
    assert set(h.core.flows) == {"pinned"} and h.core.ledger.by_kind[Holding.FLOW] == 0


def test_the_heartbeat_sweep_does_a_bounded_share_of_a_long_table_per_tick() -> None:
    h = Harness(heartbeat_interval=1.0, max_workers=None)
    count = 3 * BEATS_PER_TICK + 10
    for n in range(count):
        h.ready(worker(n))
    h.now += 1.0
    beats = [len(h.core.tick(h.now)) for _ in range(5)]
    assert beats == [BEATS_PER_TICK] * 3 + [10, 0]
    assert h.core.deadline() == pytest.approx(h.now + 1.0, abs=0.01)
    h.now += 10.0  # every one of them silent past its expiry
    expired = 0
    while h.core.workers:
        h.core.tick(h.now)
        expired += 1
    assert expired == 4 and h.core.counters["workers_expired"] == count


def test_a_silent_worker_is_never_handed_a_task_before_its_turn_to_expire() -> None:
    h = Harness(heartbeat_interval=1.0)
    h.ready(worker(1))
    h.now += 5.0  # past its expiry, its heartbeat turn not yet taken
    h.ready(worker(2))
    h.request(client(0), b"r1")
    assert not h.tasks_of(worker(1)) and len(h.tasks_of(worker(2))) == 1
    assert h.core.counters["workers_expired"] == 1


def test_a_service_the_operator_keeps_is_charged_to_nobody_once_idle() -> None:
    """Found by the fuzzer: a service kept for the operator's flow limits stayed charged to the peer whose
    request made it, for ever (a slot of its cap and bytes of its budget, after it had gone)."""
    h = Harness(service_idle=1.0, heartbeat_interval=0.5, connection_services=1)
    h.core.set_flow("pinned", h.now, rate=5.0)
    h.feed(client(0), protocol.gdp_request(b"r0", b"pinned", [b"x"]))
    h.feed(client(0), protocol.gdp_cancel(b"r0"))
    assert h.core.ledger.account(connection(0, b"client-0")).count(Holding.SERVICE) == 1
    for _ in range(6):
        h.advance(0.5)
    assert h.core.resolver.find(b"pinned") is not None and h.core.counters["services_forgotten"] == 0  # kept
    assert h.core.ledger.by_kind[Holding.SERVICE] == 0
    assert h.core.ledger.account(connection(0, b"client-0")).count(Holding.SERVICE) == 0
    h.feed(client(0), protocol.gdp_request(b"r1", b"other", [b"x"]))  # its cap of one service is free again
    h.feed(client(1), protocol.gdp_request(b"r2", b"pinned", [b"x"]))  # whoever uses it next is charged for it
    assert h.core.counters["refused_connection_services"] == 0
    assert h.core.ledger.account(connection(0, b"client-1")).count(Holding.SERVICE) == 1


def test_everything_is_released_when_everybody_has_gone() -> None:
    h = Harness(heartbeat_interval=0.5, keep_answers=2.0, service_idle=1.0, client_expiry=1.5, queue_timeout=5.0)
    for n in range(5):
        h.ready(forged(n))
    for n in range(20):
        h.feed(forged(n, b"c"), protocol.gdp_request(b"r%d" % n, b"svc-%d" % (n % 3), [b"x" * n]))
        h.feed(client(n), [b"", b"MDPC01", b"echo", b"mdp"])
    for n in range(5):
        for task_id, _, body in h.tasks_of(forged(n)):
            h.answer(forged(n), task_id, body[0] if body else b"")
    assert h.core.ledger.total > 0
    h.now += 100.0
    while h.core.deadline() is not None and h.core.deadline() <= h.now:
        h.core.tick(h.now)
    for _ in range(6):  # the answers that expiry gave go after keep_answers, and then their clients
        h.advance(0.5)
    assert not h.core.workers and not h.core.tasks
    assert h.core.ledger.total == 0 and len(h.core.ledger) == 0, h.core.ledger.by_kind


# ------------------------------------------------------------------------------- the overhead constants


def held_by(h: Harness, act: Callable[[], None]) -> tuple[int, int]:
    """(bytes CPython holds after ``act``, bytes the ledger charged for it)."""
    gc.collect()
    tracemalloc.start()
    try:
        before, charged = tracemalloc.get_traced_memory()[0], h.core.ledger.total
        act()
        h.inbox.clear()  # the harness's own copy of what was sent is not the broker's
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before, h.core.ledger.total - charged
    finally:
        tracemalloc.stop()


def test_tasks_cost_no_more_than_they_are_charged() -> None:
    h = Harness(
        queue_bytes=None, service_queue_bytes=None, held_bytes=None, connection_bytes=None, connection_requests=None
    )
    h.request(client(0), b"warm-up")

    def requests() -> None:
        for n in range(5000):
            peer = Peer(0, (b"proxy-%d" % (n % 7), b"hop-a-%d" % n, b"hop-b-%d" % n))
            h.core.receive(peer, protocol.gdp_request(b"%016d" % n, b"echo", [b"x" * (n % 50), b"y"]), h.now)

    used, charged = held_by(h, requests)
    assert 0 < used <= charged, f"5000 tasks hold {used} bytes but were charged {charged}"


def test_services_with_full_statistics_cost_no_more_than_they_are_charged() -> None:
    h = Harness(keep_answers=0.0, service_idle=None, held_bytes=None, connection_bytes=None, connection_services=None)

    def services() -> None:
        for n in range(200):
            name = b"service-%d" % n
            h.ready(worker(n), name)
            for _ in range(60 if n else 1100):  # one service's samples full, the others' partly
                h.request(client(0), b"r", name, b"x")
                h.answer(worker(n), h.tasks_of(worker(n))[-1][0], b"y", name)
                h.inbox.clear()
            h.feed(worker(n), protocol.worker_command(Dialect.GDP, protocol.DISCONNECT))

    used, charged = held_by(h, services)
    assert 0 < used <= charged, f"200 services hold {used} bytes but were charged {charged}"


def test_workers_cost_no_more_than_they_are_charged() -> None:
    h = Harness(max_workers=None, held_bytes=None, connection_bytes=None)
    h.ready(worker(0))

    def workers() -> None:
        for n in range(5000):
            peer = Peer(0, (b"proxy", b"worker-%d" % n))
            info = protocol.worker_info(f"host-{n}.example.org", 1000 + n)
            h.core.receive(peer, protocol.gdp_ready(b"echo", None, info), h.now)

    used, charged = held_by(h, workers)
    assert 0 < used <= charged, f"5000 workers hold {used} bytes but were charged {charged}"


def test_kept_answers_and_flow_entries_cost_no_more_than_they_are_charged() -> None:
    h = Harness(keep_bytes=64 * MIB, held_bytes=None, connection_bytes=None, connection_services=None)
    h.ready(worker(1))
    h.request(client(0), b"warm-up")
    h.answer(worker(1), h.tasks_of(worker(1))[-1][0], b"y")

    def answers() -> None:
        for n in range(3000):
            h.feed(client(n % 5), protocol.gdp_request(b"%016d" % n, b"echo", [b"x" * (n % 30)]))
            h.answer(worker(1), h.tasks_of(worker(1))[-1][0], b"y" * (n % 40))
            h.inbox.clear()
        for n in range(3000):
            h.feed(client(0), protocol.gdp_request(b"f", b"mmi.flow", [b"flow-%d" % n, b'{"concurrency": 4}']))
            h.inbox.clear()

    used, charged = held_by(h, answers)
    assert 0 < used <= charged, f"3000 answers and flow entries hold {used} bytes but were charged {charged}"

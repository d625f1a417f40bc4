"""Every queued request has an owner whose departure or silence frees it, and one small-request rule for every
budget: requests without a request id (every MDP request) wait at most ``anonymous_queue_timeout``, one
connection's requests hold at most ``connection_queue_share`` of ``queue_bytes``, and a connection with one
small request gets in when the queue budgets are full, as it does when the ledger's total is. Driven with frames
and a fake clock."""

from __future__ import annotations

from core_harness import Harness, client, worker

from generaldomo.sansio.broker.accounts.ledger import MARGIN, RESERVE
from generaldomo.sansio.wire import protocol

KIB = 1024
MIB = 1024 * KIB


def mdp(service: bytes, body: bytes) -> list[bytes]:
    return protocol.mdp_client_request(service, [body])


def statuses(h: Harness, n: int) -> list[bytes]:
    """The status of each MDP reply client ``n`` got (an MDP reply's status is its fourth frame)."""
    return [frames[3] for frames in h.inbox[client(n)]]


def test_abandoned_mdp_requests_do_not_lock_out_every_client() -> None:
    """Two connections fill the queue budget with MDP requests for services nobody serves, then leave (the
    broker is not told): a small honest request still gets in, and the abandoned ones go after
    ``anonymous_queue_timeout``."""
    h = Harness(heartbeat_interval=1.0, max_message=None, queue_bytes=64 * MIB, service_queue_bytes=None)
    for n in (0, 1):
        for k in range(3):  # 2 x 31 MiB plus a top-up, as the finding
            h.feed(client(n), mdp(b"nobody-%d-%d" % (n, k), b"x" * (31 * MIB if k < 2 else MIB)))
    report = h.core.report(h.now).broker
    assert report.queued_bytes <= 64 * MIB and report.queued == 2  # each connection: at most half the budget
    h.ready(worker(1))
    h.request(client(2), b"honest", body=b"x" * 16)  # one small request: within the budget's margin
    h.answer(worker(1), h.tasks_of(worker(1))[-1][0], b"X" * 16)
    assert h.replies_of(client(2)) == [(b"honest", b"200", (b"X" * 16,))]
    default = h.core.settings.anonymous_queue_timeout
    assert default == 60.0
    for _ in range(int(default) + 2):
        h.advance(1.0)
    assert h.core.report(h.now).broker.queued_bytes == 0 and not h.core.tasks
    assert statuses(h, 0) == statuses(h, 1) == [b"429", b"429", b"504"]


def test_requests_with_an_id_keep_waiting_past_the_anonymous_timeout_while_their_client_is_heard() -> None:
    h = Harness(heartbeat_interval=1.0, anonymous_queue_timeout=2.0)
    h.request(client(0), b"kept")
    h.feed(client(1), mdp(b"echo", b"mdp"))
    for _ in range(5):
        h.advance(1.0)
        h.feed(client(0), [protocol.GDP_CLIENT, b"\x04"])  # heard: its request waits on
    assert [t.request_id for t in h.core.tasks.values()] == [b"kept"]
    assert statuses(h, 1) == [b"504"]


def test_a_shorter_queue_timeout_holds_for_anonymous_requests_too() -> None:
    h = Harness(heartbeat_interval=1.0, queue_timeout=2.0, anonymous_queue_timeout=None)
    h.feed(client(1), mdp(b"echo", b"mdp"))
    for _ in range(4):
        h.advance(1.0)
    assert not h.core.tasks and statuses(h, 1) == [b"504"]


def test_one_connection_holds_at_most_its_share_of_the_queue_budget() -> None:
    h = Harness(queue_bytes=8 * MIB, service_queue_bytes=None, connection_queue_share=0.25)
    assert h.core.settings.connection_queue_bytes == 2 * MIB
    for _ in range(8):
        h.feed(client(0), mdp(b"nobody", b"x" * (MIB // 2)))
    assert statuses(h, 0)[0] == b"429" and len(statuses(h, 0)) == 5  # 3 of half a MiB fit within 2 MiB
    assert b"connection queue budget" in h.inbox[client(0)][0][4]
    assert h.core.report(h.now).broker.settings.connection_queue_bytes == 2 * MIB
    h.feed(client(1), mdp(b"nobody", b"x" * (MIB // 2)))  # another connection has its own share
    assert statuses(h, 1) == []


def test_the_small_request_rule_is_the_same_for_the_queue_budgets_as_for_the_ledger() -> None:
    """The ledger's total lets a connection holding at most RESERVE bytes in at its limit, within a MARGIN; the
    queue budgets do the same (they refused it)."""
    budget = 4 * MIB
    for name in ("queue_bytes", "held_bytes"):
        others = {"queue_bytes": None, "service_queue_bytes": None, "held_bytes": None, "connection_bytes": None}
        h = Harness(**{**others, name: budget, "max_message": None})  # type: ignore[arg-type]
        for n in range(4):
            h.feed(client(n), mdp(b"nobody", b"x" * (budget // 4 - 16 * KIB)))
        assert all(statuses(h, n) == [] for n in range(4)), name
        for _ in range(200):  # then to the byte: until a top-up is refused
            h.feed(client(4), mdp(b"nobody", b"x" * (8 * KIB)))
            if statuses(h, 4):
                break
        assert statuses(h, 4) == [b"429"], name
        h.feed(client(5), mdp(b"nobody", b"x" * (RESERVE // 2)))  # small: in, beyond the budget
        h.feed(client(6), mdp(b"nobody", b"x" * (2 * RESERVE)))  # not small: refused
        assert statuses(h, 5) == [] and statuses(h, 6) == [b"429"], name
        for n in range(7, 9):  # never beyond the margin
            for _ in range(int(budget * MARGIN // (RESERVE // 2)) + 2):
                h.feed(client(n), mdp(b"nobody", b"x" * (RESERVE // 4)))
        assert b"429" in statuses(h, 8), name
        assert h.core.report(h.now).broker.queued_bytes <= budget * (1 + MARGIN), name

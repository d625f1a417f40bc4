"""The broker pair's replication, sans IO: the active core's journal records, shipped through a link that drops
messages, folded by the passive with snapshots to fill the gaps, leave the passive holding what the active holds
(a stateful test), and a core restored from the passive's fold holds the active core's requests; hostile messages
are counted and dropped, never a crash."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule
from test_journal import CLIENT, CoreTraffic, held, new_core, records

from generaldomo.sansio.broker.flow.flow import FlowLimits
from generaldomo.sansio.broker.journal import Finished, Live, encode_all
from generaldomo.sansio.broker.mmi import FlowChange
from generaldomo.sansio.broker.replication import ACK, BEGIN, END, HEADER, PART, RECORDS, Replica, Shipper
from generaldomo.sansio.wire import protocol

ORIGIN = b"origin01"
BUDGET = 1 << 30


def same(one: Live, other: Live) -> bool:
    return one.tasks == other.tasks and one.kept == other.kept


def deliver(messages: list[list[bytes]], replica: Replica, shipper: Shipper, now: float) -> None:
    """Every message to the passive, and what it answers back, until nothing more flows (bounded)."""
    messages = [*messages, shipper.beat()]
    for _ in range(10):
        for message in messages:
            replica.receive(message)
        messages = shipper.heard(replica.beat(), now) or []
        if not messages:
            return
    raise AssertionError("the replication did not settle")


# a random run of the active core (requests GDP and MDP, detached or not, workers answering, cancels, time passing),
# its records shipped through a link that drops some messages; the passive asks for snapshots and gets them paced
@settings(max_examples=60, stateful_step_count=40, deadline=None)
class Replication(CoreTraffic):
    payload_times = 30  # (snapshots of several parts)

    def __init__(self) -> None:
        super().__init__()
        self.now = 1.0
        self.core = new_core(0, keep_answers=30.0, client_expiry=1000.0)
        self.shipper = Shipper(ORIGIN, 200, pace=1.0)
        self.replica = Replica(BUDGET)
        self.wal = Live()  # what the write-ahead log's fold of the same records holds
        self.queue: list[list[bytes]] = []  # shipped, not yet delivered
        self.requests = 0

    def recorded(self) -> None:
        made = self.core.take_journal()
        self.wal.apply_all(made)
        self.queue += self.shipper.ship(made, self.now)

    @rule(service=st.sampled_from(["a", "b"]), concurrency=st.sampled_from([None, 1, 4]))
    def flow_limits_set_at_run_time(self, service: str, concurrency: int | None) -> None:
        self.core.apply_flow(FlowChange(service, FlowLimits().merged({"concurrency": concurrency})), self.now)
        self.recorded()

    @rule(seconds=st.sampled_from([0.3, 2.0]))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds
        self.core.tick(self.now)
        self.recorded()

    @precondition(lambda self: bool(self.queue))
    @rule(drops=st.lists(st.booleans(), min_size=1, max_size=20))
    def the_link_delivers_some(self, drops: list[bool]) -> None:
        """The messages shipped so far reach the passive, or are dropped (a full queue), in order."""
        queue, self.queue = self.queue, []
        for n, message in enumerate(queue):
            if not drops[n % len(drops)]:
                self.replica.receive(message)

    @rule()
    def the_passive_beats(self) -> None:
        self.queue += self.shipper.heard(self.replica.beat(), self.now) or []

    @invariant()
    def the_passive_never_holds_what_the_active_does_not_hold_at_its_sequence(self) -> None:
        assert same(self.shipper.live, self.wal)
        assert self.replica.applied <= self.shipper.sequence
        records, seconds = self.shipper.lag(self.now)
        assert records is None or (0 <= records <= self.shipper.sequence and seconds is not None and seconds >= 0)

    def teardown(self) -> None:
        """Once the link delivers again, the passive holds what the active holds, and a core restored from it holds
        the active core's requests (a takeover)."""
        self.now += 2.0  # a snapshot is due again
        deliver(self.queue, self.replica, self.shipper, self.now)
        self.replica.receive(self.replica.beat())  # (its own message: malformed to it, and harmless)
        assert self.replica.synced and self.replica.applied == self.shipper.sequence
        assert same(self.replica.live, self.wal)
        assert self.shipper.lag(self.now) == (0, 0.0)
        successor = new_core(1, keep_answers=30.0, client_expiry=1000.0)
        successor.restore(self.replica.live, self.now)
        assert held(successor) == held(self.core)
        assert successor.flows == self.core.flows


TestReplication = Replication.TestCase


def test_a_gap_asks_for_a_snapshot_at_once_and_the_records_after_it_follow() -> None:
    shipper, replica = Shipper(ORIGIN, 1 << 16, pace=1.0), Replica(BUDGET)
    first = shipper.ship([Finished(1)], 0.0)
    deliver(first, replica, shipper, 0.0)
    assert replica.synced and replica.applied == 1
    shipper.ship([Finished(2)], 0.1)  # dropped
    assert replica.receive(shipper.ship([Finished(3)], 0.2)[0]) is True
    assert not replica.synced and replica.gaps == 1
    assert replica.beat()[1] == b"S"
    assert shipper.heard(replica.beat(), 0.3) == []  # paced: the first was made at 0.0
    snapshot = shipper.heard(replica.beat(), 1.3)
    assert snapshot is not None and [m[1] for m in snapshot] == [BEGIN, END]  # (nothing live: no part)
    later = shipper.ship([Finished(4)], 1.4)
    for message in [*snapshot, *later]:
        replica.receive(message)
    assert replica.synced and replica.applied == 4
    assert shipper.heard(replica.beat(), 1.5) == [] and shipper.lag(1.5) == (0, 0.0)


def test_snapshots_are_paced() -> None:
    shipper = Shipper(ORIGIN, 1 << 16, pace=1.0)
    resync = Replica(BUDGET).beat()
    assert shipper.heard(resync, 0.0)
    assert shipper.heard(resync, 0.5) == []
    assert shipper.heard(resync, 1.0)
    assert shipper.snapshots == 2


def test_the_lag_counts_records_and_the_seconds_since_the_oldest_not_applied() -> None:
    shipper, replica = Shipper(ORIGIN, 1 << 16, pace=1.0), Replica(BUDGET)
    assert shipper.lag(0.0) == (None, None)  # the passive has not spoken
    deliver(shipper.snapshot(0.0), replica, shipper, 0.0)
    shipper.ship([Finished(1), Finished(2)], 1.0)
    shipper.ship([Finished(3)], 2.0)
    assert shipper.heard(replica.beat(), 2.5) == []
    assert shipper.lag(3.0) == (3, 2.0)


def test_a_sequence_of_another_origin_is_a_gap() -> None:
    replica = Replica(BUDGET)
    one, other = Shipper(ORIGIN, 1 << 16, pace=0.0), Shipper(b"origin02", 1 << 16, pace=0.0)
    deliver(one.snapshot(0.0), replica, one, 0.0)
    assert replica.receive(other.ship([Finished(1)], 0.0)[0]) is True
    deliver(other.snapshot(1.0), replica, other, 1.0)
    assert replica.synced and replica.origin == b"origin02" and replica.applied == 1


def test_what_the_passive_holds_stays_within_its_budget() -> None:
    core = new_core(0)
    shipper, replica = Shipper(ORIGIN, 1 << 16, pace=0.0), Replica(budget=1000)
    deliver(shipper.snapshot(0.0), replica, shipper, 0.0)
    for n in range(20):
        core.receive(CLIENT, protocol.gdp_request(b"r%d" % n, b"s", [b"x" * 200]), 1.0)
        for message in shipper.ship(core.take_journal(), 1.0):
            replica.receive(message)
    assert replica.over_budget > 0 and replica.live.bytes <= 1000 + 400


GOOD = encode_all([Finished(1)])


@given(
    st.one_of(
        st.lists(st.binary(max_size=12), max_size=7),
        st.tuples(
            st.sampled_from([RECORDS, PART, END, BEGIN, ACK, b"Z"]), st.binary(max_size=9), st.binary(max_size=9),
            st.binary(max_size=40) | st.just(GOOD[:-1]) | st.just(GOOD + b"x"),
        ).map(lambda t: [HEADER, *t]),
        st.lists(records, max_size=3).map(lambda r: [HEADER, RECORDS, ORIGIN, b"\x01" + bytes(7), encode_all(r)[1:]]),
    )
)  # fmt: skip
def test_hostile_messages_are_counted_and_dropped_never_a_crash(frames: list[bytes]) -> None:
    shipper, replica = Shipper(ORIGIN, 1 << 16, pace=0.0), Replica(BUDGET)
    deliver(shipper.ship([Finished(7)], 0.0) + shipper.snapshot(0.0), replica, shipper, 0.0)
    before = (replica.live.tasks.copy(), replica.live.kept.copy(), replica.malformed, replica.gaps, replica.applied)
    replica.receive(frames)
    answer = shipper.heard(frames, 0.0)
    assert answer is None or isinstance(answer, list)
    if replica.applied == before[4]:  # nothing applied: counted (or a part of no snapshot, ignored)
        assert replica.live.tasks == before[0] and replica.live.kept == before[1]

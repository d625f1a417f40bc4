"""The journal of durable queues: its records' bytes (every record back as it was, damage and truncation never a
crash), and log and replay against the sans-IO core: what the records leave standing is what the core holds, and a
core restored from them holds the same requests and kept answers (a stateful test of random traffic and restarts)."""

from __future__ import annotations

import math
import random

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from generaldomo.sansio.broker.core import BrokerCore, Peer, Settings
from generaldomo.sansio.broker.flow.flow import FlowLimits
from generaldomo.sansio.broker.journal import (
    Accepted,
    Finished,
    JournalRecord,
    Kept,
    Limited,
    Live,
    decode,
    encode,
    encode_all,
)  # fmt: skip
from generaldomo.sansio.broker.states import TaskState
from generaldomo.sansio.wire import protocol
from generaldomo.sansio.wire.fields import request_fields

OFFSET = 1_700_000_000.0  # the wall clock minus the cores' clock
frames = st.lists(st.binary(max_size=12), max_size=4).map(tuple)
addresses = st.one_of(
    st.binary(max_size=8), st.integers(0, 2**32), st.lists(st.binary(max_size=5), max_size=3).map(tuple)
)
times = st.floats(-1e9, 1e10, allow_nan=False)
texts = st.none() | st.text(max_size=8)
records: st.SearchStrategy[JournalRecord] = st.one_of(
    st.builds(
        Accepted, st.integers(0, 2**40), st.integers(0, 9), addresses, st.sampled_from(["generaldomo/1", "MDP/0.1"]),
        texts, st.none() | st.binary(max_size=8), st.binary(max_size=12), frames, times, st.none() | times, texts,
        st.integers(-5, 5), st.booleans(), st.booleans(), st.none() | times,
    ),
    st.builds(Finished, st.integers(0, 2**40)),
    st.builds(
        Limited, st.text(max_size=8), st.sampled_from([FlowLimits(), FlowLimits().merged({"concurrency": 3})])
    ),
    st.builds(
        Kept, texts, st.binary(max_size=8), frames, times, st.integers(0, 9), addresses,
        st.none() | st.binary(max_size=8),
    ),
)  # fmt: skip


@given(st.lists(records, max_size=8))
def test_every_record_comes_back_as_it_was(written: list[JournalRecord]) -> None:
    decoded = decode(encode_all(written))
    assert decoded.records == written
    assert not decoded.damaged and not decoded.truncated


@given(st.lists(records, min_size=1, max_size=6), st.data())
def test_a_log_cut_anywhere_gives_back_the_entries_before_the_cut(
    written: list[JournalRecord], data: st.DataObject
) -> None:
    log = encode_all(written)
    cut = data.draw(st.integers(0, len(log) - 1))
    decoded = decode(log[:cut])
    assert decoded.records == written[: len(decoded.records)]
    assert len(encode_all(decoded.records)) == decoded.end <= cut
    assert decoded.truncated or cut == decoded.end


@given(st.lists(records, min_size=1, max_size=6), st.data())
def test_damaged_bytes_are_skipped_and_counted_never_a_crash(written: list[JournalRecord], data: st.DataObject) -> None:
    log = bytearray(encode_all(written))
    for _ in range(data.draw(st.integers(1, 4))):
        log[data.draw(st.integers(0, len(log) - 1))] ^= data.draw(st.integers(1, 255))
    decoded = decode(bytes(log))
    original = iter(written)
    assert all(any(record == seen for seen in original) for record in decoded.records)  # a subsequence
    assert decoded.damaged or decoded.truncated or decoded.records == written


def test_an_entry_damaged_in_the_middle_costs_that_entry_only() -> None:
    written = [Finished(n) for n in range(5)]
    entries = [encode(record) for record in written]
    middle = bytearray(entries[2])
    middle[-1] ^= 0xFF
    decoded = decode(b"".join([*entries[:2], bytes(middle), *entries[3:]]))
    assert decoded.records == [written[0], written[1], written[3], written[4]]
    assert decoded.damaged == 1 and not decoded.truncated


def test_garbage_is_no_log() -> None:
    decoded = decode(b"\xd0\x6d" * 5000 + bytes(range(256)))
    assert decoded.records == [] and decoded.damaged + decoded.truncated >= 1


# --------------------------------------------------------------------------------------------- the core


def new_core(seed: int, **values: float) -> BrokerCore:
    return BrokerCore(
        settings=Settings(**values),  # type: ignore[arg-type]
        instance=b"i%03d" % seed, random=random.Random(seed).randbytes, journal=OFFSET,
    )  # fmt: skip


def held(core: BrokerCore) -> list[tuple[bytes, bytes, tuple[bytes, ...], bool]]:
    """The requests a core holds (not cancelled), as (request id, description, payload, detached), in order."""
    return sorted(
        (task.request_id or b"", task.description, task.body, task.detached)
        for task in core.tasks.values()
        if task.state is not TaskState.CANCELLED
    )


def standing(live: Live) -> list[tuple[bytes, bytes, tuple[bytes, ...], bool]]:
    return sorted((t.request_id or b"", t.description, t.body, t.detached) for t in live.tasks.values())


def waiting(core: BrokerCore, now: float) -> list[tuple[bytes, bytes, tuple[bytes, ...], float]]:
    """The requests a core holds until a time still to come, as (request id, description, payload, not_before on
    the wall clock), in order."""
    return sorted(
        (task.request_id or b"", task.description, task.body, task.not_before + OFFSET)
        for task in core.tasks.values()
        if task.state is not TaskState.CANCELLED and task.not_before is not None and task.not_before > now
    )


def to_wait(live: Live, now: float) -> list[tuple[bytes, bytes, tuple[bytes, ...], float]]:
    """The requests ``live`` holds whose recorded not_before is still to come ``now`` (the cores' clock)."""
    return sorted(
        (t.request_id or b"", t.description, t.body, t.not_before)
        for t in live.tasks.values()
        if t.not_before is not None and t.not_before - OFFSET > now
    )


def same_times(
    one: list[tuple[bytes, bytes, tuple[bytes, ...], float]], other: list[tuple[bytes, bytes, tuple[bytes, ...], float]]
) -> bool:
    """The same requests, not before the same times (to a microsecond: the records' clock is offset)."""
    return len(one) == len(other) and all(
        a[:3] == b[:3] and math.isclose(a[3], b[3], rel_tol=0.0, abs_tol=1e-6) for a, b in zip(one, other, strict=True)
    )


CLIENT, MDP_CLIENT, WORKER = Peer(0, b"c"), Peer(0, b"m"), Peer(1, b"w")


def test_a_restored_core_holds_the_queued_requests_and_kept_answers_and_a_resend_is_not_a_second_task() -> None:
    core = new_core(1)
    core.receive(
        CLIENT, protocol.gdp_request(b"r1", b"echo", [b"one"], request_fields(flags=protocol.FLAG_DETACHED)), 1.0
    )
    core.receive(MDP_CLIENT, protocol.mdp_client_request(b"echo", [b"two"]), 1.0)
    core.receive(CLIENT, protocol.gdp_request(b"r3", b"echo", [b"three"]), 1.0)
    core.receive(WORKER, protocol.gdp_ready(b"echo"), 1.5)
    records = core.take_journal()
    assert [type(r) for r in records] == [Accepted, Accepted, Accepted]
    task_id = next(iter(core.tasks.values())).id
    core.receive(WORKER, protocol.gdp_ready(b"echo", (task_id, protocol.OK, [b"ONE"])), 2.0)
    records += core.take_journal()
    assert {type(r) for r in records[3:]} == {Finished, Kept, Accepted} - {Accepted}
    live = Live().apply_all(decode(encode_all(records)).records)
    assert standing(live) == held(core)

    later = new_core(2)
    later.restore(live, 50.0)
    assert held(later) == held(core)
    assert later.counters.tasks_restored == 2 and later.counters.answers_restored == 1
    # the client re-asks its answered request from a new address: it gets the kept answer, no new task
    out = later.receive(Peer(0, b"c2"), protocol.gdp_request(b"r1", b"echo", [b"one"]), 51.0)
    assert [frames[-1] for _, frames in out] == [b"ONE"]
    # and resends its queued one: the restored task is its, not a second
    later.receive(Peer(0, b"c2"), protocol.gdp_request(b"r3", b"echo", [b"three"]), 51.0)
    assert held(later) == held(core)
    # the journal of the restored core holds them again, under new serials
    assert standing(Live().apply_all(later.take_journal())) == held(core)


def test_a_request_past_its_deadline_at_the_restore_is_answered_not_queued() -> None:
    core = new_core(1)
    core.receive(CLIENT, protocol.gdp_request(b"r1", b"echo", [b"x"], protocol.deadline_field(5.0)), 1.0)
    live = Live().apply_all(core.take_journal())
    later = new_core(2)
    out = later.restore(live, 10.0)
    assert not later.tasks and len(out) == 1


def test_a_restored_delayed_request_waits_until_the_same_time_and_one_whose_time_passed_is_queued() -> None:
    core = new_core(1)
    for request_id, payload, delay in ((b"r1", b"later", 30.0), (b"r2", b"soon", 2.0)):  # (detached: kept while
        fields = request_fields(flags=protocol.FLAG_DETACHED, not_before=delay)  # their client is silent)
        core.receive(CLIENT, protocol.gdp_request(request_id, b"echo", [payload], fields), 1.0)
    live = Live().apply_all(decode(encode_all(core.take_journal())).records)
    assert same_times(to_wait(live, 1.0), waiting(core, 1.0))
    assert [round(t[3] - OFFSET, 6) for t in to_wait(live, 1.0)] == [31.0, 3.0]
    later = new_core(2)
    later.restore(live, 10.0)  # (the broker was down from before 3.0 until 10.0)
    assert same_times(waiting(later, 10.0), to_wait(live, 10.0))
    assert [t[0] for t in waiting(later, 10.0)] == [b"r1"]
    assert later.counters.tasks_restored == 2
    later.receive(WORKER, protocol.gdp_ready(b"echo"), 10.5)
    assert [task.request_id for task in later.tasks.values() if task.worker is not None] == [b"r2"]
    later.tick(30.5)
    assert same_times(waiting(later, 30.5), to_wait(live, 30.5))  # r1 not released before its time
    assert [t[0] for t in waiting(later, 30.5)] == [b"r1"]
    later.tick(31.5)
    assert waiting(later, 31.5) == [] and b"r1" in {task.request_id for task in later.tasks.values()}


# the traffic both journal machines drive the core with (this one and the pair's replication): each rule then hands
# the core's new records on (``recorded``)
class CoreTraffic(RuleBasedStateMachine):
    core: BrokerCore
    now: float
    requests: int
    payload_times = 1  # a payload's size, in multiples of its name

    def recorded(self) -> None:
        """Take the core's new records where the machine keeps them."""
        raise NotImplementedError

    @rule(detached=st.booleans(), service=st.sampled_from([b"a", b"b"]), delay=st.sampled_from([None, 3.0]))
    def request(self, detached: bool, service: bytes, delay: float | None) -> None:
        self.requests += 1
        fields = request_fields(flags=protocol.FLAG_DETACHED if detached else 0, not_before=delay)
        request = protocol.gdp_request(
            b"r%d" % self.requests, service, [b"p%d" % self.requests * self.payload_times], fields
        )
        self.core.receive(CLIENT, request, self.now)
        self.recorded()

    @rule(service=st.sampled_from([b"a", b"b"]))
    def mdp_request(self, service: bytes) -> None:
        self.core.receive(MDP_CLIENT, protocol.mdp_client_request(service, [b"m"]), self.now)
        self.recorded()

    @rule(number=st.integers(0, 2), service=st.sampled_from([b"a", b"b"]))
    def worker_ready(self, number: int, service: bytes) -> None:
        self.core.receive(Peer(1, b"w%d" % number), protocol.gdp_ready(service), self.now)
        self.recorded()

    @rule()
    def a_worker_answers(self) -> None:
        running = [task for task in self.core.tasks.values() if task.worker is not None]
        if running:
            task = running[0]
            assert task.worker is not None
            answer = protocol.gdp_ready(task.service.name.encode(), (task.id, protocol.OK, [b"done"]))
            self.core.receive(task.worker.peer, answer, self.now)
            self.recorded()

    @rule(number=st.integers(1, 20))
    def cancel(self, number: int) -> None:
        self.core.receive(CLIENT, protocol.gdp_cancel(b"r%d" % number), self.now)
        self.recorded()


# a random run: requests (GDP, detached or not, and MDP), workers ready and answering, cancels, time passing, and
# restarts (the core replaced by one restored from the log's bytes); the log's fold always equals the core's state
@settings(max_examples=60, stateful_step_count=40, deadline=None)
class LogAndReplay(CoreTraffic):
    def __init__(self) -> None:
        super().__init__()
        self.now = 1.0
        self.seed = 0
        self.core = new_core(self.seed, keep_answers=30.0, client_expiry=1000.0)
        self.log = bytearray()
        self.requests = 0

    def recorded(self) -> None:
        self.log += encode_all(self.core.take_journal())

    @rule(seconds=st.sampled_from([0.5, 5.0, 40.0]))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds
        self.core.tick(self.now)
        self.recorded()

    @rule()
    def restart(self) -> None:
        live = Live().apply_all(decode(bytes(self.log)).records)
        self.seed += 1
        before, waits = held(self.core), waiting(self.core, self.now)
        self.core = new_core(self.seed, keep_answers=30.0, client_expiry=1000.0)
        self.core.restore(live, self.now)
        assert held(self.core) == before
        assert same_times(waiting(self.core, self.now), waits)  # a delayed request waits until the same time
        self.log = bytearray(encode_all(self.core.take_journal()))

    @invariant()
    def the_log_leaves_standing_what_the_core_holds(self) -> None:
        live = Live().apply_all(decode(bytes(self.log)).records)
        assert standing(live) == held(self.core)
        assert same_times(to_wait(live, self.now), waiting(self.core, self.now))
        kept = {request_id for (_, request_id), k in live.kept.items() if k.at - OFFSET + 30.0 > self.now}
        answered = {request_id for request_id in kept if self.core._kept.get(request_id, self.now) is not None}
        assert answered == kept  # every answer the log keeps, the core keeps


TestLogAndReplay = LogAndReplay.TestCase

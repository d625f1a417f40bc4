"""The broker pair's state machine: the Guide's table, and never two actives, whatever the order of crashes,
restarts, partitions of the pair's link, clients and delays (a hypothesis stateful test)."""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from generaldomo.sansio.broker.pair import (
    EXPIRY,
    PAIR,
    PAIR_HEADER,
    Pair,
    PairEvent,
    PairRole,
    PairState,
    Visit,
    read_state,
    state_message,
    visit,
)
from generaldomo.sansio.wire import protocol

HEARTBEAT = 1.0
LATENCY = 0.3 * HEARTBEAT  # the longest a state message is on its way (the link is up)
STEP = 0.5 * HEARTBEAT  # the longest step of the clock (a beat is sent at most that late)


def test_every_state_and_event_has_its_move() -> None:
    assert all(PAIR.allows(state, event) for state in PairState for event in PairEvent)


def test_a_primary_and_a_backup_decide_and_the_backup_takes_over_only_when_the_active_is_silent() -> None:
    primary, backup = Pair(PairRole.PRIMARY, HEARTBEAT, 0.0), Pair(PairRole.BACKUP, HEARTBEAT, 0.0)
    assert not backup.admit(10.0)  # a backup alone never serves
    primary.heard(read_state(backup.beat(10.0)) or PairState.BROKEN, 10.0)
    backup.heard(read_state(primary.beat(10.0)) or PairState.BROKEN, 10.0)
    assert (primary.state, backup.state) == (PairState.ACTIVE, PairState.PASSIVE)
    assert primary.admit(10.5) and not backup.admit(10.5) and backup.state is PairState.PASSIVE
    assert not backup.expired(10.0 + EXPIRY * HEARTBEAT - 0.01)
    assert backup.admit(10.0 + EXPIRY * HEARTBEAT) and backup.serving  # failover
    primary.heard(PairState.ACTIVE, 13.0)
    assert primary.state is PairState.BROKEN and not primary.admit(14.0)


def test_only_a_request_or_a_ready_is_a_visit_that_may_make_a_passive_broker_take_over() -> None:
    assert visit(protocol.gdp_request(b"r1", b"echo", [b"x"])) is Visit.SERVE
    assert visit(protocol.gdp_request(b"r2", b"mmi.status", [])) is Visit.STATUS
    assert visit(protocol.gdp_ready(b"echo")) is Visit.SERVE
    assert visit(protocol.gdp_resume(b"echo", b"t1")) is Visit.SERVE
    assert visit(protocol.gdp_client_heartbeat()) is Visit.NOTHING
    assert visit(protocol.mdp_client_request(b"echo", [b"x"])) is Visit.SERVE  # MDP/0.1's header
    assert visit([b"nonsense"]) is Visit.NOTHING


def test_a_primary_alone_serves_once_its_peer_has_expired() -> None:
    primary = Pair(PairRole.PRIMARY, HEARTBEAT, 0.0)
    assert not primary.admit(EXPIRY * HEARTBEAT - 0.01) and primary.admit(EXPIRY * HEARTBEAT)


def test_the_link_messages_are_read_strictly() -> None:
    for state in (PairState.PRIMARY, PairState.BACKUP, PairState.ACTIVE, PairState.PASSIVE):
        assert read_state(state_message(state)) is state
    assert read_state([PAIR_HEADER, b"broken"]) is None
    assert read_state([PAIR_HEADER]) is None
    assert read_state([b"GDPAIR02", b"active"]) is None
    assert read_state([PAIR_HEADER, b"active", b""]) is None
    assert read_state([memoryview(PAIR_HEADER), memoryview(b"passive")]) is PairState.PASSIVE


Names = ("a", "b")


class PairMachine(RuleBasedStateMachine):
    """Two brokers (a primary "a" and a backup "b") that crash, restart and lose their link, clients that stay
    with a broker that serves them and move to the other one when it does not (the peers' rule), messages on the
    link delayed up to LATENCY, and the clock. A broker restarts only while the link is up: a broker restarted
    inside a partition cannot know whether its peer serves (the pattern's known limit, in the guide)."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.pairs: dict[str, Pair | None] = {
            "a": Pair(PairRole.PRIMARY, HEARTBEAT, 0.0),
            "b": Pair(PairRole.BACKUP, HEARTBEAT, 0.0),
        }
        self.link_up = True
        self.wires: dict[str, deque[tuple[float, PairState]]] = {"a": deque(), "b": deque()}  # to each broker
        self.clients = [0, 0, 0]  # the broker each client sends to (0: the primary, first in its list)
        self.served = 0

    def _other(self, name: str) -> str:
        return "b" if name == "a" else "a"

    def _deliver(self, to: str) -> None:
        _, said = self.wires[to].popleft()
        pair = self.pairs[to]
        if pair is not None:
            pair.heard(said, self.now)

    @rule(dt=st.floats(0.01, STEP))
    def tick(self, dt: float) -> None:
        later = self.now + dt
        for to in Names:  # a message on its way is there within LATENCY
            while self.wires[to] and self.wires[to][0][0] + LATENCY <= later:
                self._deliver(to)
        self.now = later
        for name in Names:
            pair = self.pairs[name]
            if pair is not None and pair.due(self.now):
                said = read_state(pair.beat(self.now))
                if said is not None and self.link_up:
                    self.wires[self._other(name)].append((self.now, said))

    @rule(to=st.sampled_from(Names))
    def deliver(self, to: str) -> None:
        if self.wires[to]:
            self._deliver(to)

    @rule(name=st.sampled_from(Names))
    def crash(self, name: str) -> None:
        self.pairs[name] = None

    @precondition(lambda self: self.link_up)
    @rule(name=st.sampled_from(Names))
    def restart(self, name: str) -> None:
        if self.pairs[name] is None:
            self.pairs[name] = Pair(PairRole.PRIMARY if name == "a" else PairRole.BACKUP, HEARTBEAT, self.now)

    @rule()
    def partition(self) -> None:
        self.link_up = False
        for wire in self.wires.values():
            wire.clear()

    @rule()
    def heal(self) -> None:
        self.link_up = True

    @rule(client=st.integers(0, 2))
    def request(self, client: int) -> None:
        name = Names[self.clients[client]]
        pair = self.pairs[name]
        if pair is not None and pair.admit(self.now):
            self.served += 1
        else:  # silence: the next endpoint
            self.clients[client] = 1 - self.clients[client]

    @invariant()
    def never_two_actives(self) -> None:
        a, b = self.pairs["a"], self.pairs["b"]
        assert not (a is not None and b is not None and a.serving and b.serving), (a.state, b.state)


PairMachine.TestCase.settings = settings(max_examples=400, stateful_step_count=60, deadline=None)
TestPairMachine = PairMachine.TestCase


@pytest.mark.parametrize("role", list(PairRole))
def test_a_broken_pair_serves_nobody(role: PairRole) -> None:
    pair = Pair(role, HEARTBEAT, 0.0)
    pair.heard(PairState.ACTIVE, 0.0)
    pair.heard(PairState.PASSIVE, 0.1)
    assert pair.state is PairState.BROKEN and not pair.admit(100.0)

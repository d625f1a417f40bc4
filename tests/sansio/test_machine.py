"""The one state-machine style: tables keyed by (state, event), an illegal move a named error."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from generaldomo import GeneraldomoError
from generaldomo.errors import IllegalTransition
from generaldomo.peers.reader_role import READER_ROLE, ReaderEvent, ReaderRole
from generaldomo.sansio.broker.states import TASK, WORKER, Step, TaskState, WorkerState
from generaldomo.sansio.machine import Machine
from generaldomo.sansio.peer.session import WORKER_SESSION, WorkerSessionEvent, WorkerSessionState

MACHINES = [
    (WORKER, WorkerState, Step),
    (TASK, TaskState, Step),
    (WORKER_SESSION, WorkerSessionState, WorkerSessionEvent),
    (READER_ROLE, ReaderRole, ReaderEvent),
]


@pytest.mark.parametrize(("machine", "states", "events"), MACHINES, ids=lambda m: getattr(m, "name", ""))
def test_apply_and_rows_agree_and_an_illegal_move_names_machine_state_and_event(machine, states, events) -> None:
    listed = {event for _, event in machine.table}
    for state in states:
        for event in events:
            if machine.allows(state, event):
                assert machine.apply(state, event) is machine.table[state, event] is machine.row(event)[state]
                continue
            for by_row in (False, True) if event in listed else (False,):  # (a row is had for a listed event)
                with pytest.raises(IllegalTransition) as caught:
                    machine.row(event)[state] if by_row else machine.apply(state, event)
                error = caught.value
                assert (error.machine, error.state, error.event) == (machine.name, state, event)
                assert isinstance(error, GeneraldomoError) and isinstance(error, RuntimeError)
                assert machine.name in str(error) and state.name in str(error) and event.name in str(error)


@pytest.mark.parametrize(("machine", "states", "events"), MACHINES, ids=lambda m: getattr(m, "name", ""))
def test_every_state_is_reached_from_the_first(machine, states, events) -> None:
    first = next(iter(states))
    reached, frontier = {first}, [first]
    while frontier:
        state = frontier.pop()
        for (at, _), after in machine.table.items():
            if at is state and after not in reached:
                reached.add(after)
                frontier.append(after)
    assert reached == set(states)


@given(st.lists(st.sampled_from(list(ReaderEvent)), max_size=50))
def test_the_reader_role_moves_only_as_its_table_says(events: list[ReaderEvent]) -> None:
    role = ReaderRole.IO
    for event in events:
        if READER_ROLE.allows(role, event):
            role = READER_ROLE.apply(role, event)
        else:
            with pytest.raises(IllegalTransition):
                READER_ROLE.apply(role, event)
    assert role in ReaderRole


def test_a_machine_of_plain_values() -> None:
    light = Machine("light", {("off", "push"): "on", ("on", "push"): "off"})
    assert light.apply(light.apply("off", "push"), "push") == "off"
    with pytest.raises(IllegalTransition, match="light: no move for pull in state on"):
        light.apply("on", "pull")
    with pytest.raises(IllegalTransition):
        light.row("pull")

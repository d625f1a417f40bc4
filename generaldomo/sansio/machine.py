"""The one style of state machine: a transition table keyed by ``(state, event)``, applied by one function.

This module owns how every machine of generaldomo moves (the core's workers and tasks,
:mod:`generaldomo.sansio.broker.states`; a worker's session, :mod:`generaldomo.sansio.peer.session`; a Client's reader
role, :mod:`generaldomo.peers.reader_role`): a :class:`Machine` is named and holds its table; :meth:`Machine.apply`
gives the state after an event, and a move the table does not list raises :class:`IllegalTransition` naming the
machine, the state and the event. Whether an event may be *ignored* in a state (a peer's message that does not
fit) is the caller's to say before it applies the event (:meth:`Machine.allows`): an illegal move is a bug, never
a peer's doing. A hot path takes :meth:`Machine.row`, the moves of one event as a mapping from state (one dict
lookup, no call; a miss raises the same error). It knows nothing of messages, sockets or clocks.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Generic, TypeVar

import generaldomo.errors as errors
from generaldomo.compat import moved_names

# the errors' old paths here: the same classes, with a DeprecationWarning (they live in generaldomo.errors)
__getattr__ = moved_names(__name__, "generaldomo", ["IllegalTransition"])

__all__ = ["Machine", "Row"]

S = TypeVar("S", bound=Hashable)
E = TypeVar("E", bound=Hashable)


class Row(dict[S, S], Generic[S, E]):
    """The moves of one event of a :class:`Machine`: state -> next state; a state it has no move for raises
    :class:`IllegalTransition` (a dict subclass, so that a lookup stays one C call)."""

    __slots__ = ("event", "machine")

    def __init__(self, machine: str, event: E, moves: Mapping[S, S]) -> None:
        super().__init__(moves)
        self.machine, self.event = machine, event

    def __missing__(self, state: S) -> S:
        raise errors.IllegalTransition(self.machine, state, self.event)


class Machine(Generic[S, E]):
    """A named transition table: ``table[state, event]`` is the state after ``event`` in ``state``.

    >>> light = Machine("light", {("off", "push"): "on", ("on", "push"): "off"})
    >>> light.apply("off", "push")
    'on'
    >>> light.apply("on", "pull")
    Traceback (most recent call last):
    ...
    generaldomo.errors.IllegalTransition: light: no move for pull in state on
    """

    def __init__(self, name: str, table: Mapping[tuple[S, E], S]) -> None:
        self.name = name
        self.table: dict[tuple[S, E], S] = dict(table)
        events = dict.fromkeys(event for _, event in self.table)
        self._rows = {
            event: Row(name, event, {state: after for (state, on), after in self.table.items() if on == event})
            for event in events
        }

    def apply(self, state: S, event: E) -> S:
        """The state after ``event`` in ``state``; :class:`IllegalTransition` if the table has no such move."""
        try:
            return self.table[state, event]
        except KeyError:
            raise errors.IllegalTransition(self.name, state, event) from None

    def allows(self, state: S, event: E) -> bool:
        """Whether the table has a move for ``event`` in ``state``."""
        return (state, event) in self.table

    def row(self, event: E) -> Row[S, E]:
        """The moves of ``event``, for a hot path (see :class:`Row`)."""
        try:
            return self._rows[event]
        except KeyError:
            raise errors.IllegalTransition(self.name, "any", event) from None


def _name(value: object) -> str:
    """A state's or event's name in messages: an enum member's name, else its str."""
    return getattr(value, "name", None) or str(value)

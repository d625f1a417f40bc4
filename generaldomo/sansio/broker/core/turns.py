"""One call into the broker core: its time and the actions it returns, and for a message its sender and credential.

This module owns the *turn* the core and its parts pass along while they handle one message, one tick, a flow
change or a stop (:class:`Turn`, :class:`Message`), so that a helper is given the turn rather than its time,
sender and actions one by one; the typing of the handler tables (:func:`on`); the DISCONNECT every part may
tell a worker (:func:`dismiss`); and the bytes of a message's frames (:func:`frames_size`). It knows
nothing of sockets, clocks or what the messages mean.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol, TypeVar

from generaldomo.sansio.broker.access import Credential
from generaldomo.sansio.broker.actions import Dismiss, Send
from generaldomo.sansio.broker.records import Peer, RequestKey, Task
from generaldomo.sansio.broker.states import TaskState
from generaldomo.sansio.wire import protocol
from generaldomo.sansio.wire.events import Dialect, Event, Frame

__all__ = ["EventHandler", "Message", "Table", "Tasks", "Turn", "dismiss", "frames_size", "log", "on"]

# the lines of the core and of its parts: one logger, the package's
log = logging.getLogger(__name__.rpartition(".")[0])


# an action made as the tuple it is: its NamedTuple's own __new__ is a Python function, a call into the interpreter
# per action under the compiled core (Turn.send)
_TUPLE: Final = tuple.__new__
S = TypeVar("S", bound=Send)


class Turn:
    """One call into the core (a message, a tick, a flow change, a stop): the time it was fed, and the actions it
    returns, in order, as its handlers and helpers add them."""

    __slots__ = ("now", "out")

    def __init__(self, now: float) -> None:
        self.now = now
        self.out: list[Send] = []

    def send(self, kind: type[S], peer: Peer, frames: Sequence[Frame]) -> None:
        """Add the action ``kind(peer, frames)`` (the same record, made without a call into the interpreter)."""
        self.out.append(_TUPLE(kind, (peer, frames)))


class Message(Turn):
    """The turn of one message: also who sent it, and the credential it came with (None: not authenticated)."""

    __slots__ = ("credential", "peer")

    def __init__(self, peer: Peer, now: float, credential: Credential | None) -> None:
        self.now = now
        self.out: list[Send] = []
        self.peer = peer
        self.credential = credential

    @property
    def owner(self) -> str | None:
        """The sender's key, which scopes its request ids (None: not authenticated)."""
        return None if self.credential is None else self.credential.key


def frames_size(frames: Sequence[Frame]) -> int:
    """The bytes of ``frames`` (a loop, not ``sum(map(len, ...))``: the compiled core's is native, and so faster)."""
    size = 0
    for frame in frames:
        size += len(frame)
    return size


def dismiss(peer: Peer, dialect: Dialect) -> Dismiss:
    """A DISCONNECT for the worker at ``peer``, in its ``dialect``."""
    return Dismiss(peer, protocol.worker_command(dialect, protocol.DISCONNECT))


E = TypeVar("E", bound=Event)
EventHandler = Callable[[E, Message], None]  # the handler of one kind of event, given the message's turn
Table = dict[type, EventHandler[Any]]  # the handler of each kind of event, by the event's class


def on(kind: type[E], handler: EventHandler[E]) -> tuple[type, EventHandler[Any]]:
    """An entry of a handler table: the handler of events of ``kind``, typed for that kind (the table, keyed by
    the event's class, cannot say that each value takes its key's events: each entry says it)."""
    return kind, handler


class Tasks(Protocol):
    """What every part that handles tasks may read and call of the core (each part's ``Core`` protocol extends it
    with what else it calls): its tables of live tasks, and how a task is completed or finished."""

    _tasks: dict[bytes, Task]
    _by_request: dict[RequestKey, Task]

    def _complete(
        self, task: Task, status: bytes, body: Sequence[Frame], turn: Turn, *, dequeued: bool = False,
        dispatch: bool = True,
    ) -> None: ...  # fmt: skip
    def _finish(self, task: Task, state: TaskState, *, dequeued: bool = False) -> None: ...

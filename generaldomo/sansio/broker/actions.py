"""What the broker core asks of its IO layer: one small immutable class per kind of message it sends.

Rules of this file:

- Every action is a delivery: the frames of one message (laid out by :mod:`generaldomo.sansio.wire.protocol`) for
  one peer, ``(peer, frames)``. The IO layer has one path for them all, in the order the core returned them
  (``for peer, frames in actions: links[peer.link].send(peer.address, frames)``), whatever their kind; it may
  drop any of them for a peer that does not read (counted there): the core's guarantees do not depend on a
  delivery (a lost answer is asked for again and sent from the kept answers; a lost task is reissued when its
  worker falls silent).
- The kind says what the message is, for readers of the core, its tests and an embedding application's own
  loop: :class:`Dispatch` (a task to its worker), :class:`Respond` (a client's final answer), :class:`Forward`
  (a partial result), :class:`Beat` (heartbeats), :class:`Cancel` (nobody waits for a task's result) and
  :class:`Dismiss` (a worker is told to go). Each is a :class:`Send` (a named tuple: made as cheaply as a
  tuple, the hot path's two per request included) and adds no field.
- It knows nothing of sockets, clocks, frame layouts or the core's state.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from generaldomo.sansio.broker.records import Peer
from generaldomo.sansio.wire.events import Frame

__all__ = ["Beat", "Cancel", "Dismiss", "Dispatch", "Forward", "Respond", "Send"]


class Send(NamedTuple):
    """A message the broker must send: what every action of the core is (its kind is a subclass).

    Args:
        peer: whom to send it to.
        frames: the message's frames.

    Example::

        for peer, frames in core.receive(peer, frames, time.monotonic()):
            links[peer.link].send(peer.address, frames)
    """

    peer: Peer
    frames: Sequence[Frame]


class Dispatch(Send):
    """A task to the worker that runs it now (REQUEST)."""

    __slots__ = ()


class Respond(Send):
    """A client's final answer: its task's result, an error (refused, expired, lost), the answer to an ``mmi.``
    request, or an answer kept for its re-asks and sent again."""

    __slots__ = ()


class Forward(Send):
    """A partial result of a streaming worker, forwarded to the client that asked."""

    __slots__ = ()


class Beat(Send):
    """A heartbeat to a worker (a hand-over broker's names the results it took), or the answer to a generaldomo
    client's heartbeat (the broker's instance, and which of the asked ids it does not know)."""

    __slots__ = ()


class Cancel(Send):
    """Tell a worker (one that understands CANCEL) that nobody waits for its task's result any more."""

    __slots__ = ()


class Dismiss(Send):
    """Tell a worker to go away (DISCONNECT): it is not registered, was refused, broke the protocol, or the
    broker is closing."""

    __slots__ = ()

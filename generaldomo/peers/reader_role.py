"""Who reads a Client's socket: the reader role's states and moves, as a transition table.

This module owns the reader role's life (see :mod:`generaldomo.peers.client_io`, which holds it under the client's
lock): it is the IO thread's (``IO``) until a caller waiting for its reply claims it (``READING``); leaving its
read loop, the caller keeps it lent (``LENT``: no wake-up for the next synchronous round trip) or gives it back
(``IO``); the IO thread takes back a lent role nobody uses. A move the table lacks raises
:class:`~generaldomo.errors.IllegalTransition`. When a move is *wanted* (nobody else reading, nothing
left for the IO thread, ...) is the client's to say; this module knows nothing of threads, sockets or clocks.
"""

from __future__ import annotations

import enum
from typing import Final

from generaldomo.sansio.machine import Machine

__all__ = ["READER_ROLE", "ReaderEvent", "ReaderRole"]


class ReaderRole(enum.Enum):
    """Who has the reader role."""

    # members are singletons: the C identity hash serves, not Enum's own (it hashes the name in Python at every dict
    # or set lookup); without both enums here, a client's calling thread costs 2,300 instructions more per sync
    # request, 1.5 % (``python -m bench.peer_instructions --role client``, 2026-12-07)
    __hash__ = object.__hash__

    IO = "the IO thread"
    READING = "lent: a caller reads"
    LENT = "lent: its caller left its read loop"


class ReaderEvent(enum.Enum):
    """What happens to the reader role."""

    __hash__ = object.__hash__  # (as ReaderRole's)

    CLAIM = "a waiting caller claims it"
    KEEP = "the caller leaves its read loop, keeping it lent"
    GIVE_BACK = "the caller leaves its read loop, giving it back"
    TAKE_BACK = "the IO thread takes back a lent role nobody uses"


_R, _E = ReaderRole, ReaderEvent
READER_ROLE: Final[Machine[ReaderRole, ReaderEvent]] = Machine(
    "reader role",
    {
        (_R.IO, _E.CLAIM): _R.READING,
        (_R.LENT, _E.CLAIM): _R.READING,
        (_R.READING, _E.KEEP): _R.LENT,
        (_R.READING, _E.GIVE_BACK): _R.IO,
        (_R.LENT, _E.TAKE_BACK): _R.IO,
    },
)

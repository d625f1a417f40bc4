"""The four dialects on the wire: their header frames and their command bytes.

This module owns the tables that tell the dialects apart (see ``docs/protocol.rst``): which header frame (after
an empty frame or not) opens a client's or a worker's message in each dialect, and which byte each command has
in each. Every reader and writer of :mod:`generaldomo.sansio.wire` looks the bytes up here; nothing else names
them. It knows nothing of the fields after the command byte, of events, or of sockets.
"""

from __future__ import annotations

from typing import Final

from generaldomo.sansio.wire.events import Dialect
from generaldomo.sansio.wire.limits import REASKED, TAKEN

__all__ = [
    "CANCEL",
    "CANCEL_BYTE",
    "CLIENT_COMMANDS",
    "FIELDS_REQUEST",
    "GDP_CLIENT",
    "GDP_WORKER",
    "HANDOVER",
    "HEADERS",
    "MAX_REASKED",
    "MAX_TAKEN",
    "PREFIX",
    "RESUME",
    "WORKER_COMMANDS",
    "WORKER_NAMES",
    "command_byte",
]

GDP_CLIENT: Final = b"GDPC01"
GDP_WORKER: Final = b"GDPW01"

# Command names, shared by all dialects; each dialect gives them its own byte.
# (each Final: the compiled core inlines a Final's value where a plain module name costs a dictionary lookup)
READY: Final = "READY"
REQUEST: Final = "REQUEST"
PARTIAL: Final = "PARTIAL"
FINAL: Final = "FINAL"
HEARTBEAT: Final = "HEARTBEAT"
DISCONNECT: Final = "DISCONNECT"
CANCEL: Final = "CANCEL"
RESUME: Final = "RESUME"  # a GDP worker registers while it runs a task (hand-over)
HANDOVER: Final = "HANDOVER"  # a GDP worker hands over the result of a task of an earlier registration
FIELDS_REQUEST: Final = "REQUEST+FIELDS"  # a GDP REQUEST with a fields frame after the description
MAX_REASKED: Final = REASKED.high  # request ids one client HEARTBEAT may ask about
MAX_TAKEN: Final = TAKEN.high  # results one broker HEARTBEAT to a worker acknowledges

# (leading empty frame?, header) -> (dialect, is the sender a worker?)
HEADERS: Final[dict[tuple[bool, bytes], tuple[Dialect, bool]]] = {
    (False, GDP_CLIENT): (Dialect.GDP, False),
    (False, GDP_WORKER): (Dialect.GDP, True),
    (True, b"MDPC01"): (Dialect.MDP01, False),
    (True, b"MDPW01"): (Dialect.MDP01, True),
    (False, b"MDPC02"): (Dialect.MDP02, False),
    (False, b"MDPW02"): (Dialect.MDP02, True),
    (True, b"MDPC02"): (Dialect.MAJORTOMO, False),
    (True, b"MDPW02"): (Dialect.MAJORTOMO, True),
}
# The frames every message of a dialect starts with, per role (client, worker).
PREFIX: Final[dict[tuple[Dialect, bool], tuple[bytes, ...]]] = {
    (dialect, worker): (b"", header) if empty else (header,) for (empty, header), (dialect, worker) in HEADERS.items()
}

_MDP02_WORKER = {READY: 1, REQUEST: 2, PARTIAL: 3, FINAL: 4, HEARTBEAT: 5, DISCONNECT: 6}
# Worker command bytes. generaldomo workers return results inside READY, so they have no FINAL.
WORKER_COMMANDS: Final[dict[Dialect, dict[str, int]]] = {
    Dialect.GDP: {
        READY: 1,
        REQUEST: 2,
        PARTIAL: 3,
        HEARTBEAT: 5,
        DISCONNECT: 6,
        FIELDS_REQUEST: 7,
        CANCEL: 8,
        RESUME: 9,
        HANDOVER: 10,
    },
    Dialect.MDP01: {READY: 1, REQUEST: 2, FINAL: 3, HEARTBEAT: 4, DISCONNECT: 5},
    Dialect.MDP02: _MDP02_WORKER,
    Dialect.MAJORTOMO: _MDP02_WORKER,
}
# Client command bytes. MDP/0.1 has no client command byte at all.
CLIENT_COMMANDS: Final[dict[Dialect, dict[str, int]]] = {
    Dialect.GDP: {REQUEST: 1, PARTIAL: 2, FINAL: 3, HEARTBEAT: 4, CANCEL: 5, FIELDS_REQUEST: 6},
    Dialect.MDP02: {REQUEST: 1, PARTIAL: 2, FINAL: 3},
    Dialect.MAJORTOMO: {REQUEST: 2, PARTIAL: 3, FINAL: 4},
}
# The worker commands' names by byte, per dialect: what a worker's (or, for GDP, the broker's) byte means.
WORKER_NAMES: Final[dict[Dialect, dict[bytes | memoryview, str]]] = {  # (looked up by the frame itself)
    dialect: {code.to_bytes(1, "big"): name for name, code in table.items()}
    for dialect, table in WORKER_COMMANDS.items()
}
_BYTES: Final[dict[tuple[Dialect, str, bool], bytes]] = {
    (dialect, name, worker): code.to_bytes(1, "big")
    for worker, tables in ((True, WORKER_COMMANDS), (False, CLIENT_COMMANDS))
    for dialect, table in tables.items()
    for name, code in table.items()
}  # every command's byte, made once: the readers and writers look them up


def command_byte(dialect: Dialect, command: str, worker: bool) -> bytes:
    """The byte of ``command`` in ``dialect``, for a worker's message (and the broker's to a worker) or a
    client's (and the broker's to a client); KeyError for a command the dialect does not have."""
    return _BYTES[dialect, command, worker]


CANCEL_BYTE: Final = command_byte(Dialect.GDP, CANCEL, worker=False)  # a GDP client's CANCEL (no other dialect's)

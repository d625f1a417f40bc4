"""Task tickets: task ids that let a later broker instance take over a task an earlier one dispatched.

This module owns the ticket's layout and its check. A broker with a hand-over key (its state directory's, the
same for every instance started on it) makes the id of each task of a generaldomo client a *ticket*::

    nonce (16 random bytes) | version 0x01 | instance (4 bytes) | MAC (16 bytes)
    | service name | owner | request id   (each: 2-byte big-endian length, then the bytes)
    | request digest (16 bytes)

The MAC is BLAKE2b (16 bytes) keyed with the hand-over key over everything but itself: only a broker holding
the key makes a ticket that :meth:`Tickets.read` accepts, and a ticket names the instance that issued it, the
service, the client's key (*owner*: the Z85 text of its CURVE key; empty without CURVE), the client's request
id and the digest of the request's description and payload (:func:`request_digest`), so that a handed-over
result answers only a request with that description and payload. The nonce makes every ticket unique; its
first 16 bytes (all of a plain 16-byte task id) name a task in a worker's acknowledgements (:func:`nonce`).
A request whose fields would make a ticket longer than :data:`MAX_TICKET` gets a plain id (it cannot be taken
over). It reads no clock and no random source (the nonce is given) and knows nothing of the core's records.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import struct
from collections.abc import Sequence
from typing import Final

from generaldomo.sansio.wire.events import Frame
from generaldomo.sansio.wire.limits import TASK_ID

__all__ = [
    "DIGEST_BYTES",
    "INSTANCE_BYTES",
    "MAC_BYTES",
    "MAX_TICKET",
    "NONCE_BYTES",
    "VERSION",
    "Ticket",
    "Tickets",
    "nonce",
    "request_digest",
]

NONCE_BYTES: Final = 16
VERSION: Final = b"\x01"
INSTANCE_BYTES: Final = 4
MAC_BYTES: Final = 16
DIGEST_BYTES: Final = 16
MAX_TICKET: Final = TASK_ID.high  # a task id's bound (generaldomo.sansio.wire.limits)
_LENGTH = struct.Struct(">H")
_HEAD = NONCE_BYTES + len(VERSION) + INSTANCE_BYTES  # what precedes the MAC
_FIXED = _HEAD + MAC_BYTES + 3 * _LENGTH.size + DIGEST_BYTES  # a ticket with three empty fields


def request_digest(description: bytes, body: Sequence[Frame]) -> bytes:
    """The digest of a request's description and payload frames (each length-prefixed, so frame boundaries
    count): two requests with the same digest asked for the same thing."""
    digest = hashlib.blake2b(digest_size=DIGEST_BYTES)
    for frame in (description, *body):
        digest.update(len(frame).to_bytes(8, "big"))
        digest.update(frame)
    return digest.digest()


def nonce(task_id: bytes) -> bytes:
    """What names a task in a worker's acknowledgements: the first 16 bytes of its id."""
    return task_id[:NONCE_BYTES]


@dataclasses.dataclass(frozen=True, slots=True)
class Ticket:
    """What a verified ticket says."""

    instance: bytes
    service: str
    owner: str | None
    request_id: bytes
    digest: bytes


class Tickets:
    """Issues and checks the tickets of broker ``instance`` with the hand-over ``key``."""

    def __init__(self, key: bytes, instance: bytes) -> None:
        if len(instance) != INSTANCE_BYTES:
            raise ValueError(f"a broker instance is {INSTANCE_BYTES} bytes, not {len(instance)}")
        self._key = key
        self.instance = instance

    def _mac(self, head: bytes, rest: bytes) -> bytes:
        return hashlib.blake2b(head + rest, digest_size=MAC_BYTES, key=self._key).digest()

    def issue(self, random_id: bytes, service: str, owner: str | None, request_id: bytes, digest: bytes) -> bytes:
        """A ticket for a task whose plain id would be ``random_id`` (16 random bytes, its nonce); ``random_id``
        itself when the fields do not fit in :data:`MAX_TICKET`."""
        name, key = service.encode(), (owner or "").encode()
        if _FIXED + len(name) + len(key) + len(request_id) > MAX_TICKET:
            return random_id
        rest = b"".join(_LENGTH.pack(len(field)) + field for field in (name, key, request_id)) + digest
        head = random_id + VERSION + self.instance
        return head + self._mac(head, rest) + rest

    def read(self, task_id: bytes) -> Ticket | None:
        """What ``task_id`` says if it is a ticket made with this key (by any instance); None otherwise."""
        if not _FIXED <= len(task_id) <= MAX_TICKET or task_id[NONCE_BYTES : NONCE_BYTES + 1] != VERSION:
            return None
        head, mac, rest = task_id[:_HEAD], task_id[_HEAD : _HEAD + MAC_BYTES], task_id[_HEAD + MAC_BYTES :]
        if not hmac.compare_digest(mac, self._mac(head, rest)):
            return None
        try:
            fields: list[bytes] = []
            at = 0
            for _ in range(3):
                (size,) = _LENGTH.unpack_from(rest, at)
                fields.append(rest[at + _LENGTH.size : at + _LENGTH.size + size])
                at += _LENGTH.size + size
            name, owner, request_id = fields
            service, who = name.decode(), owner.decode()
        except (struct.error, UnicodeDecodeError):  # the MAC matched: only a bug of this module's gets here
            return None
        if len(rest) - at != DIGEST_BYTES:
            return None
        return Ticket(head[-INSTANCE_BYTES:], service, who or None, request_id, rest[at:])

"""What a peer's socket monitor says about its connection to the broker, and the cause it names.

Rules:

- A :class:`HandshakeWatch` is fed the events of libzmq's socket monitor (``feed(event, value)``, the numbers
  of ``zmq.h``, which are part of libzmq's stable API) and returns a :class:`HandshakeFailure` when a
  connection attempt failed in a way that trying again will not fix:

  - ``HANDSHAKE_FAILED_PROTOCOL`` with a mechanism mismatch: one side uses CURVE and the other does not;
  - ``HANDSHAKE_FAILED_AUTH``: the broker's ZAP handler refused this peer's key (the value is its status);
  - ``HANDSHAKE_FAILED_PROTOCOL`` otherwise, or ``DISCONNECTED`` during the handshake with no
    ``HANDSHAKE_FAILED_NO_DETAIL`` before it: libzmq ended the handshake itself (the broker's socket type does
    not match: it serves the other transport) and will not try again;
  - the broker closed the connection during the handshake (``HANDSHAKE_FAILED_NO_DETAIL``, libzmq then
    retries) :data:`DROPPED_AFTER` times in a row, with no handshake succeeded and no refused attempt between
    them: a broker of the other socket type (the other transport) does that, and so does a CURVE broker facing
    a plaintext peer or a wrong broker key. One such drop is no failure: a broker killed or restarted while a
    connection's handshake was under way does that once, and the attempts after it are refused (which resets
    the count) or succeed. Which event comes depends on timing, so the cause names both (the CLI asks the other
    transport to tell them apart).

- ``HANDSHAKE_SUCCEEDED`` clears the failure; ``refused`` says that the last attempts found nothing
  listening (connection refused). :data:`UNREACHABLE_AFTER` refused attempts in a row on a socket that never
  completed a handshake (about half a second: libzmq retries every 100 ms or so) are the failure ``unreachable``
  (a wrong endpoint or port, or no broker running); the next connection that is accepted clears it. A broker may
  start later, so what is done about it is the peer's: a client fails its requests unless told to wait for a
  broker, a worker logs it once and keeps trying.

It knows nothing of sockets, threads or clocks: the IO layer reads the monitor and feeds it.
"""

from __future__ import annotations

import dataclasses
from typing import Final

__all__ = [
    "CLOSED",
    "CONNECTED",
    "CONNECT_RETRIED",
    "CRYPTOGRAPHIC",
    "DISCONNECTED",
    "DROPPED_AFTER",
    "HANDSHAKE_FAILED_AUTH",
    "HANDSHAKE_FAILED_NO_DETAIL",
    "HANDSHAKE_FAILED_PROTOCOL",
    "HANDSHAKE_SUCCEEDED",
    "MECHANISM_MISMATCH",
    "UNREACHABLE",
    "UNREACHABLE_AFTER",
    "WATCHED",
    "HandshakeFailure",
    "HandshakeWatch",
    "unreachable",
]

# Event numbers (zmq.h, ZMQ_EVENT_*).
CONNECTED: Final = 0x0001
CONNECT_RETRIED: Final = 0x0004
CLOSED: Final = 0x0080
DISCONNECTED: Final = 0x0200
HANDSHAKE_FAILED_NO_DETAIL: Final = 0x0800
HANDSHAKE_SUCCEEDED: Final = 0x1000
HANDSHAKE_FAILED_PROTOCOL: Final = 0x2000
HANDSHAKE_FAILED_AUTH: Final = 0x4000
WATCHED: Final = (
    CONNECTED
    | CONNECT_RETRIED
    | CLOSED
    | DISCONNECTED
    | HANDSHAKE_FAILED_NO_DETAIL
    | HANDSHAKE_SUCCEEDED
    | HANDSHAKE_FAILED_PROTOCOL
    | HANDSHAKE_FAILED_AUTH
)
UNREACHABLE_AFTER: Final = 4  # refused connection attempts in a row that make the failure "unreachable"
DROPPED_AFTER: Final = 3  # connections in a row closed during their handshake that make the failure "handshake"
MECHANISM_MISMATCH: Final = 0x11000002  # ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH
CRYPTOGRAPHIC: Final = 0x11000001  # ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC


@dataclasses.dataclass(frozen=True, slots=True)
class HandshakeFailure:
    """Why a connection to the broker cannot work as configured: ``kind`` (``curve``: CURVE on one side only;
    ``key``: the broker refused this peer's key; ``handshake``: the broker dropped the handshake, as one of the
    other transport does, or a CURVE broker facing plaintext or a wrong broker key; ``unreachable``: nothing
    accepts connections at the endpoint) and a sentence naming the causes and their fixes."""

    kind: str
    cause: str


UNREACHABLE: Final = "unreachable"  # the kind of failure when nothing accepts connections at the endpoint


def unreachable(endpoint: str, transport: str) -> HandshakeFailure:
    """The failure ``unreachable`` at ``endpoint``: its sentence says what to check."""
    return HandshakeFailure(
        UNREACHABLE,
        f"nothing accepts connections at {endpoint}: is a broker running, and is this the endpoint (host and "
        f"port, or ipc path) it binds for the {transport} transport?",
    )


@dataclasses.dataclass(slots=True)
class HandshakeWatch:
    """One peer socket's connection state, from its monitor events; see the module docstring."""

    endpoint: str
    transport: str
    curve: bool  # this peer uses CURVE
    failure: HandshakeFailure | None = None
    succeeded: bool = False  # a handshake has succeeded on the current connection
    ever_succeeded: bool = False
    refused: bool = False  # the last attempt found nothing listening
    refusals: int = 0  # refused attempts since the last accepted connection
    drops: int = 0  # connections closed during their handshake since a success or a refused attempt
    _greeting: bool = False  # connected, handshake not finished yet

    def feed(self, event: int, value: int) -> HandshakeFailure | None:
        """Take one monitor event; the failure it reveals, if it reveals one."""
        if event == CONNECTED:
            self._greeting, self.refused, self.succeeded, self.refusals = True, False, False, 0
            if self.failure is not None and self.failure.kind == UNREACHABLE:
                self.failure = None  # something accepts connections there now
            return None
        if event in (CONNECT_RETRIED, CLOSED):
            self.refused = not self._greeting
            if event == CLOSED and self.refused:
                self.drops = 0  # a refused attempt: the broker that dropped the handshake went away
            if event == CONNECT_RETRIED and self.refused:
                return self._refused()
            return None
        if event == HANDSHAKE_SUCCEEDED:
            self._greeting, self.failure, self.drops = False, None, 0
            self.succeeded = self.ever_succeeded = True
            return None
        failure = self._failure(event, value)
        if event in (DISCONNECTED, HANDSHAKE_FAILED_NO_DETAIL, HANDSHAKE_FAILED_PROTOCOL, HANDSHAKE_FAILED_AUTH):
            self._greeting = False
            self.succeeded = False
        if failure is not None:
            self.failure = failure
        return failure

    def _refused(self) -> HandshakeFailure | None:
        """One more refused attempt: the failure ``unreachable`` once they are :data:`UNREACHABLE_AFTER` in a row
        on a socket that never completed a handshake (returned once, when it begins)."""
        self.refusals += 1
        if self.ever_succeeded or self.failure is not None or self.refusals < UNREACHABLE_AFTER:
            return None
        self.failure = unreachable(self.endpoint, self.transport)
        return self.failure

    def _failure(self, event: int, value: int) -> HandshakeFailure | None:
        at = f"the broker at {self.endpoint}"
        other = "server" if self.transport == "router" else "router"
        if event == HANDSHAKE_FAILED_AUTH:
            return HandshakeFailure(
                "key",
                f"{at} refused this peer's CURVE key (ZAP status {value}): its public key is not in the broker's "
                "--clients, --workers or --admins directory",
            )
        if event == HANDSHAKE_FAILED_PROTOCOL and value == MECHANISM_MISMATCH:
            if self.curve:
                return HandshakeFailure(
                    "curve", f"{at} does not use CURVE (it is plaintext): connect without --curve-server-key"
                )
            return HandshakeFailure(
                "curve", f"{at} uses CURVE: give its public key (--curve-server-key, or server_key=...)"
            )
        if event == HANDSHAKE_FAILED_NO_DETAIL:
            self.drops += 1
        ended = event == HANDSHAKE_FAILED_PROTOCOL or (event == DISCONNECTED and self._greeting)
        if ended or (event == HANDSHAKE_FAILED_NO_DETAIL and self.drops >= DROPPED_AFTER):
            # A broker of the other socket type and a CURVE broker facing a plaintext peer (or a wrong key) both
            # drop the handshake; which of the two comes first depends on timing.
            if self.curve:
                return HandshakeFailure(
                    "handshake",
                    f"{at} did not accept the CURVE handshake: is --curve-server-key (server_key) the broker's "
                    f"public key? (or it serves the {other} transport: try --transport {other})",
                )
            return HandshakeFailure(
                "handshake",
                f"{at} dropped the handshake: it serves the {other} transport (try --transport {other}), or it "
                "uses CURVE (give its public key with --curve-server-key, or server_key=...)",
            )
        return None

"""The handshake watch fed the monitor event sequences libzmq 4.3 gives (seen on real sockets): a broker killed
while a connection's handshake was under way, a broker that drops every handshake, and libzmq ending the handshake
itself against a broker of the other socket type."""

from __future__ import annotations

from generaldomo.sansio.peer.handshake import (
    CLOSED,
    CONNECT_RETRIED,
    CONNECTED,
    DISCONNECTED,
    DROPPED_AFTER,
    HANDSHAKE_FAILED_AUTH,
    HANDSHAKE_FAILED_NO_DETAIL,
    HANDSHAKE_FAILED_PROTOCOL,
    HANDSHAKE_SUCCEEDED,
    MECHANISM_MISMATCH,
    HandshakeFailure,
    HandshakeWatch,
)

ENDPOINT = "tcp://127.0.0.1:5555"
# The broker closes a connection during its handshake (killed, or it drops the handshake): libzmq retries.
DROP = ((CONNECTED, 13), (HANDSHAKE_FAILED_NO_DETAIL, 104), (DISCONNECTED, 13), (CONNECT_RETRIED, 138))
REFUSED = ((CLOSED, 15), (CONNECT_RETRIED, 111))  # nothing listening: the attempt is refused
SUCCESS = ((CONNECTED, 13), (HANDSHAKE_SUCCEEDED, 0))


def fed(*sequences: tuple[tuple[int, int], ...], curve: bool = False) -> tuple[HandshakeWatch, list[HandshakeFailure]]:
    watch = HandshakeWatch(ENDPOINT, "server", curve)
    revealed = [f for events in sequences for event, value in events if (f := watch.feed(event, value)) is not None]
    return watch, revealed


def test_one_drop_then_refused_attempts_is_no_failure() -> None:
    """A broker killed during a handshake: one drop, then nothing listens until it is back."""
    watch, revealed = fed(DROP, REFUSED, REFUSED)
    assert revealed == [] and watch.failure is None and watch.drops == 0 and watch.refused


def test_one_drop_then_success_is_no_failure() -> None:
    watch, revealed = fed(DROP, SUCCESS)
    assert revealed == [] and watch.failure is None and watch.succeeded and watch.drops == 0


def test_drops_in_a_row_are_the_failure_handshake() -> None:
    watch, revealed = fed(*[DROP] * (DROPPED_AFTER - 1))
    assert revealed == [] and watch.failure is None and watch.drops == DROPPED_AFTER - 1
    watch, revealed = fed(*[DROP] * DROPPED_AFTER)
    assert [f.kind for f in revealed] == ["handshake"] and watch.failure == revealed[0]
    assert f"the broker at {ENDPOINT} dropped the handshake: it serves the router transport" in revealed[0].cause
    _, revealed = fed(*[DROP] * DROPPED_AFTER, curve=True)
    assert [f.kind for f in revealed] == ["handshake"] and "did not accept the CURVE handshake" in revealed[0].cause


def test_a_refused_attempt_or_a_success_between_drops_starts_the_count_afresh() -> None:
    between = [*[DROP] * (DROPPED_AFTER - 1)]
    for reset in (REFUSED, SUCCESS):
        watch, revealed = fed(*between, reset, *between)
        assert revealed == [] and watch.failure is None and watch.drops == DROPPED_AFTER - 1
        _, revealed = fed(*between, reset, *between, DROP)
        assert [f.kind for f in revealed] == ["handshake"]


def test_libzmq_ending_the_handshake_itself_is_the_failure_at_once() -> None:
    """Against a broker of the other socket type libzmq gives DISCONNECTED with no HANDSHAKE_FAILED_NO_DETAIL and
    does not retry; a protocol error or the broker's ZAP refusal is as definite."""
    _, revealed = fed(((CONNECTED, 13), (DISCONNECTED, 13)))
    assert [f.kind for f in revealed] == ["handshake"] and "it serves the router transport" in revealed[0].cause
    _, revealed = fed(((CONNECTED, 13), (HANDSHAKE_FAILED_PROTOCOL, 0x11000003)))
    assert [f.kind for f in revealed] == ["handshake"]
    _, revealed = fed(((CONNECTED, 13), (HANDSHAKE_FAILED_PROTOCOL, MECHANISM_MISMATCH)))
    assert [f.kind for f in revealed] == ["curve"] and "uses CURVE" in revealed[0].cause
    _, revealed = fed(((CONNECTED, 13), (HANDSHAKE_FAILED_AUTH, 400)), curve=True)
    assert [f.kind for f in revealed] == ["key"] and "ZAP status 400" in revealed[0].cause


def test_a_disconnect_after_the_handshake_is_no_failure() -> None:
    watch, revealed = fed(SUCCESS, ((DISCONNECTED, 13), (CONNECT_RETRIED, 120)), SUCCESS)
    assert revealed == [] and watch.failure is None and watch.ever_succeeded

"""The C accelerator (generaldomo.io._speedups) against the pure-Python path it stands in for, on real sockets.

Each test runs both paths side by side (a link made with ``accelerate=False`` is pure Python) and checks that
they agree: the same messages in the same order, the same drops counted. Under ``GENERALDOMO_PURE_PYTHON=1``
(tox env ``pure``) the accelerator must be off; otherwise it must be built and in use, so that CI never runs
the suite on the pure path by accident.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import zmq
from curve_keys import Keyring
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from generaldomo import errors
from generaldomo.io import inproc, speedups
from generaldomo.io.auth import BrokerSecurity, ZapHandler
from generaldomo.io.broker import waiter
from generaldomo.io.hub.links import BATCH_BYTES, Link, Received, RouterLink, ServerLink
from generaldomo.sansio.wire import codec

pytestmark = pytest.mark.pure  # runs again in env pure, on the pure-Python path

PURE = os.environ.get(speedups.PURE_PYTHON, "") not in ("", "0")
native = pytest.mark.skipif(speedups.native is None, reason="pure-Python run (GENERALDOMO_PURE_PYTHON)")
_names = itertools.count()
# frames below the smallest byte limit tested (libzmq's MAXMSGSIZE, per frame, is set to it)
frame = st.one_of(st.binary(max_size=40), st.sampled_from([b"", b"MDPC01", b"GDPC01", b"MDPW01", b"\x00\x01"]))
# a frame-packed part: valid packings of random frames, or random bytes (mostly malformed)
part = st.one_of(st.lists(st.binary(max_size=300), max_size=12).map(codec.encode), st.binary(max_size=64))


def test_the_accelerator_is_in_use_unless_pure_python_is_forced() -> None:
    if PURE:
        assert speedups.native is None and speedups.PURE_PYTHON in speedups.description
    else:  # CI builds it: a silent fall-back to pure Python would leave the C path untested
        assert speedups.native is not None, speedups.description
        assert speedups.native_draft, "the project's libzmq has the draft API"


def test_binding_a_library_that_is_not_loaded_is_refused(tmp_path) -> None:
    if speedups.native is None:
        pytest.skip("pure-Python run")
    with pytest.raises(OSError, match="not loaded"):
        speedups.native.bind(str(tmp_path / "libnothing.so"), zmq.ZMQError)


@native
@given(st.lists(st.lists(st.binary(max_size=300), max_size=20)))
def test_encode_matches_the_codec(messages: list[list[bytes]]) -> None:
    assert speedups.native is not None
    for frames in messages:
        assert speedups.native.encode(frames) == codec.encode(frames)


@native
@given(part, st.one_of(st.none(), st.integers(0, 8)))
def test_decode_matches_the_codec(data: bytes, max_frames: int | None) -> None:
    assert speedups.native is not None
    try:
        expected: list[bytes] | type[Exception] = codec.decode(data, max_frames)
    except errors.CodecError as error:
        expected = type(error)
    try:
        limit = -1 if max_frames is None else max_frames
        got: list[bytes] | type[Exception] = speedups.native.decode(
            data, limit, errors.TooManyFrames, errors.CodecError
        )
    except errors.CodecError as error:
        got = type(error)
    assert got == expected


def _pair(kind: type[Link], max_frames: int, max_bytes: int) -> tuple[Link, Link]:
    context = zmq.Context.instance()
    fast, slow = (
        kind(context, [f"inproc://speedups-{next(_names)}"], max_bytes, max_frames=max_frames, accelerate=accelerate)
        for accelerate in (True, False)
    )
    assert fast.accelerated and not slow.accelerated
    return fast, slow


def _read_until(link: Link, sentinel: bytes, timeout: float = 5.0) -> list[Received]:
    """Every message up to (without) the one whose last frame is ``sentinel``."""
    got: list[Received] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for message in link.recv_batch(256):
            if message[1][-1:] == [sentinel]:
                return got
            got.append(message)
        link.socket.poll(50)
    raise AssertionError(f"the sentinel never arrived ({len(got)} messages)")


@native
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.lists(frame, min_size=1, max_size=12), min_size=1, max_size=15), st.integers(2, 8), st.integers(40, 400)
)
def test_router_paths_agree(messages: list[list[bytes]], max_frames: int, max_bytes: int) -> None:
    def feed(peer: zmq.Socket[bytes], link: Link) -> None:
        peer.setsockopt(zmq.IDENTITY, b"\xffpeer")
        peer.connect(link.endpoints[0])
        for frames in [*messages, [b"GDPC01", b"end"]]:
            peer.send_multipart(frames)

    fast, slow = _pair(RouterLink, max_frames, max_bytes)
    got = _both_read(fast, slow, zmq.DEALER, feed)
    assert got[0] == got[1]


@native
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(part, min_size=1, max_size=15), st.integers(1, 8))
@pytest.mark.needs_draft
def test_server_paths_agree(parts: list[bytes], max_frames: int) -> None:
    def feed(peer: zmq.Socket[bytes], link: Link) -> None:
        peer.connect(inproc.resolve(link.endpoints[0]))  # where a thread-safe socket reaches it
        for data in [*parts, codec.encode([b"end"])]:
            peer.send(data)

    fast, slow = _pair(ServerLink, max_frames, -1)
    got = _both_read(fast, slow, zmq.CLIENT, feed)
    assert [frames for _, frames, _ in got[0]] == [frames for _, frames, _ in got[1]]  # routing ids differ


@pytest.fixture(scope="module")
def curve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[zmq.Context[bytes], BrokerSecurity, Keyring]]:
    """A context whose ZAP handler admits the test keys, their broker security, and the keys (one per module: the
    examples below share it)."""
    keyring = Keyring(Path(tmp_path_factory.mktemp("speedups-curve")))
    security = keyring.security()
    context: zmq.Context[bytes] = zmq.Context()
    zap = ZapHandler(context, security).start()
    yield context, security, keyring
    zap.stop()
    context.term()


def _curve_pair(
    curve: tuple[zmq.Context[bytes], BrokerSecurity, Keyring], kind: type[Link], max_frames: int, max_bytes: int
) -> tuple[Link, Link]:
    """An accelerated and a pure-Python CURVE link (tcp: CURVE needs a real connection)."""
    context, security, _ = curve
    fast, slow = (
        kind(context, ["tcp://127.0.0.1:*"], max_bytes, max_frames=max_frames, security=security, accelerate=accelerate)
        for accelerate in (True, False)
    )
    assert fast.accelerated and not slow.accelerated
    return fast, slow


# frames of a CURVE link's messages: below its byte limit's minimum (MAXMSGSIZE must let the handshake through)
curve_frame = st.one_of(st.binary(max_size=400), st.sampled_from([b"", b"GDPC01", b"\x00\x01"]))


@native
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.lists(curve_frame, min_size=1, max_size=12), min_size=1, max_size=10),
    st.integers(2, 8),
    st.integers(1000, 3000),
)
def test_curve_router_paths_agree(curve, messages: list[list[bytes]], max_frames: int, max_bytes: int) -> None:
    def feed(peer: zmq.Socket[bytes], link: Link) -> None:
        peer.setsockopt(zmq.IDENTITY, b"\xffpeer")
        peer.connect(link.endpoints[0])
        for frames in [*messages, [b"GDPC01", b"end"]]:
            peer.send_multipart(frames)

    fast, slow = _curve_pair(curve, RouterLink, max_frames, max_bytes)
    got = _both_read(fast, slow, zmq.DEALER, feed, curve[2].context("client"))
    assert got[0] == got[1]
    assert all(credential is not None and credential.key == got[0][0][2].key for _, _, credential in got[0])


@native
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(part, min_size=1, max_size=10), st.integers(1, 8))
@pytest.mark.needs_draft
def test_curve_server_paths_agree(curve, parts: list[bytes], max_frames: int) -> None:
    def feed(peer: zmq.Socket[bytes], link: Link) -> None:
        peer.connect(link.endpoints[0])
        for data in [*parts, codec.encode([b"end"])]:
            peer.send(data)

    fast, slow = _curve_pair(curve, ServerLink, max_frames, -1)
    got = _both_read(fast, slow, zmq.CLIENT, feed, curve[2].context("admin"))
    assert [(frames, credential) for _, frames, credential in got[0]] == [
        (frames, credential) for _, frames, credential in got[1]
    ]  # routing ids differ
    assert all(credential is not None for _, _, credential in got[0])


def _both_read(
    fast: Link,
    slow: Link,
    kind: int,
    feed: Callable[[zmq.Socket[bytes], Link], None],
    context: zmq.Context[bytes] | None = None,
) -> list[list[Received]]:
    """What each link reads from a peer socket of ``kind`` (in ``context``, which it then ends; default: the
    shared one) that ``feed`` sends the same messages through; the links count the same drops. Closes
    everything."""
    peers = [(context or zmq.Context.instance()).socket(kind) for _ in range(2)]
    try:
        for peer, link in zip(peers, (fast, slow), strict=True):
            feed(peer, link)
        got = [_read_until(link, b"end") for link in (fast, slow)]
        assert fast.take_counts() == slow.take_counts()
        return got
    finally:
        for peer in peers:
            peer.close(0)
        fast.close(0)
        slow.close(0)
        if context is not None:
            context.term()


@pytest.mark.parametrize("accelerate", [True, False])
def test_a_batch_is_bounded_in_bytes(accelerate: bool) -> None:
    link = RouterLink(zmq.Context.instance(), [f"inproc://speedups-{next(_names)}"], accelerate=accelerate)
    peer = zmq.Context.instance().socket(zmq.DEALER)
    peer.connect(link.endpoints[0])
    big = b"x" * (BATCH_BYTES // 3 + 1)
    try:
        for _ in range(6):
            peer.send_multipart([b"GDPC01", big])
        assert link.socket.poll(5000)
        time.sleep(0.2)  # let all six arrive, so that only the bound can cut the first batch
        first = link.recv_batch(256)
        if accelerate and link.accelerated:
            assert len(first) == 3  # stops once it holds BATCH_BYTES
        rest: list[Received] = []
        for _ in range(100):
            rest += link.recv_batch(256)
            if len(first) + len(rest) == 6:
                break
            link.socket.poll(50)
        assert len(first) + len(rest) == 6
    finally:
        peer.close(0)
        link.close(0)


@pytest.mark.parametrize("accelerate", [True, False])
def test_sends_to_gone_and_full_peers_are_counted(accelerate: bool) -> None:
    context = zmq.Context.instance()
    link = RouterLink(context, ["tcp://127.0.0.1:*"], accelerate=accelerate)
    link.socket.setsockopt(zmq.SNDHWM, 1)  # before the peer connects, so that its pipe gets it
    peer = context.socket(zmq.DEALER)
    peer.setsockopt(zmq.RCVHWM, 1)
    peer.setsockopt(zmq.IDENTITY, b"\xffslow")
    peer.connect(link.endpoints[0])
    try:
        peer.send_multipart([b"GDPC01", b"hello"])
        assert link.socket.poll(5000)
        address = link.recv_batch(1)[0][0]
        link.send(b"\xffnobody", [b"x"])
        link.send((b"\xffnobody", b"hop"), [b"x"])  # an envelope route too
        for _ in range(20_000):  # 80 MB: more than the pipes and the kernel's buffers hold
            link.send(address, [b"GDPC01", b"x" * 4096])
        counts = link.take_counts()
        assert counts["sends_dropped_gone"] == 2
        assert counts["sends_dropped_full"] > 0
        assert peer.poll(5000) and peer.recv_multipart() == [b"GDPC01", b"x" * 4096]
    finally:
        peer.close(0)
        link.close(0)


@pytest.mark.parametrize("accelerate", [True, False])
def test_a_closed_link_raises_instead_of_touching_freed_memory(accelerate: bool) -> None:
    link = RouterLink(zmq.Context.instance(), [f"inproc://speedups-{next(_names)}"], accelerate=accelerate)
    link.close(0)
    with pytest.raises(zmq.ZMQError):
        link.recv_batch(1)
    with pytest.raises(zmq.ZMQError):
        link.send(b"\xffsomebody", [b"x"])


@pytest.mark.parametrize("pure", [True, False])
def test_the_waiter_reports_readable_sockets_as_bits(pure: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if pure:
        monkeypatch.setattr(speedups, "native", None)
    context = zmq.Context.instance()
    pulls = [context.socket(zmq.PULL) for _ in range(3)]
    push = context.socket(zmq.PUSH)
    names = [f"inproc://speedups-wait-{next(_names)}" for _ in pulls]
    try:
        for name, pull in zip(names, pulls, strict=True):
            pull.bind(name)
        read, write = os.pipe()
        wait = waiter(pulls, (read,))
        assert wait(10) == 0
        push.connect(names[2])
        push.send(b"x")
        assert wait(5000) == 0b100
        os.write(write, b"x")
        assert wait(5000) == 0b1100  # the pipe is the bit after the sockets'
        os.close(read)
        os.close(write)
    finally:
        push.close(0)
        for pull in pulls:
            pull.close(0)


def test_the_random_pool_never_repeats_bytes() -> None:
    from generaldomo.io.broker import RandomPool

    pool = RandomPool(chunk=64)
    drawn = [pool(16) for _ in range(1_000)] + [pool(100)]  # several refills, and a draw larger than a chunk
    assert all(len(d) == 16 for d in drawn[:-1]) and len(drawn[-1]) == 100
    assert len(set(drawn)) == len(drawn)


@native
def test_send_multipart_reports_a_full_queue_instead_of_blocking() -> None:
    assert speedups.native is not None
    lonely = zmq.Context.instance().socket(zmq.DEALER)  # connected to nothing: no pipe takes a message
    try:
        assert speedups.native.send_multipart(lonely.underlying, [b"a", b"b"]) == zmq.EAGAIN
        with pytest.raises(ValueError):
            speedups.native.send_multipart(lonely.underlying, [])
        with pytest.raises(TypeError):
            speedups.native.send_multipart(lonely.underlying, [b"a", "not bytes"])
    finally:
        lonely.close(0)


@native
def test_readable_agrees_with_pyzmqs_events() -> None:
    assert speedups.native is not None
    context = zmq.Context.instance()
    name = f"inproc://readable-{next(_names)}-{os.getpid()}"
    reader, writer = context.socket(zmq.DEALER), context.socket(zmq.DEALER)
    try:
        reader.bind(name)
        writer.connect(name)
        assert speedups.native.readable(reader.underlying) is False
        assert not reader.getsockopt(zmq.EVENTS) & zmq.POLLIN
        writer.send_multipart([b"a", b"b"])
        deadline = time.monotonic() + 30
        while not speedups.native.readable(reader.underlying) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert speedups.native.readable(reader.underlying) is True
        assert reader.getsockopt(zmq.EVENTS) & zmq.POLLIN
        assert reader.recv_multipart() == [b"a", b"b"]
        assert speedups.native.readable(reader.underlying) is False
    finally:
        reader.close(0)
        writer.close(0)

"""The link layer against real peer sockets."""

from __future__ import annotations

import logging
import time

import pytest
import zmq

from generaldomo.io.hub.links import RouterLink, ServerLink
from generaldomo.sansio.wire import codec

pytestmark = pytest.mark.pure  # runs again in env pure, on the pure-Python path


def recv_within(link, timeout: float = 5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        message = link.recv()
        if message is not None:
            return message[:2]  # (address, frames); the credential is None without CURVE
        link.socket.poll(50)
    raise AssertionError("nothing arrived")


def test_router_link_keeps_the_raw_identity_as_address() -> None:
    # The earlier prototype stored a hex-encoded identity, so replies never arrived.
    context = zmq.Context.instance()
    link = RouterLink(context, ["tcp://127.0.0.1:*"])
    peer = context.socket(zmq.DEALER)
    identity = b"\xff\x00id"  # raw bytes (ids starting with 0 are refused: libzmq reserves them)
    peer.setsockopt(zmq.IDENTITY, identity)
    peer.connect(link.endpoints[0])
    try:
        peer.send_multipart([b"", b"a", b""])
        address, frames = recv_within(link)
        assert (address, frames) == (identity, [b"", b"a", b""])
        link.send(address, [b"back", b""])
        assert peer.poll(5000) and peer.recv_multipart() == [b"back", b""]
    finally:
        peer.close(0)
        link.close()


@pytest.mark.needs_draft
def test_server_link_packs_frames_and_routes_by_id(caplog: pytest.LogCaptureFixture) -> None:
    context = zmq.Context.instance()
    link = ServerLink(context, ["tcp://127.0.0.1:*"])
    peer = context.socket(zmq.CLIENT)
    peer.connect(link.endpoints[0])
    try:
        with caplog.at_level(logging.WARNING):
            peer.send(b"\x05ab")  # announces 5 bytes, has 2: dropped with a log line
            peer.send(codec.encode([b"", b"x" * 300, b""]))
            address, frames = recv_within(link)
        assert frames == [b"", b"x" * 300, b""]
        assert "does not unpack" in caplog.text
        link.send(address, [b"r", b""])
        assert peer.poll(5000) and codec.decode(peer.recv()) == [b"r", b""]
        link.send(address + 1, [b"nobody"])  # a gone peer is not an error
    finally:
        peer.close(0)
        link.close()


def test_binding_reports_concrete_endpoints(tmp_path, endpoint_for) -> None:
    named = endpoint_for("inproc")
    link = RouterLink(zmq.Context.instance(), ["tcp://127.0.0.1:*", f"ipc://{tmp_path}/x.sock", named])
    try:
        tcp, ipc, inproc = link.endpoints
        assert tcp.startswith("tcp://127.0.0.1:") and not tcp.endswith(":*")
        assert ipc == f"ipc://{tmp_path}/x.sock" and inproc == named
    finally:
        link.close()

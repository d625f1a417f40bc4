"""libzmq patch ``pollsig`` (generaldomo.draft): pollers of thread-safe sockets reuse their thread's signaler."""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import threading
from collections.abc import Callable

import pytest
import zmq

from generaldomo import draft


def _patched() -> bool:
    try:
        from zmq.backend.cython import _zmq

        return hasattr(ctypes.CDLL(_zmq.__file__), draft.POLL_SYMBOL)
    except (ImportError, OSError):
        return False


pytestmark = pytest.mark.skipif(not _patched(), reason="this libzmq lacks generaldomo's poll signaler patch")


def _woken_by_a_message(context: zmq.Context[zmq.Socket[bytes]], name: str, timeout_ms: int | None = 30_000) -> bool:
    """Poll a SERVER socket (``timeout_ms``, None: without limit) while another thread sends it a message; True
    if the poll saw it."""
    server, client = context.socket(zmq.SERVER), context.socket(zmq.CLIENT)
    for sock in (server, client):
        sock.linger = 0
    server.bind(f"inproc://{name}")
    client.connect(f"inproc://{name}")
    poller = zmq.Poller()
    poller.register(server, zmq.POLLIN)
    assert poller.poll(0) == []  # an empty first poll: the signaler is in use from here on
    sender = threading.Timer(0.2, client.send, (b"x",))
    sender.start()
    try:
        return bool(poller.poll(timeout_ms))
    finally:
        sender.join(5)
        server.close()
        client.close()


def _in_a_child(target: Callable[[], bool]) -> int | None:
    """Run ``target`` in a forked child (it polls without a timeout: a poll that is never woken hangs there, and
    is killed after 60 s); its exit code, 0 when ``target`` returned True."""
    child = multiprocessing.get_context("fork").Process(target=lambda: os._exit(0 if target() else 1))
    child.start()
    child.join(60)
    if child.is_alive():
        child.kill()
        child.join(10)
    return child.exitcode


def _five_polls() -> bool:
    context = zmq.Context()
    return all(_woken_by_a_message(context, f"reuse-{n}", None) for n in range(5))  # one signaler, reused


def test_each_message_wakes_a_poll_on_a_reused_signaler() -> None:
    assert _in_a_child(_five_polls) == 0


def test_a_forked_child_does_not_take_its_parents_signaler() -> None:
    # The parent's thread leaves a signaler behind; in a forked child that signaler sends nothing, so a poller
    # there that took it would never wake (with a timeout it would find the message only when that ran out).
    context = zmq.Context()
    try:
        assert _woken_by_a_message(context, "parent")
    finally:
        context.destroy()
    assert _in_a_child(lambda: _woken_by_a_message(zmq.Context(), "child", None)) == 0

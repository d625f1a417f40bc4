"""libzmq patch ``pollsig`` (generaldomo.draft): pollers of thread-safe sockets reuse their thread's signaler."""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import threading

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


def _woken_by_a_message(context: zmq.Context[zmq.Socket[bytes]], name: str) -> bool:
    """Poll a SERVER socket (up to 30 s) while another thread sends it a message; True if the poll saw it."""
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
        return bool(poller.poll(30_000))
    finally:
        sender.join(5)
        server.close()
        client.close()


def test_a_poll_is_woken_by_each_message_on_a_reused_signaler() -> None:
    context = zmq.Context()
    try:
        assert all(_woken_by_a_message(context, f"reuse-{n}") for n in range(5))
    finally:
        context.destroy()


def _child() -> None:
    context = zmq.Context()
    woken = _woken_by_a_message(context, "child")
    context.destroy()
    os._exit(0 if woken else 1)


def test_a_forked_child_does_not_take_its_parents_signaler() -> None:
    # The parent's thread leaves a signaler behind; in a forked child that signaler sends nothing, so a poller
    # there that took it would sleep through the message until its timeout.
    context = zmq.Context()
    try:
        assert _woken_by_a_message(context, "parent")
    finally:
        context.destroy()
    child = multiprocessing.get_context("fork").Process(target=_child)
    child.start()
    child.join(60)
    if child.is_alive():
        child.kill()
    assert child.exitcode == 0

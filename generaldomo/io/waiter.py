"""Waiting for sockets and file descriptors to be readable: the broker loop's and the peers' IO threads' wait.

This module owns that one call: :func:`waiter` gives a function of a timeout that returns which of its sockets
and file descriptors are readable as a bit mask, on the C accelerator's poll (:mod:`generaldomo.io.speedups`: no
list of events built per wake-up) or on pyzmq's ``Poller``. The caller keeps every socket open while it waits
(a closed socket's handle would dangle). It knows nothing of what the sockets carry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import zmq

from generaldomo.io import speedups

__all__ = ["waiter"]


def waiter(sockets: list[zmq.Socket[bytes]], fds: tuple[int, ...] = ()) -> Callable[[int], int]:
    """A function that waits up to its argument (ms) for any of ``sockets`` or file descriptors ``fds`` to be
    readable and returns which are, as a bit mask (bit i: ``sockets[i]``, then one bit per fd): the C
    accelerator's poll, or pyzmq's."""
    native = speedups.native
    if native is not None:
        poll, handles = native.poll, tuple(socket.underlying for socket in sockets)

        def wait_native(timeout_ms: int) -> int:  # a Python frame, so that profilers see the call
            return int(poll(handles, fds, timeout_ms))

        return wait_native
    # pyzmq's zmq_poll on a list made once (a Poller's poll is one Python call more per wake-up)
    items: list[tuple[Any, int]] = [(item, int(zmq.POLLIN)) for item in [*sockets, *fds]]
    bits: dict[Any, int] = {item: 1 << index for index, (item, _) in enumerate(items)}
    poll = zmq.backend.zmq_poll

    def wait(timeout_ms: int) -> int:
        ready = 0
        for item, _ in poll(items, timeout_ms):
            ready |= bits[item]
        return ready

    return wait

"""The minimal pure-Python MDP/0.1 forwarding loop: the floor a Python broker on pyzmq cannot go below.

One ROUTER socket, ``recv_multipart``/``send_multipart``, waiting workers in a deque, requests queued when none
waits. No reliability: heartbeats only so that strict workers stay connected (every 2.5 s to every known
worker), no expiry, no validation beyond the header. A benchmark reference, never a broker to use.
"""

from __future__ import annotations

import signal
import time
from collections import deque
from typing import Any

import zmq

CLIENT, WORKER = b"MDPC01", b"MDPW01"
READY, REQUEST, REPLY, HEARTBEAT, DISCONNECT = b"\x01", b"\x02", b"\x03", b"\x04", b"\x05"
HEARTBEAT_S = 2.5


class NativeSocket:
    """The two calls the loop makes, through generaldomo's C accelerator (a batch of messages per read)."""

    def __init__(self, sock: zmq.Socket[bytes]) -> None:
        from generaldomo.io import speedups

        if speedups.native is None:
            raise RuntimeError(f"no C accelerator: {speedups.description}")
        self.native, self.handle, self.batch = speedups.native, sock.underlying, deque[list[bytes]]()

    def recv_multipart(self) -> list[bytes]:
        if not self.batch:
            self.batch.extend(self.native.router_recv(self.handle, 256, 1 << 30, 1 << 30, 1 << 20))
        return self.batch.popleft() if self.batch else []

    def send_multipart(self, frames: list[bytes]) -> None:
        self.native.router_send(self.handle, frames[0], frames[1:])

    def has_more(self) -> bool:
        return bool(self.batch)


def serve(bind: str, native: bool = False) -> None:
    """Bind, print the endpoint, forward until SIGTERM (``native``: reading and writing through the C
    accelerator, the floor of a Python broker that uses it)."""
    sock = zmq.Context.instance().socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(bind)
    print(sock.getsockopt(zmq.LAST_ENDPOINT).decode(), flush=True)
    running = [True]
    signal.signal(signal.SIGTERM, lambda *_: running.__setitem__(0, False))
    waiting: dict[bytes, deque[bytes]] = {}  # service -> idle workers
    queued: dict[bytes, deque[list[bytes]]] = {}  # service -> [client, body...] waiting for a worker
    service_of: dict[bytes, bytes] = {}  # worker -> its service
    beat = time.monotonic() + HEARTBEAT_S
    io: Any = NativeSocket(sock) if native else sock
    while running[0]:
        if (native and io.has_more()) or sock.poll(int(HEARTBEAT_S * 1000)):
            frames = io.recv_multipart()
            if len(frames) >= 4 and frames[2] == CLIENT:
                _request(io, frames[0], frames[3], frames[4:], waiting, queued)
            elif len(frames) >= 4 and frames[2] == WORKER:
                _worker(io, frames, waiting, queued, service_of)
        if time.monotonic() > beat:
            for worker in service_of:
                sock.send_multipart([worker, b"", WORKER, HEARTBEAT])
            beat = time.monotonic() + HEARTBEAT_S
    sock.close()


def _request(
    sock: zmq.Socket,
    client: bytes,
    service: bytes,
    body: list[bytes],
    waiting: dict[bytes, deque[bytes]],
    queued: dict[bytes, deque[list[bytes]]],
) -> None:
    idle = waiting.get(service)
    if idle:
        sock.send_multipart([idle.popleft(), b"", WORKER, REQUEST, client, b"", *body])
    else:
        queued.setdefault(service, deque()).append([client, b"", *body])


def _worker(
    sock: zmq.Socket,
    frames: list[bytes],
    waiting: dict[bytes, deque[bytes]],
    queued: dict[bytes, deque[list[bytes]]],
    service_of: dict[bytes, bytes],
) -> None:
    worker, command = frames[0], frames[3]
    if command == READY and len(frames) > 4:
        service_of[worker] = frames[4]
    elif command == REPLY and len(frames) > 6 and worker in service_of:
        sock.send_multipart([frames[4], b"", CLIENT, service_of[worker], *frames[6:]])
    elif command == DISCONNECT:
        service_of.pop(worker, None)
        return
    else:
        return
    service = service_of[worker]
    backlog = queued.get(service)
    if backlog:
        sock.send_multipart([worker, b"", WORKER, REQUEST, *backlog.popleft()])
    else:
        waiting.setdefault(service, deque()).append(worker)

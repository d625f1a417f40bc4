"""Peer connections: sending from many threads, read by one IO thread."""

from __future__ import annotations

import threading
import time

import zmq

from generaldomo.io.connection import connect
from generaldomo.sansio import codec


def test_sends_from_many_threads_all_arrive_intact(transport: str) -> None:
    context = zmq.Context.instance()
    server = context.socket(zmq.ROUTER if transport == "router" else zmq.SERVER)
    server.bind("tcp://127.0.0.1:*")
    connection = connect(server.getsockopt(zmq.LAST_ENDPOINT).decode(), transport, context)
    done = threading.Event()

    def io_loop() -> None:  # what Client and Worker do: one thread owns the socket
        poller = connection.adopt()
        while not done.is_set():
            poller.poll(100)
            connection.flush()
        connection.close(linger_ms=1000)

    io = threading.Thread(target=io_loop)
    io.start()
    senders = [
        threading.Thread(target=lambda n=n: [connection.send([b"%d" % n, b"%d" % i, b""]) for i in range(300)])
        for n in range(8)
    ]
    for thread in senders:
        thread.start()
    received = []
    deadline = time.monotonic() + 30
    while len(received) < 8 * 300 and time.monotonic() < deadline:
        if server.poll(100):
            received.append(server.recv_multipart()[1:] if transport == "router" else codec.decode(server.recv()))
    done.set()
    io.join(10)
    for thread in senders:
        thread.join(10)
    server.close(0)
    assert sorted(map(tuple, received)) == sorted((b"%d" % n, b"%d" % i, b"") for n in range(8) for i in range(300))
    for n in range(8):  # each thread's messages stay in its own order
        mine = [int(m[1]) for m in received if m[0] == b"%d" % n]
        assert mine == sorted(mine)

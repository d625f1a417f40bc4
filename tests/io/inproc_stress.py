"""Two-way traffic between a CLIENT and a SERVER socket over a real inproc pipe (libzmq issue 3048).

Several threads send on one CLIENT while another thread reads its replies, and a SERVER thread echoes each
message back. Small queues make the pipe's ends post to each other's mailbox often (activate_read, and
activate_write past the low-water mark). A stock libzmq halts here for good, usually within a few thousand
messages: run it in a process of its own, under a timeout. ``python tests/io/inproc_stress.py [SENDERS MESSAGES]``
prints the replies read and exits 0 once every reply has arrived.
"""

from __future__ import annotations

import sys
import threading

import zmq

HWM = 8  # messages per queue: the fewer, the more often the two ends signal each other


def run(senders: int, messages: int, endpoint: str = "inproc://generaldomo-stress") -> int:
    """Send ``messages`` from each of ``senders`` threads and echo them back; return the replies read."""
    context = zmq.Context()
    server, client = context.socket(zmq.SERVER), context.socket(zmq.CLIENT)
    for sock in (server, client):
        sock.sndhwm = sock.rcvhwm = HWM
        sock.linger = 0
    server.bind(endpoint)
    client.connect(endpoint)
    total = senders * messages
    replies = [0]

    def echo() -> None:
        for _ in range(total):
            frame = server.recv(copy=False)
            answer = zmq.Frame(frame.bytes)
            answer.routing_id = frame.routing_id
            server.send(answer)

    def send(n: int) -> None:
        for i in range(messages):
            client.send(b"%d-%d" % (n, i))

    def read() -> None:
        for _ in range(total):
            client.recv()
            replies[0] += 1

    threads = [threading.Thread(target=echo), threading.Thread(target=read)]
    threads += [threading.Thread(target=send, args=(n,)) for n in range(senders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    context.destroy()
    return replies[0]


def main(argv: list[str]) -> int:
    senders, messages = (int(argv[0]), int(argv[1])) if argv else (4, 20_000)
    replies = run(senders, messages)
    print(f"{replies} replies of {senders * messages}", flush=True)
    return 0 if replies == senders * messages else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

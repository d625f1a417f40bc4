"""Child process of tests/io/test_routing_ids.py: squat the next id a ROUTER broker will generate, then connect an
ordinary client. Prints ``served`` and exits 0 if the broker survives and answers; libzmq without the
routing-id guard aborts the process instead (SIGABRT)."""

from __future__ import annotations

import sys
import threading
import time

import zmq

from generaldomo import Broker, Client, Worker


def main() -> int:
    with Broker("router", ["tcp://127.0.0.1:*"]).start() as broker:
        endpoint = broker.endpoint("router", "tcp")
        worker = Worker(endpoint, "echo", lambda payload: payload)
        threading.Thread(target=worker.serve, daemon=True).start()
        context = zmq.Context.instance()
        probe = context.socket(zmq.DEALER)
        probe.connect(endpoint)
        probe.send_multipart([b"GDPW01", b"\x01", b"probe"])  # a worker's READY: the core records its address
        deadline = time.monotonic() + 30
        while not (seen := [w.peer.address for w in broker.core.workers.values() if w.description == b"probe"]):
            assert time.monotonic() < deadline, "the probe never registered"
            time.sleep(0.01)
        generated = int.from_bytes(seen[0][1:], "big")
        squatter = context.socket(zmq.DEALER)
        squatter.setsockopt(zmq.ROUTING_ID, b"\x00" + ((generated + 1) % 2**32).to_bytes(4, "big"))
        squatter.connect(endpoint)
        squatter.send_multipart([b"GDPC01", b"\x04"])
        time.sleep(0.5)  # the squatter's handshake completes before the client's
        with Client(endpoint) as client:
            assert client.request("echo", b"still serving", timeout=30).payload == b"still serving"
        worker.stop()
        for sock in (probe, squatter):
            sock.close(0)
    print("served", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

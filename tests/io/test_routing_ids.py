"""The routing-id guard: whatever ids peers choose, the ROUTER broker never aborts and keeps serving."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
import zmq
from waiting import eventually

from generaldomo import Client

pytestmark = pytest.mark.pure  # runs again in env pure, on the pure-Python path

HERE = Path(__file__).parent


def test_squatting_the_next_generated_id_leaves_the_broker_serving() -> None:
    # Unpatched libzmq aborts here (routing_socket_base_t::add_out_pipe): tools/draft_pyzmq.py patches it.
    child = subprocess.run([sys.executable, HERE / "squat.py"], capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, f"exit {child.returncode}: {child.stderr[-2000:]}"
    assert child.stdout.strip() == "served"


def test_a_chosen_id_in_the_reserved_range_is_refused(brokers, workers, caplog) -> None:
    broker = brokers("router", ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint("router", "tcp")
    workers(endpoint, "router")
    squatter = zmq.Context.instance().socket(zmq.DEALER)
    squatter.setsockopt(zmq.LINGER, 0)
    squatter.setsockopt(zmq.ROUTING_ID, b"\x00abc")  # generated ids are 0x00 + 4 bytes; this one was chosen
    squatter.connect(endpoint)
    with caplog.at_level(logging.WARNING, logger="generaldomo.io.hub.links"):
        for n in range(10):
            squatter.send_multipart([b"GDPC01", b"\x01", b"%d" % n, b"echo", b"mine"])
        eventually(lambda: broker.core.counters["dropped_reserved_id"] == 10, 30, "the squatter to be refused")
        with Client(endpoint) as client:
            assert client.request("echo", b"others", timeout=30).payload == b"others"
    squatter.close()
    assert broker.core.counters["requests"] == 1
    assert caplog.text.count("ids starting with 0") == 1


FIRST_ID = """\
import zmq
from generaldomo.io.hub.links import RouterLink
link = RouterLink(zmq.Context.instance(), ["tcp://127.0.0.1:*"])
peer = zmq.Context.instance().socket(zmq.DEALER)
peer.connect(link.endpoints[0])
peer.send_multipart([b"GDPC01", b"\\x04"])
assert link.socket.poll(30_000)
print(link.recv()[0].hex())
"""


def test_generated_ids_differ_between_processes() -> None:
    # libzmq never seeds rand(): unseeded, every process's first generated id is 006b8b4567
    first = [
        subprocess.run(
            [sys.executable, "-c", FIRST_ID], capture_output=True, text=True, timeout=60, cwd=HERE.parents[1]
        )
        for _ in range(2)
    ]
    assert all(run.returncode == 0 for run in first), [run.stderr for run in first]
    ids = {run.stdout.strip() for run in first}
    assert len(ids) == 2 and "006b8b4567" not in ids

"""Durable queues, with real processes: a broker on a ``--state-dir`` killed with kill -9 while it holds queued
detached requests (a generaldomo client that is gone) and MDP requests (an MDP/0.1 client with its own routing id),
and while workers run others, loses none of them: after the restart each is run once and answered once. The
write-ahead log the broker keeps there, damaged or cut short, costs only what it damaged: never a start.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
import zmq
from doc_blocks import named
from restart_harness import WAIT, BrokerProcess, python_runs, python_worker, stop_all

from generaldomo import Client
from generaldomo.sansio.wire import protocol

HEARTBEAT = 0.5
PEER = ["--heartbeat", str(HEARTBEAT), "--liveness", "4"]
RECOVER = ["--recovery", str(4 * HEARTBEAT)]
DETACHED, MDP = 12, 6


def documented(line: int, endpoint: str, state: Path) -> list[str]:
    """The arguments of the HA page's ``line``-th command, at ``endpoint`` on the state directory ``state``."""
    command = named("ha-state-dir").splitlines()[line].split()
    assert command[:2] == ["generaldomo", "broker"]
    swap = {"tcp://127.0.0.1:5555": endpoint, "/var/lib/generaldomo": str(state)}
    return [swap.get(word, word) for word in command[2:]]


def client(endpoint: str) -> Client:
    return Client(endpoint, heartbeat_interval=HEARTBEAT, fail_unknown=False, fail_unreachable=False)


def queued(endpoint: str, count: int) -> None:
    """Until the broker at ``endpoint`` reports ``count`` requests queued (bounded)."""
    deadline = time.monotonic() + WAIT
    with client(endpoint) as probe:
        while (seen := probe.status(timeout=WAIT)["broker"]["queued"]) < count:
            assert time.monotonic() < deadline, f"{seen} queued, not {count}"
            time.sleep(0.05)


def mdp_client(context: zmq.Context[zmq.Socket[bytes]], endpoint: str, identity: bytes) -> zmq.Socket[bytes]:
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.ROUTING_ID, identity)  # the broker answers it at this address after a restart too
    socket.setsockopt(zmq.LINGER, 0)
    socket.connect(endpoint)
    return socket


@pytest.mark.timeout(300)
def test_queued_detached_and_mdp_requests_survive_a_kill_9_and_run_once(tmp_path: Path) -> None:
    endpoint = f"ipc://{tmp_path}/broker.sock"
    runs = tmp_path / "runs"
    runs.mkdir()
    broker = BrokerProcess([*documented(0, endpoint, tmp_path / "state"), *PEER, *RECOVER], tmp_path / "broker.log")
    broker.start().wait_serving()
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    mdp = mdp_client(context, endpoint, b"mdp-" + uuid.uuid4().bytes)
    workers = []
    try:
        with client(endpoint) as gone:  # a client that submits and goes away: its requests wait for their fetch
            ids = [gone.submit("work", f"d{n}:0".encode(), detached=True).request_id for n in range(DETACHED)]
            queued(endpoint, DETACHED)
        for n in range(MDP):
            mdp.send_multipart(protocol.mdp_client_request(b"work", [f"m{n}:0".encode()]))
        queued(endpoint, DETACHED + MDP)
        broker.kill()

        broker.start().wait_serving()
        queued(endpoint, DETACHED + MDP)  # all of them, before any worker came
        workers = [python_worker(endpoint, "router", runs, tmp_path / "worker.log", *PEER)]
        mdp_answers = set()
        poller = zmq.Poller()
        poller.register(mdp, zmq.POLLIN)
        deadline = time.monotonic() + WAIT
        while len(mdp_answers) < MDP and time.monotonic() < deadline:
            if poller.poll(100):
                frames = mdp.recv_multipart()
                mdp_answers.add(frames[-1])
        assert mdp_answers == {f"ran m{n}".encode() for n in range(MDP)}
        with client(endpoint) as back:
            answers = [back.fetch(request_id, timeout=WAIT).payload for request_id in ids]
        assert answers == [f"ran d{n}".encode() for n in range(DETACHED)]
        assert all(python_runs(runs, f"d{n}") == 1 for n in range(DETACHED))
        assert all(python_runs(runs, f"m{n}") == 1 for n in range(MDP))
        with client(endpoint) as probe:
            report = probe.status(timeout=WAIT)["broker"]
        assert report["counters"]["tasks_restored"] == DETACHED + MDP
        journal = report["journal"]
        assert journal["fsync"] == "batch" and journal["commits"] >= 1 and journal["bytes"] > 0
        assert journal["written"] >= DETACHED + MDP  # the restored ones, then their ends and answers
    finally:
        mdp.close()
        context.term()
        broker.stop()
        stop_all(workers)


@pytest.mark.timeout(300)
def test_requests_running_and_queued_at_a_kill_9_under_load_are_answered_once_and_run_once(tmp_path: Path) -> None:
    """Detached requests arriving while workers run them, the broker killed in the middle: after the restart the
    running ones are handed over by their workers (not run again), the queued ones run, each answered once."""
    endpoint = f"ipc://{tmp_path}/broker.sock"
    runs = tmp_path / "runs"
    runs.mkdir()
    broker = BrokerProcess(
        ["--router", endpoint, "--state-dir", str(tmp_path / "state"), *PEER, *RECOVER], tmp_path / "broker.log"
    )
    broker.start().wait_serving()
    workers = [python_worker(endpoint, "router", runs, tmp_path / "worker.log", "--concurrency", "2", *PEER)]
    try:
        with client(endpoint) as gone:
            ids = [gone.submit("work", f"t{n}:300".encode(), detached=True).request_id for n in range(40)]
            deadline = time.monotonic() + WAIT
            while len(list(runs.iterdir())) < 4:  # some ran, some run, most wait
                assert time.monotonic() < deadline, "no task ran"
                time.sleep(0.02)
            broker.kill()
        broker.start().wait_serving()
        with client(endpoint) as back:
            answers = [back.fetch(request_id, timeout=WAIT * 2).payload for request_id in ids]
        assert answers == [f"ran t{n}".encode() for n in range(40)]
        assert [python_runs(runs, f"t{n}") for n in range(40)] == [1] * 40
    finally:
        broker.stop()
        stop_all(workers)


def test_a_damaged_log_costs_what_it_damaged_and_the_broker_serves(tmp_path: Path) -> None:
    endpoint = f"ipc://{tmp_path}/broker.sock"
    state = tmp_path / "state"
    broker = BrokerProcess([*documented(1, endpoint, state), *PEER], tmp_path / "broker.log")  # --fsync os
    broker.start().wait_serving()
    try:
        with client(endpoint) as gone:
            for n in range(5):
                gone.submit("work", f"x{n}:0".encode(), detached=True)
            queued(endpoint, 5)
        broker.kill()
        log = state / "queue.log"
        data = bytearray(log.read_bytes())
        data[len(data) // 2] ^= 0xFF  # an entry in the middle
        log.write_bytes(bytes(data) + b"\xd0\x6d\x40\x00")  # and one cut short at the end
        broker.start().wait_serving()
        with client(endpoint) as probe:
            status = probe.status(timeout=WAIT)
        assert 3 <= status["broker"]["queued"] <= 4
        assert status["broker"]["counters"]["journal_damaged"] >= 2
        assert status["broker"]["journal"]["fsync"] == "os"
        assert "damaged entries" in broker.log.read_text()
        broker.kill()
        log.unlink()
        log.symlink_to(tmp_path / "elsewhere")  # a link planted as the log: set aside, never followed
        broker.start().wait_serving()
        with client(endpoint) as probe:
            assert probe.status(timeout=WAIT)["broker"]["queued"] == 0  # (served once the log was read)
        assert any(path.name.startswith("queue.log.unusable-") for path in state.iterdir())
        assert not (tmp_path / "elsewhere").exists()
    finally:
        broker.stop()

"""The broker pair's replication, with real processes on both transports: after a burst of detached requests, MDP
clients' requests, answered (kept) requests and a flow limit set at run time, the passive's replicated state
equals the active's (their status reports say so); after a kill -9 of the active, the backup that takes over
serves every queued request once, each detached request and kept answer is fetchable from it, and the flow limit
is in force there. The replication link refuses a stranger's key and counts malformed messages, never a crash."""

from __future__ import annotations

import signal
import threading
import time
import uuid
from pathlib import Path

import pytest
import zmq
from restart_harness import WAIT, python_runs, python_worker, stop_all
from test_broker_pair import HEARTBEAT, LIVENESS, PEER, curve_flags, pair
from transports import TRANSPORTS
from waiting import eventually

from generaldomo import Broker, Client, Settings, Worker
from generaldomo.io import keys
from generaldomo.io.hub.pair import PairConfig
from generaldomo.sansio.broker.pair import PairRole
from generaldomo.sansio.broker.replication import HEADER, Replica
from generaldomo.sansio.wire import protocol

DETACHED, MDP, KEPT = 10, 5, 4


def client(endpoint: str | list[str], transport: str) -> Client:
    return Client(
        endpoint, transport=transport, heartbeat_interval=HEARTBEAT, liveness=LIVENESS, fail_unknown=False,
        fail_unreachable=False,
    )  # fmt: skip


def status(endpoint: str, transport: str) -> dict[str, object]:
    with client(endpoint, transport) as probe:
        report = probe.status(timeout=WAIT)["broker"]
    assert isinstance(report, dict)
    return report


def pair_status(endpoint: str, transport: str) -> dict[str, object]:
    report = status(endpoint, transport)["pair"]
    assert isinstance(report, dict)
    return report


def mdp_client(context: zmq.Context[zmq.Socket[bytes]], endpoint: str, identity: bytes) -> zmq.Socket[bytes]:
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.ROUTING_ID, identity)  # the broker that takes over answers it at this address
    socket.setsockopt(zmq.LINGER, 0)
    socket.connect(endpoint)
    return socket


@pytest.mark.timeout(300)
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_passive_holds_what_the_active_holds_and_serves_it_once_after_a_kill_9(
    tmp_path: Path, transport: str
) -> None:
    flags = ["--ha-plaintext", "--transport", transport, "--recovery", str(8 * HEARTBEAT)]
    brokers, endpoints = pair(tmp_path, flags, flags)
    runs = tmp_path / "runs"
    runs.mkdir()
    mdp_count = MDP if transport == "router" else 0  # (an MDP client speaks to a ROUTER link)
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    identity = b"mdp-" + uuid.uuid4().bytes
    sockets = []
    workers = []
    try:
        eventually(lambda: pair_status(endpoints[0], transport)["state"] == "active", WAIT, "the primary to serve")
        eventually(lambda: pair_status(endpoints[1], transport)["state"] == "passive", WAIT, "the backup to be passive")
        worker = python_worker(endpoints[0], transport, runs, tmp_path / "worker.log", *PEER)
        with client(endpoints[0], transport) as asking:  # answered: their answers kept for re-asks and fetches
            kept = [asking.submit("work", f"k{n}:0".encode()) for n in range(KEPT)]
            assert [future.result(WAIT).payload for future in kept] == [f"ran k{n}".encode() for n in range(KEPT)]
            assert asking.flow("work", concurrency=3)["concurrency"] == 3  # a flow limit set at run time
        stop_all([worker])
        eventually(lambda: status(endpoints[0], transport)["worker_count"] == 0, WAIT, "the worker gone")
        with client(endpoints[0], transport) as gone:  # a client that submits and goes away
            ids = [gone.submit("work", f"d{n}:0".encode(), detached=True).request_id for n in range(DETACHED)]
            eventually(lambda: status(endpoints[0], transport)["queued"] == DETACHED, WAIT, "the detached queued")
        if mdp_count:
            sockets.append(mdp_client(context, endpoints[0], identity))
            for n in range(mdp_count):
                sockets[0].send_multipart(protocol.mdp_client_request(b"work", [f"m{n}:0".encode()]))
        queued = DETACHED + mdp_count
        eventually(lambda: status(endpoints[0], transport)["queued"] == queued, WAIT, "every request queued")

        def same() -> bool:
            active, passive = pair_status(endpoints[0], transport), pair_status(endpoints[1], transport)
            return (
                active["replicated_requests"] == passive["replicated_requests"] == queued
                and active["replicated_answers"] == passive["replicated_answers"] == KEPT
                and active["replicated_flows"] == passive["replicated_flows"] == 1
                and active["sequence"] == passive["applied"]
                and active["lag_records"] == 0
            )

        eventually(same, WAIT, "the passive to hold what the active holds")
        active = status(endpoints[0], transport)
        assert active["kept_answers"] == KEPT

        if mdp_count:  # (connected before the takeover: the broker answers the routing ids it knows)
            sockets.append(mdp_client(context, endpoints[1], identity))
        brokers[0].kill()
        workers.append(
            python_worker(endpoints[1], transport, runs, tmp_path / "worker2.log", "--connect", endpoints[0], *PEER)
        )
        eventually(lambda: pair_status(endpoints[1], transport)["state"] == "active", WAIT, "the backup to take over")
        if mdp_count:
            answers = set()
            deadline = time.monotonic() + WAIT
            while len(answers) < mdp_count and time.monotonic() < deadline:
                if sockets[1].poll(100):
                    answers.add(sockets[1].recv_multipart()[-1])
            assert answers == {f"ran m{n}".encode() for n in range(mdp_count)}
        with client(endpoints[1], transport) as back:
            fetched = [back.fetch(request_id, timeout=WAIT).payload for request_id in ids]
            again = [back.fetch(future.request_id, timeout=WAIT).payload for future in kept]
            assert back.flow("work")["concurrency"] == 3  # the flow limit in force there
        assert fetched == [f"ran d{n}".encode() for n in range(DETACHED)]
        assert again == [f"ran k{n}".encode() for n in range(KEPT)]
        tasks = [f"d{n}" for n in range(DETACHED)] + [f"m{n}" for n in range(mdp_count)]
        tasks += [f"k{n}" for n in range(KEPT)]
        assert {task: python_runs(runs, task) for task in tasks} == dict.fromkeys(tasks, 1)
        counters = status(endpoints[1], transport)["counters"]
        assert counters["tasks_restored"] == queued and counters["answers_restored"] == KEPT  # type: ignore[index]
    finally:
        for socket in sockets:
            socket.close()
        context.term()
        stop_all(workers)
        for broker in brokers:
            broker.stop()


def stranger(context: zmq.Context[zmq.Socket[bytes]], endpoint: str, curve: tuple[bytes, bytes, bytes] | None = None):  # type: ignore[no-untyped-def]
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    if curve is not None:
        socket.setsockopt(zmq.CURVE_SERVERKEY, curve[0])
        socket.setsockopt(zmq.CURVE_PUBLICKEY, curve[1])
        socket.setsockopt(zmq.CURVE_SECRETKEY, curve[2])
    socket.connect(endpoint)
    return socket


@pytest.mark.timeout(300)
def test_hostile_input_on_the_replication_link_is_counted_and_dropped_and_the_pair_goes_on(tmp_path: Path) -> None:
    """Garbage, messages that look like replication messages, an oversized message (cut off by libzmq) from a
    stranger on the plaintext link; a stranger's key on the CURVE link: refused; the pair keeps replicating."""
    flags = ["--ha-plaintext", "--max-message", "100000"]  # the link's messages: 100,000 bytes and 64 KiB at most
    brokers, endpoints = pair(tmp_path, flags, flags)
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    spy = stranger(context, f"ipc://{tmp_path}/primary-pair.sock.replication")
    try:
        eventually(lambda: pair_status(endpoints[1], "router")["state"] == "passive", WAIT, "the backup passive")
        hostile = [
            [b"garbage"], [HEADER], [HEADER, b"A", b"", b"short"], [HEADER, b"S", b"x" * 8, b"\xff" * 9],
            [HEADER, b"R", b"x" * 8, bytes(8), b"not entries"], [HEADER, b"A", b"x" * 8, bytes(8), b"x" * 300_000],
        ]  # fmt: skip
        for frames in hostile:
            spy.send_multipart(frames)
        spy.send_multipart([b"after the oversized one"])  # (libzmq dropped that connection: a new one)
        with client(endpoints[0], "router") as asking:
            asking.submit("work", b"d:0", detached=True)

        def counted() -> bool:
            counters = status(endpoints[0], "router")["counters"]
            assert isinstance(counters, dict)
            return int(counters.get("replication_malformed", 0)) >= 4

        eventually(counted, WAIT, "the malformed messages counted")
        eventually(lambda: pair_status(endpoints[1], "router")["replicated_requests"] == 1, WAIT, "replication")
        assert not spy.poll(int(4 * HEARTBEAT * 1000))  # the stranger was never taken for the passive
        assert all(broker.process is not None and broker.process.poll() is None for broker in brokers)
    finally:
        spy.close()
        context.term()
        for broker in brokers:
            broker.stop()


@pytest.mark.timeout(300)
def test_the_replication_link_under_curve_refuses_a_strangers_key(tmp_path: Path) -> None:
    brokers, endpoints = pair(tmp_path, *curve_flags(tmp_path))
    public, secret = keys.load_secret(tmp_path / "keys" / "stranger.key_secret")
    server = keys.load_public(tmp_path / "keys" / "primary.key")
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    spy = stranger(context, f"ipc://{tmp_path}/primary-pair.sock.replication", (server, public, secret))
    try:
        spy.send_multipart(Replica(1).beat())  # a passive's word, from a stranger: never admitted
        assert not spy.poll(int(8 * HEARTBEAT * 1000))
        credentials = {"server_key": server, "keys": keys.load_secret(tmp_path / "keys" / "client.key_secret")}

        def report(endpoint: str) -> dict[str, object]:
            with Client(endpoint, heartbeat_interval=HEARTBEAT, liveness=LIVENESS, **credentials) as c:  # type: ignore[arg-type]
                broker = c.status(timeout=WAIT)["broker"]
            assert isinstance(broker, dict)
            return broker

        eventually(lambda: report(endpoints[0])["counters"].get("replication_refused", 0) >= 1, WAIT, "refused")  # type: ignore[attr-defined]
        eventually(lambda: report(endpoints[0])["pair"]["lag_records"] == 0, WAIT, "the passive replicating")  # type: ignore[index]
    finally:
        spy.close()
        context.term()
        for broker in brokers:
            broker.stop()


@pytest.mark.timeout(120)
def test_an_answer_leaves_after_the_records_it_reports_were_shipped(tmp_path: Path) -> None:
    """What *acknowledged* means for the pair: when a client has its answer, the records of that turn (its request's
    end and its kept answer) have been handed to the replication link already; the passive gets them after."""
    links = [f"ipc://{tmp_path}/{name}-pair.sock" for name in ("primary", "backup")]
    brokers = [
        Broker(
            "router", [f"ipc://{tmp_path}/{role.value}.sock"], settings=Settings(HEARTBEAT, LIVENESS),
            pair=PairConfig(role, links[n], links[1 - n], HEARTBEAT, plaintext=True),
        ).start()
        for n, role in enumerate((PairRole.PRIMARY, PairRole.BACKUP))
    ]  # fmt: skip
    endpoint = brokers[0].endpoint("router")
    worker = Worker(endpoint, "echo", lambda payload: payload, heartbeat_interval=HEARTBEAT, liveness=LIVENESS)
    thread = threading.Thread(target=worker.serve, daemon=True)
    try:
        eventually(lambda: brokers[0].pair is not None and brokers[0].pair.serving, WAIT, "the primary active")
        thread.start()
        shipper, replica = brokers[0].shipper, brokers[1].replica
        assert shipper is not None and replica is not None
        with client(endpoint, "router") as asking:
            for n in range(20):
                reply = asking.request("echo", b"%d" % n, timeout=WAIT)
                kept = [key for key, answer in shipper.live.kept.items() if answer.frames[-1:] == (reply.payload,)]
                assert kept, n  # shipped before the answer left
        eventually(lambda: len(replica.live.kept) == 20, WAIT, "the passive to get them")
    finally:
        worker.stop()
        thread.join(10)
        for broker in brokers:
            broker.stop()


@pytest.mark.timeout(300)
def test_a_passive_that_falls_behind_shows_its_lag_and_the_active_does_not_wait_for_it(tmp_path: Path) -> None:
    """The passive stopped (SIGSTOP): the active answers a burst as before and reports a growing lag; the passive
    continued (SIGCONT) catches up, by the records queued for it or by a snapshot, and holds what the active holds."""
    brokers, endpoints = pair(tmp_path)
    runs = tmp_path / "runs"
    runs.mkdir()
    worker = python_worker(endpoints[0], "router", runs, tmp_path / "worker.log", *PEER)
    backup = brokers[1].process
    assert backup is not None
    try:
        eventually(lambda: pair_status(endpoints[0], "router")["lag_records"] == 0, WAIT, "the backup replicating")
        backup.send_signal(signal.SIGSTOP)
        try:
            with client(endpoints[0], "router") as asking:
                futures = [asking.submit("work", f"b{n}:0".encode()) for n in range(300)]
                assert [f.result(WAIT).payload for f in futures] == [f"ran b{n}".encode() for n in range(300)]
            active = pair_status(endpoints[0], "router")
            assert active["state"] == "active" and active["sequence"] >= 600  # (accepted, finished, kept: each)
            eventually(lambda: pair_status(endpoints[0], "router")["lag_records"] >= 600, WAIT, "the lag grown")
            assert pair_status(endpoints[0], "router")["lag_seconds"] > 0
        finally:
            backup.send_signal(signal.SIGCONT)

        def caught_up() -> bool:
            active, passive = pair_status(endpoints[0], "router"), pair_status(endpoints[1], "router")
            return active["lag_records"] == 0 and passive["replicated_answers"] == active["replicated_answers"] == 300

        eventually(caught_up, WAIT, "the backup to catch up")
    finally:
        stop_all([worker])
        for broker in brokers:
            broker.stop()


@pytest.mark.timeout(300)
def test_a_broker_back_as_the_passive_drops_its_own_stale_log_and_runs_nothing_again(tmp_path: Path) -> None:
    """Both on state directories: the primary killed with detached requests queued, the backup takes over and
    serves them; the primary started again becomes the passive: the requests its log held are not queued there,
    and when it takes over in its turn, none runs again."""
    flags = [["--ha-plaintext", "--state-dir", str(tmp_path / f"{name}-state")] for name in ("primary", "backup")]
    brokers, endpoints = pair(tmp_path, *flags)
    runs = tmp_path / "runs"
    runs.mkdir()
    workers = []
    try:
        eventually(lambda: pair_status(endpoints[1], "router")["state"] == "passive", WAIT, "the backup passive")
        with client(endpoints[0], "router") as gone:
            ids = [gone.submit("work", f"d{n}:0".encode(), detached=True).request_id for n in range(DETACHED)]
        eventually(lambda: pair_status(endpoints[1], "router")["replicated_requests"] == DETACHED, WAIT, "replicated")
        brokers[0].kill()
        workers.append(python_worker(endpoints[1], "router", runs, tmp_path / "worker.log", *PEER))
        with client(endpoints[1], "router") as back:
            assert [back.fetch(i, timeout=WAIT).payload for i in ids] == [f"ran d{n}".encode() for n in range(DETACHED)]
        stop_all(workers)
        brokers[0].start().wait_serving()
        eventually(lambda: pair_status(endpoints[0], "router")["state"] == "passive", WAIT, "the primary passive")
        report = status(endpoints[0], "router")
        assert report["queued"] == 0 and report["counters"].get("tasks_restored", 0) == 0  # type: ignore[attr-defined]
        brokers[1].kill()
        workers.append(python_worker(endpoints[0], "router", runs, tmp_path / "worker2.log", *PEER))
        eventually(lambda: pair_status(endpoints[0], "router")["state"] == "active", WAIT, "the primary serving")
        eventually(lambda: status(endpoints[0], "router")["worker_count"] == 1, WAIT, "the worker at the primary")
        report = status(endpoints[0], "router")
        assert report["queued"] == 0 and report["in_flight"] == 0  # nothing left to run: all ran on the backup
        assert [python_runs(runs, f"d{n}") for n in range(DETACHED)] == [1] * DETACHED
    finally:
        stop_all(workers)
        for broker in brokers:
            broker.stop()

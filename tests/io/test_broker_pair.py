"""A broker pair, as processes: the primary serves and the backup stays passive; kill -9 the active under load
and the backup takes over, every request answered once; the status report of either broker says which serves;
the pair's link under CURVE admits the peer's key only; the flags are checked. Real brokers, workers, clients."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
import zmq
from metrics_page import wait_for
from restart_harness import GENERALDOMO, ROOT, WAIT, BrokerProcess, python_runs, python_worker, stop_all
from waiting import eventually

from generaldomo import Broker, Client, NotFound, Reply, Settings
from generaldomo.io import files, keys
from generaldomo.io.hub.pair import PairConfig
from generaldomo.io.hub.state import KEY_FILE, StateDir
from generaldomo.sansio.broker.pair import PairRole

HEARTBEAT = 0.25
LIVENESS = 4
PEER = ["--heartbeat", str(HEARTBEAT), "--liveness", str(LIVENESS)]
HA_HEARTBEAT = 0.25
REQUESTS = 3  # threads asking at once
PER_THREAD = 30


def pair(tmp_path: Path, *extra: list[str]) -> tuple[list[BrokerProcess], list[str]]:
    """A primary and a backup on ipc endpoints in ``tmp_path``; ``extra``: each one's further flags."""
    endpoints = [f"ipc://{tmp_path}/{name}.sock" for name in ("primary", "backup")]
    links = [f"ipc://{tmp_path}/{name}-pair.sock" for name in ("primary", "backup")]
    brokers = []
    for n, role in enumerate(("primary", "backup")):
        args = ["--bind", endpoints[n], "--ha-role", role, "--ha-bind", links[n], "--ha-peer", links[1 - n]]
        args += ["--ha-heartbeat", str(HA_HEARTBEAT), *PEER, *(extra[n] if extra else ["--ha-plaintext"])]
        brokers.append(BrokerProcess(args, tmp_path / f"{role}.log").start())
    for broker in brokers:
        broker.wait_serving()
    return brokers, endpoints


def pair_status(endpoint: str, **curve: object) -> dict[str, object]:
    with Client(endpoint, heartbeat_interval=HEARTBEAT, liveness=LIVENESS, **curve) as client:  # type: ignore[arg-type]
        report = client.status(timeout=WAIT)
    pair_report = report["broker"]["pair"]
    assert isinstance(pair_report, dict)
    return pair_report


def test_the_backup_takes_over_when_the_active_is_killed_and_every_request_is_answered_once(tmp_path: Path) -> None:
    brokers, endpoints = pair(tmp_path)
    runs = tmp_path / "runs"
    runs.mkdir()
    worker = python_worker(endpoints[0], "router", runs, tmp_path / "worker.log", "--connect", endpoints[1], *PEER,
                           "--concurrency", "4")  # fmt: skip
    answers: dict[bytes, list[Reply]] = {}
    failures: list[BaseException] = []
    try:
        eventually(lambda: pair_status(endpoints[0])["state"] == "active", WAIT, "the primary to serve")
        eventually(lambda: pair_status(endpoints[1])["state"] == "passive", WAIT, "the backup to be passive")
        backup = pair_status(endpoints[1])
        assert backup["peer_state"] == "active" and backup["role"] == "backup" and backup["changes"] == 1
        with Client(
            endpoints, heartbeat_interval=HEARTBEAT, liveness=LIVENESS, fail_unknown=False, fail_unreachable=False
        ) as client:

            def ask(name: str) -> None:
                try:
                    for n in range(PER_THREAD):
                        payload = f"{name}-{n}:{20 * (n % 5)}".encode()
                        answers.setdefault(payload, []).append(client.request("work", payload, timeout=WAIT))
                except BaseException as error:
                    failures.append(error)

            threads = [threading.Thread(target=ask, args=(f"t{n}",)) for n in range(REQUESTS)]
            for thread in threads:
                thread.start()
            eventually(lambda: len(answers) >= PER_THREAD, WAIT, "answers from the primary")
            brokers[0].kill()
            for thread in threads:
                thread.join(3 * WAIT)
            assert not any(thread.is_alive() for thread in threads)
            assert client.endpoint == endpoints[1]
        assert not failures, failures
        assert len(answers) == REQUESTS * PER_THREAD
        for payload, replies in answers.items():
            assert [reply.payload for reply in replies] == [b"ran " + payload.rpartition(b":")[0]]
        after = pair_status(endpoints[1])
        assert after["state"] == "active" and after["changes"] == 2  # backup -> passive -> active
    finally:
        stop_all([worker])
        for broker in brokers:
            broker.stop()


def test_with_a_shared_hand_over_key_no_task_runs_twice_across_a_failover(tmp_path: Path) -> None:
    """Both brokers on state directories holding the same hand-over key: a task running at the kill is handed
    over to the backup by its worker, not run again; each request is answered once."""
    key = None
    states = [tmp_path / "primary-state", tmp_path / "backup-state"]
    for state in states:
        made = StateDir(state)
        key = key or made.handover_key
        made.close()
        directory = files.check_directory(state, private=True)
        try:
            files.write_in(directory, KEY_FILE, key, 0o600)
        finally:
            os.close(directory)
    extra = [["--ha-plaintext", "--state-dir", str(state), "--recovery", str(8 * HEARTBEAT)] for state in states]
    brokers, endpoints = pair(tmp_path, *extra)
    runs = tmp_path / "runs"
    runs.mkdir()
    worker = python_worker(endpoints[0], "router", runs, tmp_path / "worker.log", "--connect", endpoints[1], *PEER,
                           "--concurrency", "4")  # fmt: skip
    answers: dict[bytes, list[Reply]] = {}
    failures: list[BaseException] = []
    try:
        eventually(lambda: pair_status(endpoints[0])["state"] == "active", WAIT, "the primary to serve")
        eventually(lambda: pair_status(endpoints[1])["state"] == "passive", WAIT, "the backup to be passive")
        with Client(
            endpoints, heartbeat_interval=HEARTBEAT, liveness=LIVENESS, fail_unknown=False, fail_unreachable=False
        ) as client:

            def ask(name: str) -> None:
                try:
                    for n in range(8):
                        payload = f"{name}-{n}:{300 + 100 * n}".encode()
                        answers.setdefault(payload, []).append(client.request("work", payload, timeout=WAIT))
                except BaseException as error:
                    failures.append(error)

            threads = [threading.Thread(target=ask, args=(f"h{n}",)) for n in range(4)]
            for thread in threads:
                thread.start()
            eventually(lambda: len(list(runs.iterdir())) >= 6, WAIT, "tasks running on the primary")
            brokers[0].kill()
            for thread in threads:
                thread.join(3 * WAIT)
            assert not any(thread.is_alive() for thread in threads)
        assert not failures, failures
        assert len(answers) == 32
        for payload, replies in answers.items():
            task = payload.rpartition(b":")[0]
            assert [reply.payload for reply in replies] == [b"ran " + task]
            assert python_runs(runs, task.decode()) == 1, task
        with Client(endpoints[1], heartbeat_interval=HEARTBEAT, liveness=LIVENESS) as status:
            counters = status.status(timeout=WAIT)["broker"]["counters"]
        assert counters.get("handed_over", 0) >= 1  # the kill found tasks running: their results were handed over
    finally:
        stop_all([worker])
        for broker in brokers:
            broker.stop()


def test_a_backup_alone_serves_nobody_but_answers_status(tmp_path: Path) -> None:
    link = f"ipc://{tmp_path}/backup-pair.sock"
    endpoint = f"ipc://{tmp_path}/backup.sock"
    args = ["--bind", endpoint, "--ha-role", "backup", "--ha-bind", link, "--ha-peer", f"ipc://{tmp_path}/nobody"]
    backup = BrokerProcess([*args, "--ha-plaintext", *PEER], tmp_path / "backup.log").start()
    try:
        backup.wait_serving()
        time.sleep(3 * HA_HEARTBEAT)  # the (absent) peer has expired: a backup still never serves first
        run = subprocess.run(
            [*GENERALDOMO, "client", "--connect", endpoint, *PEER, "--timeout", "2", "echo", "hi"],
            capture_output=True, text=True, timeout=WAIT, cwd=ROOT,
        )  # fmt: skip
        assert run.returncode != 0
        report = pair_status(endpoint)
        assert report["state"] == "backup" and report["last_contact"] is None
        with Client(endpoint, heartbeat_interval=HEARTBEAT, liveness=LIVENESS) as client:
            counters = client.status(timeout=WAIT)["broker"]["counters"]
        assert counters.get("passive_dropped", 0) >= 1
    finally:
        backup.stop()


def test_a_primary_alone_serves_on_a_request_once_its_peer_has_expired_but_not_on_a_status_request(
    tmp_path: Path,
) -> None:
    endpoint = f"ipc://{tmp_path}/primary.sock"
    args = ["--bind", endpoint, "--ha-role", "primary", "--ha-bind", f"ipc://{tmp_path}/primary-pair.sock"]
    args += ["--ha-peer", f"ipc://{tmp_path}/nobody", "--ha-plaintext", *PEER]
    primary = BrokerProcess(args, tmp_path / "primary.log").start()
    try:
        primary.wait_serving()
        time.sleep(3 * HA_HEARTBEAT)  # its (absent) peer has expired
        for _ in range(3):
            assert pair_status(endpoint)["state"] == "primary"  # status requests and heartbeats decide nothing
        with Client(endpoint, heartbeat_interval=HEARTBEAT, liveness=LIVENESS, fail_unknown=True) as client:
            with pytest.raises(NotFound):  # served: nobody serves echo
                client.request("echo", b"hi", timeout=WAIT)
        assert pair_status(endpoint)["state"] == "active"
    finally:
        primary.stop()


def curve_flags(tmp_path: Path) -> list[list[str]]:
    """Keys for the primary, the backup, a client (admitted, an admin too) and a stranger in ``tmp_path/keys``; each
    broker's CURVE flags, the other's key pinned."""
    for name in ("primary", "backup", "client", "stranger"):
        keys.keygen(tmp_path / "keys", name)
    clients = tmp_path / "clients"
    clients.mkdir()
    (clients / "client.key").write_bytes((tmp_path / "keys" / "client.key").read_bytes())
    return [
        [
            "--curve-secret", str(tmp_path / "keys" / f"{name}.key_secret"), "--clients", str(clients),
            "--admins", str(clients), "--ha-peer-key", str(tmp_path / "keys" / f"{other}.key"),
        ]
        for name, other in (("primary", "backup"), ("backup", "primary"))
    ]  # fmt: skip


def test_the_pair_link_under_curve_admits_the_peer_only(tmp_path: Path) -> None:
    brokers, endpoints = pair(tmp_path, *curve_flags(tmp_path))
    client_public, client_secret = keys.load_secret(tmp_path / "keys" / "client.key_secret")
    try:
        credentials = {
            "server_key": keys.load_public(tmp_path / "keys" / "primary.key"),
            "keys": (client_public, client_secret),
        }
        eventually(lambda: pair_status(endpoints[0], **credentials)["state"] == "active", WAIT, "the primary")
        stranger_public, stranger_secret = keys.load_secret(tmp_path / "keys" / "stranger.key_secret")
        context = zmq.Context.instance()
        spy = context.socket(zmq.SUB)
        spy.setsockopt(zmq.LINGER, 0)
        spy.setsockopt(zmq.SUBSCRIBE, b"")
        spy.setsockopt(zmq.CURVE_SERVERKEY, keys.load_public(tmp_path / "keys" / "primary.key"))
        spy.setsockopt(zmq.CURVE_PUBLICKEY, stranger_public)
        spy.setsockopt(zmq.CURVE_SECRETKEY, stranger_secret)
        spy.connect(f"ipc://{tmp_path}/primary-pair.sock")
        try:
            assert not spy.poll(int(4 * HA_HEARTBEAT * 1000))  # the primary's states never reach a stranger

            def refused() -> int:
                with Client(endpoints[0], heartbeat_interval=HEARTBEAT, liveness=LIVENESS, **credentials) as c:
                    return int(c.status(timeout=WAIT)["broker"]["counters"].get("pair_refused", 0))

            eventually(lambda: refused() >= 1, WAIT, "the stranger's handshake refused and counted")
        finally:
            spy.close()
        assert pair_status(endpoints[0], **credentials)["peer_state"] == "passive"
    finally:
        for broker in brokers:
            broker.stop()


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--ha-peer", "tcp://127.0.0.1:9"], "--ha-role"),
        (["--ha-role", "primary"], "need --ha-peer"),
        (["--ha-peer", "tcp://127.0.0.1:9", "--ha-role", "primary", "--ha-bind", "tcp://127.0.0.1:*"], "plaintext"),
        (
            [
                "--ha-peer",
                "tcp://127.0.0.1:9",
                "--ha-role",
                "primary",
                "--ha-bind",
                "tcp://127.0.0.1:*",
                "--ha-plaintext",
                "--ha-heartbeat",
                "0",
            ],
            "ha-heartbeat",
        ),
    ],
)
def test_the_pair_flags_are_checked(flags: list[str], says: str) -> None:
    run = subprocess.run(
        [*GENERALDOMO, "broker", "--bind", "tcp://127.0.0.1:*", *flags],
        capture_output=True, text=True, timeout=WAIT, cwd=ROOT,
    )  # fmt: skip
    assert run.returncode == 2, run.stderr
    assert says in run.stderr


def test_an_embedded_pair_reports_its_states_as_metrics(tmp_path: Path) -> None:
    links = [f"ipc://{tmp_path}/{name}-pair.sock" for name in ("primary", "backup")]
    brokers = [
        Broker(
            "router", [f"ipc://{tmp_path}/{role.value}.sock"], settings=Settings(HEARTBEAT, LIVENESS),
            pair=PairConfig(role, links[n], links[1 - n], HA_HEARTBEAT, plaintext=True),
        ).start()
        for n, role in enumerate((PairRole.PRIMARY, PairRole.BACKUP))
    ]  # fmt: skip
    try:
        ports = [broker.serve_metrics(0, "127.0.0.1", period=0.05) for broker in brokers]
        wait_for(ports[0], 'generaldomo_pair_state{role="primary",state="active"} 1.0')
        text = wait_for(ports[1], 'generaldomo_pair_state{role="backup",state="passive"} 1.0')
        assert 'generaldomo_pair_state{role="backup",state="active"} 0.0' in text
        assert "generaldomo_pair_last_contact_seconds" in text
    finally:
        for broker in brokers:
            broker.stop()


def test_the_cpp_client_follows_the_pair_when_the_active_is_killed(tmp_path: Path, programs: dict[str, Path]) -> None:
    servers = [f"ipc://{tmp_path}/{role}-server.sock" for role in ("primary", "backup")]
    brokers, endpoints = pair(tmp_path, *[["--ha-plaintext", "--server", server] for server in servers])
    runs = tmp_path / "runs"
    runs.mkdir()
    worker = python_worker(endpoints[0], "router", runs, tmp_path / "worker.log", "--connect", endpoints[1], *PEER,
                           "--concurrency", "4")  # fmt: skip
    client = None
    try:
        eventually(lambda: pair_status(endpoints[0])["state"] == "active", WAIT, "the primary to serve")
        eventually(lambda: pair_status(endpoints[1])["state"] == "passive", WAIT, "the backup to be passive")
        command = [str(programs["gd_client"]), "--mode", "threads", "--service", "work", "--threads", "2"]
        command += ["--requests", "15", "--work-ms-max", "200", "--heartbeat-ms", str(int(HEARTBEAT * 1000))]
        command += ["--liveness", str(LIVENESS), "--timeout-ms", str(int(WAIT * 1000)), "--wait-for-service"]
        command += [",".join(servers)]
        client = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        eventually(lambda: len(list(runs.iterdir())) >= 6 or client.poll() is not None, WAIT, "the C++ client's tasks")
        assert client.poll() is None, client.communicate()
        brokers[0].kill()
        out, err = client.communicate(timeout=3 * WAIT)
        assert client.returncode == 0, err
        lines = out.splitlines()
        assert lines[-1:] == ["done"], f"stdout:\n{out}\nstderr:\n{err}"
        answers = [line.split(" ", 2) for line in lines[:-1]]  # "<thread> <n> <reply>"
        assert sorted((int(t), int(n)) for t, n, _ in answers) == [(t, n) for t in range(2) for n in range(15)], out
        for thread, n, reply in answers:
            assert reply == f"ran t{thread}-{n}", out  # each answered once, with its own result
        assert pair_status(endpoints[1])["state"] == "active"
    finally:
        if client is not None and client.poll() is None:
            client.kill()
            client.wait()
        stop_all([worker])
        for broker in brokers:
            broker.stop()

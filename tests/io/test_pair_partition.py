"""A partition between the two brokers of a pair, made with network namespaces: each broker in a namespace of its
own, their pair link over a veth pair between the two (private addresses that exist only inside them), the
clients' and workers' endpoints ipc:// (files, which every namespace shares). Cutting the veth link leaves the
peers reaching both brokers: the backup stops hearing the primary, no peer comes to it (the primary still answers
them), and it stays passive; never two actives. Needs root (``ip netns``); every namespace made is deleted."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
from restart_harness import GENERALDOMO, WAIT, python_worker, stop_all
from waiting import eventually

from generaldomo import Client, Reply

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None, reason="network namespaces need root and iproute2"
)

HEARTBEAT = 0.25
LIVENESS = 4
PEER = ["--heartbeat", str(HEARTBEAT), "--liveness", str(LIVENESS)]
HA_HEARTBEAT = 0.25
SILENT = 8 * HA_HEARTBEAT  # how long the partition lasts, at least: four times the pair's expiry
PAIR_PORT = 5560


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=WAIT)


@pytest.fixture
def namespaces() -> Iterator[tuple[str, str]]:
    """Two namespaces joined by a veth pair (10.254.0.1 and 10.254.0.2, a /30 of their own), deleted afterwards."""
    tag = uuid.uuid4().hex[:8]
    names = (f"gdpa-{tag}", f"gdpb-{tag}")
    made: list[str] = []
    try:
        for name in names:
            ip("netns", "add", name)
            made.append(name)
        ip(
            "link",
            "add",
            f"gda{tag}",
            "netns",
            names[0],
            "type",
            "veth",
            "peer",
            "name",
            f"gdb{tag}",
            "netns",
            names[1],
        )
        for n, name in enumerate(names):
            device = f"gd{'ab'[n]}{tag}"
            ip("-n", name, "addr", "add", f"10.254.0.{n + 1}/30", "dev", device)
            ip("-n", name, "link", "set", device, "up")
            ip("-n", name, "link", "set", "lo", "up")
        yield names
    finally:
        for name in made:
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=WAIT)


def started(log: Path, process: subprocess.Popen[bytes]) -> bool:
    return "generaldomo broker: " in log.read_text() or process.poll() is not None


def states(endpoint: str) -> str:
    with Client(endpoint, heartbeat_interval=HEARTBEAT, liveness=LIVENESS) as client:
        return str(client.status(timeout=WAIT)["broker"]["pair"]["state"])


def test_a_partition_between_the_brokers_never_makes_two_actives(tmp_path: Path, namespaces: tuple[str, str]) -> None:
    endpoints = [f"ipc://{tmp_path}/{role}.sock" for role in ("primary", "backup")]
    links = [f"tcp://10.254.0.{n + 1}:{PAIR_PORT}" for n in range(2)]
    processes: list[subprocess.Popen[bytes]] = []
    for n, role in enumerate(("primary", "backup")):
        args = ["--bind", endpoints[n], "--ha-role", role, "--ha-bind", links[n], "--ha-peer", links[1 - n]]
        args += ["--ha-heartbeat", str(HA_HEARTBEAT), "--ha-plaintext", *PEER]
        command = ["ip", "netns", "exec", namespaces[n], *GENERALDOMO, "broker", *args]
        with (tmp_path / f"{role}.log").open("ab") as log:
            processes.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT))
    for role, process in zip(("primary", "backup"), processes, strict=True):
        log = tmp_path / f"{role}.log"
        eventually(partial(started, log, process), WAIT, f"the {role}")
        assert process.poll() is None, log.read_text()
    runs = tmp_path / "runs"
    runs.mkdir()
    worker = python_worker(endpoints[0], "router", runs, tmp_path / "worker.log", "--connect", endpoints[1], *PEER)
    seen: list[tuple[str, str]] = []  # (primary's, backup's) states, sampled all along
    answers: list[Reply] = []
    failures: list[BaseException] = []
    asking = threading.Event()
    asking.set()
    try:
        eventually(lambda: states(endpoints[0]) == "active", WAIT, "the primary to serve")
        eventually(lambda: states(endpoints[1]) == "passive", WAIT, "the backup to be passive")
        with Client(endpoints, heartbeat_interval=HEARTBEAT, liveness=LIVENESS, fail_unknown=False) as client:

            def ask() -> None:
                try:
                    n = 0
                    while asking.is_set() and n < 10_000:
                        answers.append(client.request("work", f"p{n}:5".encode(), timeout=WAIT))
                        n += 1
                except BaseException as error:
                    failures.append(error)

            asker = threading.Thread(target=ask)
            asker.start()
            eventually(lambda: len(answers) > 5, WAIT, "answers before the partition")
            ip("-n", namespaces[0], "link", "set", f"gda{namespaces[0][5:]}", "down")  # the partition

            def backup_lost_the_primary() -> bool:
                with Client(endpoints[1], heartbeat_interval=HEARTBEAT, liveness=LIVENESS) as status:
                    pair = status.status(timeout=WAIT)["broker"]["pair"]
                seen.append((states(endpoints[0]), pair["state"]))
                return pair["last_contact"] is not None and pair["last_contact"] > SILENT

            eventually(backup_lost_the_primary, WAIT, "the backup to have lost the primary for a while")
            before = len(answers)
            eventually(lambda: len(answers) > before + 5, WAIT, "answers during the partition")
            seen.append((states(endpoints[0]), states(endpoints[1])))
            ip("-n", namespaces[0], "link", "set", f"gda{namespaces[0][5:]}", "up")  # healed
            eventually(lambda: states(endpoints[1]) == "passive", WAIT, "the backup passive after the heal")
            seen.append((states(endpoints[0]), states(endpoints[1])))
            asking.clear()
            asker.join(WAIT)
            assert not asker.is_alive()
            assert client.endpoint == endpoints[0]  # never moved: the primary served all along
        assert not failures, failures
        assert all(state == ("active", "passive") for state in seen), seen
        assert all(process.poll() is None for process in processes)  # neither found the pair broken
    finally:
        asking.clear()
        stop_all([worker, *processes])

"""The guide's ops recipes (docs/howto/production.rst: systemd and a container), as written: the
systemd unit's and the container's command lines run (their paths and ports replaced by the test's own), under
a restart as the unit describes it: kill -9, started again, the limits and the address file followed; exit 2
where the unit says a restart cannot help; exit 0 on SIGTERM."""

from __future__ import annotations

import configparser
import json
import shlex
import signal
import subprocess
from pathlib import Path

from doc_blocks import named
from restart_harness import GENERALDOMO, ROOT, WAIT, BrokerProcess, stop_all
from waiting import eventually, served

from generaldomo import Client, Where
from generaldomo.cli.command import Exit
from generaldomo.io import address_file

HEARTBEAT = ["--heartbeat", "0.25", "--liveness", "4"]


def replaced(argv: list[str], paths: dict[str, Path]) -> list[str]:
    """The recipe's broker arguments on this machine: loopback, any free port, the test's directories."""
    words = [word.replace("tcp://*:", "tcp://127.0.0.1:") for word in argv]
    words = [f"{word.rpartition(':')[0]}:*" if word.startswith("tcp://127.0.0.1:") else word for word in words]
    return [str(paths.get(word, word)) for word in words]


def test_the_systemd_unit_restarts_the_broker_as_it_says(tmp_path: Path) -> None:
    unit = configparser.ConfigParser(interpolation=None, strict=True)
    unit.optionxform = str  # type: ignore[assignment,method-assign]  # systemd's keys are case-sensitive
    unit.read_string(named("systemd-unit"))
    service = unit["Service"]
    assert service["Restart"] == "always" and unit["Unit"]["StartLimitIntervalSec"] == "0"
    assert service["RestartPreventExitStatus"] == str(int(Exit.USAGE))
    program, command, *args = shlex.split(service["ExecStart"])
    assert Path(program).name == "generaldomo" and command == "broker"
    state = args[args.index("--state-dir") + 1]
    assert state == f"/var/lib/{service['StateDirectory']}"  # the directory systemd makes for it
    published = args[args.index("--address-file") + 1]
    assert Path(published).parent == Path(unit["Unit"]["RequiresMountsFor"])

    path = tmp_path / "broker.json"
    args = replaced(args, {state: tmp_path / "state", published: path})
    broker = BrokerProcess([*args, *HEARTBEAT], tmp_path / "broker.log").start()
    command_line = [*GENERALDOMO, "worker", "--broker-file", str(path), "--find-timeout", "60", *HEARTBEAT]
    with (tmp_path / "worker.log").open("ab") as log:
        worker = subprocess.Popen(command_line, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        broker.wait_serving()
        with Client(Where(broker_file=str(path), timeout=WAIT), heartbeat_interval=0.25, liveness=4) as client:
            served(client, "echo", WAIT)
            assert client.request("echo", b"before", timeout=WAIT).payload == b"before"
            assert client.flow("echo", timeout=WAIT, concurrency=3)["concurrency"] == 3
            old = client.endpoint
            broker.kill()  # Restart=always: the supervisor starts it again (on a new port here)
            broker.start().wait_serving()
            eventually(lambda: address_file.read(path).endpoint("router") != old, WAIT, "the new address file")
            served(client, "echo", WAIT)
            assert client.request("echo", b"after", timeout=WAIT).payload == b"after"  # worker and client followed
            assert client.flow("echo", timeout=WAIT)["concurrency"] == 3  # the state directory kept it

            second = subprocess.run(
                [*GENERALDOMO, "broker", *args], capture_output=True, text=True, timeout=WAIT, cwd=ROOT
            )  # a second broker on the state directory: RestartPreventExitStatus keeps it from looping
            assert second.returncode == Exit.USAGE, second.stderr
        assert broker.process is not None
        broker.process.send_signal(signal.SIGTERM)  # systemctl stop
        assert broker.process.wait(WAIT) == Exit.OK and not path.exists()
    finally:
        broker.stop()
        stop_all([worker])


def test_the_container_command_serves_both_transports_on_its_state_volume(tmp_path: Path) -> None:
    dockerfile = named("dockerfile").splitlines()
    entrypoint = json.loads(next(line for line in dockerfile if line.startswith("ENTRYPOINT "))[len("ENTRYPOINT ") :])
    cmd = json.loads(next(line for line in dockerfile if line.startswith("CMD "))[len("CMD ") :])
    volume = next(line for line in dockerfile if line.startswith("VOLUME ")).split()[1]
    program, command, *flags = [*entrypoint, *cmd]
    assert Path(program).name == "generaldomo" and command == "broker"
    assert flags[flags.index("--state-dir") + 1] == volume
    ports = next(line for line in dockerfile if line.startswith("EXPOSE ")).split()[1:]
    assert [word.rpartition(":")[2] for word in flags if word.startswith("tcp://")] == ports

    broker = BrokerProcess(replaced(flags, {volume: tmp_path / "state"}), tmp_path / "broker.log").start()
    try:
        broker.wait_serving()
        lines = broker.log.read_text().splitlines()
        endpoints = dict(line.split()[-2:] for line in lines if line.startswith("generaldomo broker: "))
        assert set(endpoints) == {"router", "server"}, lines
        for transport, endpoint in endpoints.items():
            with Client(endpoint, transport) as client:
                assert client.flow("echo", timeout=WAIT, concurrency=2)["concurrency"] == 2
        assert (tmp_path / "state" / "state.json").exists()
        assert broker.process is not None
        broker.process.send_signal(signal.SIGTERM)  # docker stop
        assert broker.process.wait(WAIT) == Exit.OK
    finally:
        broker.stop()

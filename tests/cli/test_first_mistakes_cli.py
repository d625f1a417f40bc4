"""The commonest mistakes, as the command line meets them: each is answered at once, saying what to do.

A wrong endpoint or port (``client``, ``status``, ``flow`` exit 3 at once; a worker warns at once), a service
name typo (exit 1, the nearest name), the wrong transport (exit 3, the transport to use) and no draft support
(exit 2, the install command). Each command is given ``--timeout 60``, which it must not reach (the process
is given 30 s: the old behaviour waited the whole timeout); ``--wait-for-broker`` waits instead. The Python
API's side is tests/peers/test_first_mistakes.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from cli_processes import COMMAND, expect, lines, spawn
from transports import unbound_endpoint

NEVER = "60"  # the commands' --timeout, which they must not reach
BOUND = 30  # seconds each process is given (less than NEVER: a command that waits its timeout fails the test)


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COMMAND, *args], capture_output=True, text=True, timeout=BOUND)


@pytest.mark.parametrize("command", ["client", "status", "flow"])
def test_a_wrong_endpoint_is_reported_at_once(tmp_path: Path, command: str) -> None:
    endpoint = f"ipc://{tmp_path}/nobody.sock"
    given = {"client": ["echo", "x"], "status": [], "flow": ["echo"]}[command]
    result = run(command, "--connect", endpoint, "--timeout", NEVER, *given)
    assert result.returncode == 3, result.stderr
    assert f"generaldomo {command}: nothing accepts connections at {endpoint}" in result.stderr
    assert "--wait-for-broker" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("scheme", ["ipc", "tcp"])
def test_a_client_told_to_wait_for_its_broker_gets_its_answer(tmp_path: Path, processes, scheme: str) -> None:
    endpoint = unbound_endpoint(scheme, tmp_path, "later")
    client = spawn(processes, "client", "--connect", endpoint, "--timeout", NEVER, "--wait-for-broker", "echo", "hi")
    assert client.poll() is None
    spawn(processes, "broker", "--bind", endpoint)
    spawn(processes, "worker", "--connect", endpoint, "--service", "echo")
    out, err = client.communicate(timeout=BOUND * 2)
    assert client.returncode == 0, err
    assert out.splitlines() == ["hi"]


def test_a_worker_warns_at_once_that_nothing_accepts_connections(tmp_path: Path, processes) -> None:
    endpoint = f"ipc://{tmp_path}/nobody.sock"
    worker = spawn(processes, "worker", "--connect", endpoint, "--service", "echo")
    # the old warning came after the broker's silence, about 15 s; the refused attempts come at once
    line = expect(lines(worker.stderr), "nothing accepts connections at", timeout=10)
    assert endpoint in line


def test_a_service_name_typo_is_answered_at_once_with_the_nearest_name(tmp_path: Path, processes) -> None:
    endpoint = f"ipc://{tmp_path}/typo.sock"
    quick = ["--heartbeat", "0.2"]  # the broker's grace for a 404 after its start: 1.2 s
    spawn(processes, "broker", "--bind", endpoint, *quick)
    worker = spawn(processes, "worker", "--connect", endpoint, "--service", "shout", *quick)
    expect(lines(worker.stdout), "serving 'shout'")
    result = run("client", "--connect", endpoint, "--timeout", NEVER, "--heartbeat", "0.2", "shuot", "hi")
    assert result.returncode == 1, result.stderr
    assert "404" in result.stderr and "did you mean 'shout'?" in result.stderr


@pytest.mark.parametrize(("ours", "theirs"), [("server", "router"), ("router", "server")])
@pytest.mark.parametrize("command", ["client", "status"])
def test_the_wrong_transport_is_answered_at_once(tmp_path: Path, processes, command: str, ours: str, theirs: str):
    endpoint = f"ipc://{tmp_path}/{theirs}.sock"
    broker = spawn(processes, "broker", "--transport", theirs, "--bind", endpoint)
    expect(lines(broker.stdout), f"generaldomo broker: {theirs}")
    given = ["echo", "x"] if command == "client" else []
    result = run(command, "--transport", ours, "--connect", endpoint, "--timeout", NEVER, *given)
    assert result.returncode == 3, result.stderr
    assert f"--transport {theirs}" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("command", [["client", "echo", "x"], ["status"]])
def test_no_draft_support_is_answered_at_once_with_the_install_command(command: list[str]) -> None:
    code = (  # a pyzmq whose libzmq has no draft API: zmq.has("draft") is False there
        "import zmq, sys; zmq.has = lambda feature: False\n"
        "from generaldomo.cli import main\n"
        f"sys.exit(main({[command[0], '--transport', 'server', '--connect', 'tcp://127.0.0.1:5999', *command[1:]]!r}))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=BOUND)
    assert result.returncode == 2, result.stderr
    assert "draft" in result.stderr and "-m generaldomo.draft ensure" in result.stderr
    assert "Traceback" not in result.stderr

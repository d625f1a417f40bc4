"""The generaldomo command, run as real processes."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

COMMAND = [sys.executable, "-m", "generaldomo"]


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen]]:
    started: list[subprocess.Popen] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in started:
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            raise


def spawn(processes: list[subprocess.Popen], *args: str) -> subprocess.Popen:
    process = subprocess.Popen([*COMMAND, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    processes.append(process)
    return process


def test_broker_worker_client(transport: str, processes: list[subprocess.Popen]) -> None:
    broker = spawn(processes, "broker", "--transport", transport, "--bind", "tcp://127.0.0.1:*")
    line = broker.stdout.readline()
    assert line.startswith(f"generaldomo broker: {transport} tcp://127.0.0.1:"), line
    endpoint = line.split()[-1]
    worker = spawn(processes, "worker", "--transport", transport, "--connect", endpoint, "--service", "echo")
    assert "serving 'echo'" in worker.stdout.readline()
    client = subprocess.run(
        [*COMMAND, "client", "--transport", transport, "--connect", endpoint, "echo", "hello", "world"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert client.returncode == 0, client.stderr
    assert client.stdout.splitlines() == ["hello", "world"]
    for process in (worker, broker):  # SIGTERM stops both promptly and cleanly
        process.send_signal(signal.SIGTERM)
        assert process.wait(10) == 0


def test_client_times_out_with_a_clear_message(transport: str, processes: list[subprocess.Popen]) -> None:
    broker = spawn(processes, "broker", "--transport", transport, "--bind", "tcp://127.0.0.1:*")
    endpoint = broker.stdout.readline().split()[-1]
    client = subprocess.run(
        [*COMMAND, "client", "--transport", transport, "--connect", endpoint, "--timeout", "0.3", "nobody", "x"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert client.returncode == 1 and "no reply" in client.stderr and "Traceback" not in client.stderr


def test_server_transport_without_draft_support_says_how_to_fix_it() -> None:
    code = (
        "import zmq, sys; zmq.has = lambda feature: False\n"
        "from generaldomo.cli import main\n"
        "sys.exit(main(['broker', '--transport', 'server', '--bind', 'tcp://127.0.0.1:*']))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "draft" in result.stderr and "-m generaldomo.draft ensure" in result.stderr
    assert "Traceback" not in result.stderr


def test_doctor_and_version() -> None:
    doctor = subprocess.run([*COMMAND, "doctor"], capture_output=True, text=True, timeout=60)
    assert doctor.returncode == 0 and "draft sockets (CLIENT/SERVER): yes" in doctor.stdout
    version = subprocess.run([*COMMAND, "--version"], capture_output=True, text=True, timeout=60)
    assert "pyzmq" in version.stdout and "libzmq" in version.stdout


def test_demo_runs_both_transports() -> None:
    demo = subprocess.run([*COMMAND, "demo", "--requests", "200"], capture_output=True, text=True, timeout=120)
    assert demo.returncode == 0, demo.stderr
    for transport in ("router", "server"):
        assert f"[{transport}] echo replied b'hello, generaldomo'" in demo.stdout
        assert f"[{transport}] 200 pipelined requests, all answered correctly: True" in demo.stdout


def test_bad_resolver_is_a_clear_error() -> None:
    result = subprocess.run(
        [*COMMAND, "broker", "--bind", "tcp://127.0.0.1:*", "--resolver", "no_such_module:Thing"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "no_such_module" in result.stderr and "Traceback" not in result.stderr


def test_one_broker_both_transports(processes: list[subprocess.Popen]) -> None:
    broker = spawn(processes, "broker", "--router", "tcp://127.0.0.1:*", "--server", "tcp://127.0.0.1:*")
    endpoints = dict(broker.stdout.readline().split()[-2:] for _ in range(2))
    spawn(processes, "worker", "--transport", "router", "--connect", endpoints["router"], "--service", "echo")
    client = subprocess.run(
        [*COMMAND, "client", "--transport", "server", "--connect", endpoints["server"], "echo", "across"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert client.returncode == 0, client.stderr
    assert client.stdout.splitlines() == ["across"]

"""``generaldomo client --delay`` and ``--not-before``, run as real processes on both transports."""

from __future__ import annotations

import datetime
import subprocess

from cli_processes import COMMAND, spawn
from waiting import eventually, served_at

from generaldomo import Client


def _client(transport: str, endpoint: str, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [*COMMAND, "client", "--transport", transport, "--connect", endpoint, "--timeout", "60", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def test_the_client_command_delays_a_request(transport: str, processes: list[subprocess.Popen]) -> None:
    broker = spawn(processes, "broker", "--transport", transport, "--bind", "tcp://127.0.0.1:*")
    endpoint = broker.stdout.readline().split()[-1]
    spawn(processes, "worker", "--transport", transport, "--connect", endpoint, "--service", "echo")
    served_at(endpoint, "echo", transport)
    parked = _client(transport, endpoint, "--no-wait", "--delay", "3600", "echo", "parked")
    assert parked.returncode == 0, parked.stderr
    with Client(endpoint, transport) as c:
        eventually(lambda: next(s for s in c.status()["services"] if s["name"] == "echo")["delayed"] == 1)
    soon = _client(transport, endpoint, "--delay", "0.2", "echo", "soon")
    assert (soon.returncode, soon.stdout) == (0, "soon\n"), soon.stderr
    when = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=0.2)).isoformat()
    at = _client(transport, endpoint, "--not-before", when, "echo", "at")
    assert (at.returncode, at.stdout) == (0, "at\n"), at.stderr


def test_a_bad_delay_or_time_is_a_usage_error() -> None:
    endpoint = "tcp://127.0.0.1:9"  # never reached: the arguments are refused first
    for args in (["--delay", "-1"], ["--delay", "nan"], ["--not-before", "2030-01-01T00:00:00"],
                 ["--not-before", "soon"], ["--delay", "1", "--not-before", "0"]):  # fmt: skip
        result = _client("router", endpoint, *args, "echo")
        assert result.returncode == 2, (args, result.stderr)
        assert "--delay" in result.stderr or "--not-before" in result.stderr, result.stderr

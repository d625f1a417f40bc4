"""Delayed requests across a broker restart, with real processes on both transports: detached requests submitted
with a delay (``generaldomo client --no-wait --delay``) and a not-before time (``Client.submit(not_before=...)``)
to a broker on a ``--state-dir``, the broker killed with kill -9 before their time and started again on the same
directory: each is dispatched no earlier than its time (by the worker's clocks) and answered once.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from restart_harness import GENERALDOMO, WAIT, BrokerProcess, python_runs, python_worker, stop_all
from transports import TRANSPORTS

from generaldomo import Client

HEARTBEAT = 0.5
PEER = ["--heartbeat", str(HEARTBEAT), "--liveness", "4"]
DELAY = 10.0  # seconds: long enough for the kill and the restart to come first on a loaded machine
SLACK = 0.25  # seconds: the file system's coarse timestamps and the clocks' drift (the "not earlier" side only)


def endpoint_of(broker: BrokerProcess, transport: str) -> str:
    """The endpoint the broker's latest start printed (it binds an ephemeral port at each start)."""
    lines = [
        line for line in broker.log.read_text(errors="replace").splitlines() if line.startswith("generaldomo broker: ")
    ]
    assert len(lines) >= broker.starts, broker.log.read_text(errors="replace")
    words = lines[-1].split()
    assert words[2] == transport, lines[-1]
    return words[-1]


def client(endpoint: str, transport: str) -> Client:
    return Client(endpoint, transport, heartbeat_interval=HEARTBEAT, fail_unknown=False, fail_unreachable=False)


def cli_client(transport: str, endpoint: str, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [*GENERALDOMO, "client", "--transport", transport, "--connect", endpoint, *PEER, "--timeout", str(WAIT)]
    return subprocess.run([*argv, *args], capture_output=True, text=True, timeout=WAIT * 2)


def holds(endpoint: str, transport: str) -> tuple[int, int]:
    """How many requests of service ``work`` the broker holds until their time, and how many it queues."""
    with client(endpoint, transport) as probe:
        services = probe.status(timeout=WAIT)["services"]
    work = [(service["delayed"], service["queued"]) for service in services if service["name"] == "work"]
    return work[0] if work else (0, 0)


def run_at(runs: Path, task: str) -> tuple[float, float]:
    """When the worker ran ``task`` (its only run): (wall clock, from the run file's time; monotonic clock, from
    its name)."""
    [run] = runs.glob(f"{task}.*")
    return run.stat().st_mtime, int(run.name.rsplit(".", 1)[-1]) / 1e9


@pytest.mark.timeout(300)
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_delayed_requests_are_dispatched_no_earlier_than_asked_across_a_kill_9(transport: str, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    args = ["--transport", transport, "--bind", "tcp://127.0.0.1:*", "--state-dir", str(tmp_path / "state"), *PEER]
    broker = BrokerProcess(args, tmp_path / "broker.log")
    broker.start().wait_serving()
    endpoint = endpoint_of(broker, transport)
    workers: list[subprocess.Popen[bytes]] = []
    try:
        sent_wall, sent = time.time(), time.monotonic()  # the delay counts from no earlier than this
        command = cli_client(
            transport, endpoint, "--wait-for-service", "--no-wait", "--delay", str(DELAY), "work", "cli:0"
        )
        assert command.returncode == 0, command.stderr
        cli_id = command.stdout.strip()
        not_before = time.time() + DELAY
        with client(endpoint, transport) as gone:  # a client that submits and goes away
            python_id = gone.submit("work", b"py:0", not_before=not_before, detached=True).request_id
        deadline = time.monotonic() + WAIT
        while sum(holds(endpoint, transport)) < 2:  # (held, or queued on a machine slower than the delay)
            assert time.monotonic() < deadline, "the broker does not hold the two requests"
            time.sleep(0.05)
        broker.kill()

        broker.start().wait_serving()
        endpoint = endpoint_of(broker, transport)
        held, _ = holds(endpoint, transport)
        if time.time() < sent_wall + DELAY - SLACK:  # (the report was made before the first one's time)
            assert held == 2, "the restarted broker does not hold the delayed requests"
        workers.append(python_worker(endpoint, transport, runs, tmp_path / "worker.log", *PEER))

        fetched = cli_client(transport, endpoint, "--fetch", cli_id)
        assert (fetched.returncode, fetched.stdout) == (0, "ran cli\n"), fetched.stderr
        with client(endpoint, transport) as back:
            assert back.fetch(python_id, timeout=WAIT).payload == b"ran py"
        assert python_runs(runs, "cli") == python_runs(runs, "py") == 1  # each run once
        cli_wall, cli_monotonic = run_at(runs, "cli")
        assert cli_monotonic >= sent + DELAY - SLACK, (cli_monotonic - sent, DELAY)
        assert cli_wall >= sent_wall + DELAY - SLACK, (cli_wall - sent_wall, DELAY)
        py_wall, _ = run_at(runs, "py")
        assert py_wall >= not_before - SLACK, (py_wall - not_before, "early")
        with client(endpoint, transport) as probe:
            report = probe.status(timeout=WAIT)["broker"]
        assert report["counters"]["tasks_restored"] == 2
        assert report["queued"] == 0 and holds(endpoint, transport) == (0, 0)
    finally:
        broker.stop()
        stop_all(workers)

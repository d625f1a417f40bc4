"""Management requests (mmi.status, mmi.flow) through real brokers, from the API and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from core_harness import Harness, client, worker

from generaldomo import Client, RequestFailed
from generaldomo.cli.status_view import render
from generaldomo.sansio.broker.mmi import status
from generaldomo.sansio.broker.report import StatusReport


def test_status_report_counts_what_happened() -> None:
    h = Harness()
    h.ready(worker(1))
    h.request(client(0), b"r1")
    h.answer(worker(1), h.tasks_of(worker(1))[0][0], b"x")
    h.request(client(0), b"r2", b"other")
    typed = status(h.core, h.now + 1)
    report = typed.to_dict()
    echo = next(s for s in report["services"] if s["name"] == "echo")
    assert (echo["workers"], echo["waiting"], echo["queued"], echo["completed"]) == (1, 1, 0, 1)
    other = next(s for s in report["services"] if s["name"] == "other")
    assert (other["workers"], other["queued"]) == (0, 1)
    assert report["workers"][0]["state"] == "waiting" and report["workers"][0]["tasks_done"] == 1
    assert report["broker"]["queued"] == 1 and report["broker"]["uptime"] == 1
    assert "echo" in render(report) and render(report) == render(typed)
    assert StatusReport.from_json(typed.to_json()) == typed
    json.dumps(report)


def test_status_and_flow_through_the_client(transport, brokers, workers) -> None:
    broker = brokers(transport, ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint(transport, "tcp")
    for _ in range(3):
        workers(endpoint, transport, "slow", lambda p: __import__("time").sleep(0.05) or p)
    with Client(endpoint, transport) as client_:
        assert client_.flow("slow") == {"service": "slow", "rate": None, "burst": None, "concurrency": None}
        assert client_.flow("slow", concurrency=1)["concurrency"] == 1
        futures = [client_.submit("slow", b"%d" % n) for n in range(6)]
        replies = [f.result(30) for f in futures]
        # one at a time through three workers: each request waited behind the ones before it
        assert [r.payload for r in replies] == [b"%d" % n for n in range(6)]
        assert all(r.queued is not None and r.served is not None for r in replies)
        assert replies[-1].queued > replies[0].queued
        report = client_.status()
        slow = next(s for s in report["services"] if s["name"] == "slow")
        assert slow["completed"] == 6 and slow["flow"]["concurrency"] == 1 and slow["workers"] == 3
        assert {"transport": transport, "endpoint": endpoint} in report["broker"]["endpoints"]
        with pytest.raises(RequestFailed) as bad:
            client_.request("mmi.flow", [b"slow", b"{not json"], timeout=10)
        assert bad.value.status == 400
        with pytest.raises(RequestFailed):
            client_.flow("slow", rate=-1)
        assert client_.flow("slow", concurrency=None)["concurrency"] is None


def test_cli_status_and_flow(transport, brokers, workers) -> None:
    broker = brokers(transport, ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint(transport, "tcp")
    workers(endpoint, transport)
    base = [sys.executable, "-m", "generaldomo"]
    flow = subprocess.run(
        [*base, "flow", "echo", "--transport", transport, "--connect", endpoint, "--rate", "5", "--burst", "2"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert flow.returncode == 0, flow.stderr
    assert json.loads(flow.stdout) == {"service": "echo", "rate": 5.0, "burst": 2, "concurrency": None}
    shown = subprocess.run(
        [*base, "status", endpoint, "--transport", transport], capture_output=True, text=True, timeout=60
    )
    assert shown.returncode == 0 and "echo" in shown.stdout and "waiting" in shown.stdout
    raw = subprocess.run(
        [*base, "status", endpoint, "--transport", transport, "--json"], capture_output=True, text=True, timeout=60
    )
    echo = next(s for s in json.loads(raw.stdout)["services"] if s["name"] == "echo")
    assert echo["flow"]["rate"] == 5.0 and echo["workers"] == 1

"""Prometheus metrics over HTTP, from a running broker (loopback only)."""

from __future__ import annotations

import subprocess
import sys
import threading

from metrics_page import wait_for

from generaldomo import Client


def test_metrics_reflect_the_broker(transport, brokers, workers) -> None:
    broker = brokers(transport, ["tcp://127.0.0.1:*"])
    port = broker.serve_metrics(0, "127.0.0.1", period=0.05)
    endpoint = broker.endpoint(transport, "tcp")
    workers(endpoint, transport)
    with Client(endpoint, transport) as client:
        for n in range(5):
            client.request("echo", b"%d" % n, timeout=30)
        client.flow("echo", rate=100)
    text = wait_for(port, 'generaldomo_service_completed_total{service="echo"} 5.0')
    assert 'generaldomo_service_completed_total{service="echo"} 5.0' in text
    assert 'generaldomo_service_workers{service="echo"} 1.0' in text
    assert 'generaldomo_service_rate_limit{service="echo"} 100.0' in text
    assert 'generaldomo_service_queue_time_seconds{quantile="0.50",service="echo"}' in text
    assert "generaldomo_uptime_seconds" in text and 'generaldomo_events_total{event="requests"}' in text


def test_cli_metrics_port() -> None:
    broker = subprocess.Popen(
        [sys.executable, "-m", "generaldomo", "broker", "--bind", "tcp://127.0.0.1:*", "--metrics-port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        broker.stdout.readline()
        url = broker.stdout.readline().split()[-1]
        assert url.startswith("http://127.0.0.1:")
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        assert "generaldomo_uptime_seconds" in wait_for(port, "generaldomo_uptime_seconds")
    finally:
        broker.terminate()
        broker.wait(10)


def test_metrics_show_the_write_ahead_log(tmp_path) -> None:
    from generaldomo import Worker
    from generaldomo.io.broker import Broker

    broker = Broker("router", ["tcp://127.0.0.1:*"], state_dir=tmp_path / "state").start()
    worker = None
    try:
        port = broker.serve_metrics(0, "127.0.0.1", period=0.05)
        endpoint = broker.endpoint("router", "tcp")
        worker = Worker(endpoint, "echo", lambda payload: payload)
        threading.Thread(target=worker.serve, daemon=True).start()
        with Client(endpoint) as client:
            assert client.request("echo", b"x", timeout=30).payload == b"x"
        text = wait_for(port, "generaldomo_journal_commits_total")
        assert "generaldomo_journal_waiting_records" in text and "generaldomo_journal_bytes" in text
    finally:
        if worker is not None:
            worker.stop()
        broker.stop()

"""The new flow limits through real sockets: ``generaldomo flow --bytes-in-flight/--adaptive``, the broker's
``--flow`` spec, ``Client.flow`` and the status report (checked against docs/status.schema.json)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import jsonschema
import pytest
from waiting import eventually

from generaldomo import Client
from generaldomo.cli.broker import parse_flow
from generaldomo.sansio.broker.flow.adaptive import AdaptiveLimits

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "docs" / "status.schema.json").read_text())


def test_flow_spec_takes_the_new_keys() -> None:
    spec = parse_flow("echo:rate=5,bytes_in_flight=1000,adaptive=2..16")
    assert (spec.service, spec.rate, spec.bytes_in_flight, spec.adaptive) == ("echo", 5.0, 1000, AdaptiveLimits(2, 16))
    assert parse_flow("echo:adaptive=none,bytes_in_flight=none").adaptive is None
    for bad in ("echo:adaptive=16", "echo:adaptive=3..2", "echo:bytes_in_flight=0x"):
        with pytest.raises(ValueError):
            parse_flow(bad)


def test_cli_sets_and_lifts_the_new_limits_and_status_shows_them(transport, brokers, workers) -> None:
    broker = brokers(transport, ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint(transport, "tcp")
    workers(endpoint, transport)
    base = [sys.executable, "-m", "generaldomo", "flow", "echo", "--transport", transport, "--connect", endpoint]

    def flow(*flags: str) -> dict:
        run = subprocess.run([*base, *flags], capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        return json.loads(run.stdout)

    shown = flow("--bytes-in-flight", "4096", "--adaptive", "2..8")
    assert shown["bytes_in_flight"] == 4096 and shown["adaptive"] == {"min": 2, "max": 8}
    with Client(endpoint, transport) as client:
        for n in range(5):
            assert client.request("echo", b"%d" % n, timeout=30).payload == b"%d" % n
        report = client.status()
        jsonschema.Draft202012Validator(SCHEMA).validate(report)
        echo = next(s for s in report["services"] if s["name"] == "echo")["flow"]
        assert echo["bytes_in_flight"] == 4096 and echo["in_flight_bytes"] == 0
        assert (echo["adaptive"]["min"], echo["adaptive"]["max"]) == (2, 8) and 2 <= echo["adaptive"]["cap"] <= 8
        assert echo["adaptive"]["floor"] is not None
        lifted = flow("--bytes-in-flight", "none", "--adaptive", "none")
        assert "bytes_in_flight" not in lifted and "adaptive" not in lifted
        echo = next(s for s in client.status()["services"] if s["name"] == "echo")["flow"]
        assert echo["bytes_in_flight"] is None and echo["adaptive"] is None
        with pytest.raises(Exception, match="adaptive"):
            client.flow("echo", adaptive={"min": 0})


def test_broker_flow_spec_at_start_holds_a_large_request_alone(tmp_path: Path) -> None:
    address = tmp_path / "broker.address"
    broker = subprocess.Popen(
        [sys.executable, "-m", "generaldomo", "broker", "--bind", "tcp://127.0.0.1:*", "--address-file",
         str(address), "--flow", "echo:bytes_in_flight=100,adaptive=1..4"],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not address.exists():  # written whole or not at all
            assert broker.poll() is None and time.monotonic() < deadline, "the broker did not start"
            time.sleep(0.05)
        endpoint = json.loads(address.read_text())["endpoints"][0]["endpoint"]
        with Client(endpoint) as client:
            shown = client.flow("echo")
            assert shown["bytes_in_flight"] == 100 and shown["adaptive"] == {"min": 1, "max": 4}
    finally:
        broker.terminate()
        broker.wait(30)


def test_metrics_show_the_new_limits(brokers, workers) -> None:
    broker = brokers("router", ["tcp://127.0.0.1:*"])
    port = broker.serve_metrics(0, "127.0.0.1", period=0.05)
    endpoint = broker.endpoint("router", "tcp")
    workers(endpoint, "router")
    with Client(endpoint) as client:
        client.flow("echo", bytes_in_flight=2048, adaptive={"min": 3, "max": 9})
        for n in range(3):
            client.request("echo", b"%d" % n, timeout=30)

    def page() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            text = response.read().decode()
        return text if "generaldomo_service_adaptive_floor_seconds{" in text else ""

    text = eventually(page, what="the adaptive floor in the metrics")
    assert 'generaldomo_service_bytes_in_flight_limit{service="echo"} 2048.0' in text
    assert 'generaldomo_service_adaptive_limit{service="echo"} 3.0' in text
    assert 'generaldomo_service_in_flight_bytes{service="echo"}' in text


def test_status_view_shows_the_new_limits_only_when_set() -> None:
    from core_harness import Harness, client, worker

    from generaldomo.cli.status_view import render

    h = Harness()
    h.ready(worker(1))
    h.ready(worker(2), b"plain")
    h.core.set_flow("echo", h.now, bytes_in_flight=500, adaptive=AdaptiveLimits(2, 6))
    h.request(client(0), b"r1", body=b"x" * 10)
    text = render(h.core.report(h.now))
    assert "echo: bytes in flight 14/500, adaptive cap 2 (2..6, floor -)" in text
    assert "plain:" not in text

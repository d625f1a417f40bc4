"""Discovery by address file: atomic writes, waiting readers, removal on exit, real processes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from generaldomo.errors import DiscoveryError
from generaldomo.io import address_file
from generaldomo.io.address_file import BrokerAddress, Published
from generaldomo.io.beacon import find_broker

COMMAND = [sys.executable, "-m", "generaldomo"]
ADDRESS = BrokerAddress("b1", "0a0b0c0d", (("router", "tcp://10.0.0.5:5555"), ("server", "ipc:///tmp/b.sock")))


def test_round_trip_and_what_readers_refuse(tmp_path: Path) -> None:
    path = tmp_path / "broker.json"
    address_file.write(path, ADDRESS)
    assert address_file.read(path) == ADDRESS
    body = json.loads(path.read_text())
    assert body["version"] == 1 and body["public_key"] is None  # a field for the CURVE key, filled later
    assert ADDRESS.endpoint("server") == "ipc:///tmp/b.sock"
    with pytest.raises(LookupError, match=re.escape("lists router tcp://10.0.0.5:5555")):
        BrokerAddress("b1", "0", (("router", "tcp://10.0.0.5:5555"),)).endpoint("server")
    for foreign in (b"", b"not json", b"[]", b"{}", b'{"version": 2}', b'{"version": 1, "name": "x"}', b"\xff"):
        with pytest.raises(ValueError):
            address_file.decode(foreign)
    assert address_file.decode(json.dumps({**body, "later": "ignored"}).encode()) == ADDRESS


def test_readers_never_see_half_a_file(tmp_path: Path) -> None:
    path = tmp_path / "broker.json"
    big = [("router", f"tcp://10.0.0.{n % 250}:{5000 + n}") for n in range(2000)]  # far beyond one write()
    versions = [BrokerAddress("b", str(n), tuple(big)) for n in range(2)]
    address_file.write(path, versions[0])
    stop = threading.Event()

    def rewrite() -> None:
        for n in range(200):
            address_file.write(path, versions[n % 2])
        stop.set()

    writer = threading.Thread(target=rewrite)
    writer.start()
    reads = 0
    while not stop.is_set() and reads < 100_000:
        assert address_file.read(path) in versions  # raises if the reader saw a partial file
        reads += 1
    writer.join(60)
    assert reads and not [p for p in tmp_path.iterdir() if p != path]  # no temporary file left behind


def test_waiting_for_a_file_is_bounded_and_says_why(tmp_path: Path) -> None:
    with pytest.raises(TimeoutError, match="no broker address file appeared"):
        address_file.wait(tmp_path / "never.json", 0.2)
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(TimeoutError, match="unusable"):
        address_file.wait(tmp_path / "bad.json", 0.2)
    later = tmp_path / "later.json"
    threading.Timer(0.3, address_file.write, (later, ADDRESS)).start()
    assert address_file.wait(later, 30) == ADDRESS


def test_published_removes_only_its_own_file(tmp_path: Path) -> None:
    path = tmp_path / "broker.json"
    with Published(path, "b1", "aaaa", [("router", "tcp://127.0.0.1:1")]) as published:
        assert address_file.read(path).instance == "aaaa" and address_file.read(path).pid == os.getpid()
    assert not path.exists()
    with Published(path, "b1", "aaaa", [("router", "tcp://127.0.0.1:1")]):
        address_file.write(path, ADDRESS)  # another broker took the path over
    assert address_file.read(path) == ADDRESS
    published.remove()  # nothing to do twice, and never raises


def test_discovery_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "broker.json"
    address_file.write(path, ADDRESS)
    monkeypatch.setenv("GENERALDOMO_BROKER", "tcp://127.0.0.1:1")
    monkeypatch.setenv("GENERALDOMO_BROKER_FILE", str(path))
    assert find_broker("router", "ipc:///explicit") == "ipc:///explicit"
    assert find_broker("router") == "tcp://127.0.0.1:1"
    monkeypatch.delenv("GENERALDOMO_BROKER")
    assert find_broker("router") == "tcp://10.0.0.5:5555"  # the file named by the environment
    assert find_broker("server", broker_file=path) == "ipc:///tmp/b.sock"
    with pytest.raises(DiscoveryError, match="no broker address file appeared"):
        find_broker("router", broker_file=tmp_path / "missing.json", timeout=0.2)
    monkeypatch.delenv("GENERALDOMO_BROKER_FILE")
    monkeypatch.setenv("GENERALDOMO_BEACON_BIND", "127.0.0.1")
    monkeypatch.setenv("GENERALDOMO_BEACON_PORT", "0")
    with pytest.raises(DiscoveryError, match="beacon"):  # last, the beacon
        find_broker("router", timeout=0.2)


def test_peers_started_before_the_broker_find_it_by_its_address_file(transport: str, tmp_path: Path) -> None:
    path = tmp_path / "shared" / "broker.json"
    path.parent.mkdir()
    env = {key: value for key, value in os.environ.items() if not key.startswith("GENERALDOMO_BROKER")}
    wait = ["--transport", transport, "--broker-file", str(path), "--find-timeout", "60"]
    started: list[subprocess.Popen[str]] = []

    def spawn(*args: str) -> subprocess.Popen[str]:
        pipe = subprocess.PIPE
        process = subprocess.Popen([*COMMAND, *args], stdout=pipe, stderr=pipe, text=True, env=env)
        started.append(process)
        return process

    try:
        worker = spawn("worker", *wait, "--service", "echo")
        client = spawn("client", *wait, "--timeout", "60", "echo", "found", "you")
        broker = spawn("broker", "--transport", transport, "--bind", "tcp://127.0.0.1:*", "--address-file", str(path))
        endpoint = broker.stdout.readline().split()[-1]
        assert broker.stdout.readline().strip() == f"generaldomo broker: address file {path}"
        assert address_file.read(path).endpoint(transport) == endpoint
        out, err = client.communicate(timeout=90)
        assert client.returncode == 0, err
        assert out.splitlines() == ["found", "you"]
        assert worker.stdout.readline().strip() == f"generaldomo worker: serving 'echo' from {endpoint} ({transport})"
        broker.send_signal(signal.SIGTERM)
        assert broker.wait(30) == 0
        assert not path.exists() and list(path.parent.iterdir()) == []
    finally:
        for process in started:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in started:
            try:
                process.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()


def test_a_peer_with_no_file_in_time_says_so(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("GENERALDOMO_BROKER")}
    env["GENERALDOMO_BROKER_FILE"] = str(tmp_path / "none.json")
    result = subprocess.run(
        [*COMMAND, "client", "--find-timeout", "0.3", "echo"], capture_output=True, text=True, timeout=60, env=env
    )
    assert result.returncode == 2 and "no broker address file appeared at" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_write_removes_the_leftovers_of_a_writer_killed_midway(tmp_path: Path) -> None:
    path = tmp_path / "broker.json"
    old, fresh = tmp_path / ".broker.json.0a1b2c.tmp", tmp_path / ".broker.json.3d4e5f.tmp"
    for leftover in (old, fresh):
        leftover.write_bytes(b"{")
    os.utime(old, (time.time() - 3600, time.time() - 3600))  # a kill -9 an hour ago; fresh: a write in flight
    address_file.write(path, ADDRESS)
    assert not old.exists() and fresh.exists() and address_file.read(path) == ADDRESS

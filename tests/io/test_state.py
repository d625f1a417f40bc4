"""The state directory: run-time flow limits survive a restart (the store's rules, then real brokers)."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from generaldomo import Broker, Client, Worker
from generaldomo.errors import StateError
from generaldomo.io.hub import state
from generaldomo.io.hub.state import StateDir
from generaldomo.sansio.broker.flow.adaptive import AdaptiveLimits
from generaldomo.sansio.broker.flow.flow import FlowLimits
from generaldomo.sansio.broker.flow.retry import RetryPolicy
from generaldomo.sansio.broker.mmi import FlowChange
from generaldomo.sansio.config.settings import Settings

COMMAND = [sys.executable, "-m", "generaldomo"]
LOOSE = Settings(heartbeat_interval=1.0, liveness=6)  # a loaded machine may pause a thread for seconds
UNSET = FlowLimits()


def test_changes_are_kept_with_their_base_and_restored_while_the_base_holds(tmp_path: Path) -> None:
    configured = {"echo": FlowLimits(rate=5.0)}
    store = StateDir(tmp_path)
    assert store.restore(configured) == []
    store.record([FlowChange("echo", FlowLimits(rate=1.0, concurrency=2)), FlowChange("other", FlowLimits(burst=3))])
    store.record([FlowChange("other", UNSET)])  # back to its base (nothing configured): nothing to keep
    adaptive = FlowLimits(adaptive=AdaptiveLimits(2, 8))
    store.record([FlowChange("third", adaptive)])
    store.close()
    body = json.loads((tmp_path / state.STATE_FILE).read_text())
    assert sorted(body["flows"]) == ["echo", "third"] and body["flows"]["echo"]["base"]["rate"] == 5.0
    assert body["flows"]["third"]["limits"]["adaptive"] == {"min": 2, "max": 8}

    again = StateDir(tmp_path)
    restored = again.restore(configured)
    assert restored == [FlowChange("echo", FlowLimits(rate=1.0, concurrency=2)), FlowChange("third", adaptive)]
    again.record([FlowChange("echo", FlowLimits(rate=5.0))])  # set back to what the configuration says
    again.close()
    assert list(json.loads((tmp_path / state.STATE_FILE).read_text())["flows"]) == ["third"]

    changed_config = StateDir(tmp_path)  # the operator now configures "third" itself: the configuration wins
    assert changed_config.restore({"third": FlowLimits(concurrency=1)}) == []
    changed_config.close()
    assert json.loads((tmp_path / state.STATE_FILE).read_text())["flows"] == {}


def test_a_retry_policy_is_kept_in_the_state_file_and_restored(tmp_path: Path) -> None:
    policy = FlowLimits(retry=RetryPolicy(retries=2, min=0.5, max=4.0, statuses=(500,)))
    store = StateDir(tmp_path)
    store.record([FlowChange("echo", policy)])
    store.close()
    body = json.loads((tmp_path / state.STATE_FILE).read_text())
    saved = body["flows"]["echo"]["limits"]["retry"]
    assert saved == {"retries": 2, "backoff": {"min": 0.5, "max": 4.0}, "statuses": [500]}
    again = StateDir(tmp_path)
    assert again.restore({}) == [FlowChange("echo", policy)]
    again.close()


def test_one_broker_per_directory_and_the_key_is_made_once(tmp_path: Path) -> None:
    first = StateDir(tmp_path)
    with pytest.raises(StateError, match="in use by another broker"):
        StateDir(tmp_path)
    key = first.handover_key
    assert len(key) == state.KEY_BYTES
    assert stat.S_IMODE(os.stat(tmp_path / state.KEY_FILE).st_mode) == 0o600
    first.close()
    second = StateDir(tmp_path)
    assert second.handover_key == key
    second.close()


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"{",
        b"[]",
        b'{"version": 2, "flows": {}}',
        b'{"version": 1, "flows": []}',
        b'{"version": 1, "flows": {"echo": {"limits": {"rate": -1}, "base": {}}}}',
        b'{"version": 1, "flows": {"echo": {"limits": {"speed": 1}, "base": {}}}}',
        b'{"version": 1, "flows": {"echo": {"limits": {}}}}',
        b'{"version": 1, "flows": {"echo": 7}}',
        b"[" * 100_000,
        b"\xff\xfe",
    ],
)
def test_an_unusable_state_file_is_set_aside_and_the_broker_serves(tmp_path: Path, content: bytes, caplog) -> None:
    (tmp_path / state.STATE_FILE).write_bytes(content)
    os.chmod(tmp_path, 0o700)
    store = StateDir(tmp_path)
    assert store.entries == {}
    store.close()
    (aside,) = tmp_path.glob("state.json.unusable-*")
    assert aside.read_bytes() == content and not (tmp_path / state.STATE_FILE).exists()
    assert "state.json is unusable" in caplog.text and aside.name in caplog.text


def test_a_state_file_too_large_is_set_aside_unread(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o700)
    with open(tmp_path / state.STATE_FILE, "wb") as file:
        file.truncate(state.MAX_STATE_BYTES + 1)  # sparse: no disk used
    store = StateDir(tmp_path)
    assert store.entries == {}
    store.close()
    assert len(list(tmp_path.glob("state.json.unusable-*"))) == 1


def test_a_short_key_is_set_aside_and_a_new_one_made(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o700)
    (tmp_path / state.KEY_FILE).write_bytes(b"short")
    os.chmod(tmp_path / state.KEY_FILE, 0o600)
    store = StateDir(tmp_path)
    assert len(store.handover_key) == state.KEY_BYTES and not store.reused
    store.close()
    (aside,) = tmp_path.glob("handover.key.unusable-*")
    assert aside.read_bytes() == b"short"


def test_an_embedded_broker_restores_run_time_limits_from_its_first_request(tmp_path: Path) -> None:
    def broker() -> Broker:
        made = Broker("router", ["tcp://127.0.0.1:*"], settings=LOOSE, state_dir=tmp_path)
        made.core.set_flow("echo", 0.0, concurrency=4)  # configuration: the base of run-time changes
        return made.start()

    first = broker()
    endpoint = first.endpoint("router", "tcp")
    with Client(endpoint) as client:
        assert client.flow("echo", concurrency=1, rate=50.0)["concurrency"] == 1
    first.stop()
    assert json.loads((tmp_path / state.STATE_FILE).read_text())["flows"]["echo"]["limits"]["concurrency"] == 1

    second = broker()  # on another port: what counts is the directory
    try:
        endpoint = second.endpoint("router", "tcp")
        assert second.core.flow_limits("echo") == FlowLimits(rate=50.0, concurrency=1)
        serving = [_worker(endpoint, 0.5) for _ in range(2)]
        with Client(endpoint) as client:
            futures = [client.submit("echo", b"%d" % n) for n in range(2)]
            replies = [future.result(60) for future in futures]
            assert client.flow("echo")["concurrency"] == 1
        # two workers, but one task at a time: the second waited for the first
        assert max(reply.queued for reply in replies if reply.queued is not None) >= 0.4
    finally:
        for worker, _ in serving:
            worker.stop()
        second.stop()
        for _, thread in serving:
            thread.join(10)


def _worker(endpoint: str, seconds: float) -> tuple[Worker, threading.Thread]:
    def slow(payload: bytes | tuple[bytes, ...]) -> bytes | tuple[bytes, ...]:
        time.sleep(seconds)
        return payload

    worker = Worker(endpoint, "echo", slow, heartbeat_interval=LOOSE.heartbeat_interval, liveness=LOOSE.liveness)
    thread = threading.Thread(target=worker.serve, daemon=True)
    thread.start()
    return worker, thread


def test_cli_flow_changes_survive_kill_9(tmp_path: Path, transport: str) -> None:
    directory = tmp_path / "state"
    address = tmp_path / "broker.json"
    base = ["broker", "--transport", transport, "--bind", "tcp://127.0.0.1:*", "--state-dir", str(directory)]
    base += ["--address-file", str(address), "--flow", "echo:rate=100"]
    started: list[subprocess.Popen[str]] = []

    def broker() -> str:
        process = subprocess.Popen([*COMMAND, *base], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        started.append(process)
        assert process.stdout is not None
        return process.stdout.readline().split()[-1]

    def flow(endpoint: str, *flags: str) -> dict[str, object]:
        command = [
            *COMMAND,
            "flow",
            "echo",
            "--create",
            "--transport",
            transport,
            "--connect",
            endpoint,
            "--timeout",
            "30",
        ]
        run = subprocess.run([*command, *flags], capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        answer: dict[str, object] = json.loads(run.stdout)
        return answer

    try:
        endpoint = broker()
        assert flow(endpoint)["rate"] == 100  # the configuration
        assert flow(endpoint, "--concurrency", "3", "--adaptive", "1..2")["concurrency"] == 3
        started[-1].send_signal(signal.SIGKILL)
        started[-1].wait(30)
        endpoint = broker()
        shown = flow(endpoint)
        assert (shown["rate"], shown["concurrency"], shown["adaptive"]) == (100, 3, {"min": 1, "max": 2})
    finally:
        for process in started:
            if process.poll() is None:
                process.kill()
            process.communicate(timeout=30)


def test_the_core_reports_the_latest_change_per_name_in_order() -> None:
    from generaldomo.sansio.broker.core import BrokerCore, Peer
    from generaldomo.sansio.wire import protocol

    core = BrokerCore(random=lambda n: bytes(n))
    assert not core.changed
    ask = protocol.gdp_request(b"r1", b"mmi.flow", [b"echo", b'{"rate": 2}'])
    core.receive(Peer(0, b"admin"), ask, 0.0)
    core.set_flow("other", 0.0, concurrency=3)
    core.receive(Peer(0, b"admin"), protocol.gdp_request(b"r2", b"mmi.flow", [b"echo", b'{"rate": 4}']), 0.0)
    core.receive(Peer(0, b"admin"), protocol.gdp_request(b"r3", b"mmi.flow", [b"echo"]), 0.0)  # a read: no change
    assert core.changed
    assert core.take_changes() == [
        FlowChange("other", FlowLimits(concurrency=3)),
        FlowChange("echo", FlowLimits(rate=4.0)),
    ]
    assert not core.changed and core.take_changes() == []

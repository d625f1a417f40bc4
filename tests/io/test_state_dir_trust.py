"""The state directory trusts no one who prepared it: planted links, FIFOs, devices, leftovers and loose
permissions, met by ``generaldomo broker --state-dir`` in real processes (and by the store where only its
content tells)."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import threading
from pathlib import Path

import pytest
from cli_processes import COMMAND, expect, lines, spawn
from waiting import eventually

from generaldomo import Broker, Client, Worker
from generaldomo.errors import StateError
from generaldomo.io.hub import state
from generaldomo.io.hub.state import StateDir
from generaldomo.sansio.broker.flow.flow import FlowLimits
from generaldomo.sansio.broker.mmi import FlowChange
from generaldomo.sansio.config.settings import Settings

LOOSE = Settings(heartbeat_interval=1.0, liveness=6)
NOBODY = 65534


def start(processes: list[subprocess.Popen[str]], directory: Path) -> subprocess.Popen[str]:
    """A CLI broker on ``directory``, once it serves (a start that hangs fails here, after a bounded wait); its
    endpoint in :data:`ENDPOINTS`."""
    process = spawn(processes, "broker", "--bind", "tcp://127.0.0.1:*", "--state-dir", str(directory))
    assert process.stdout is not None
    ENDPOINTS[id(process)] = expect(lines(process.stdout), "tcp://127.0.0.1:", timeout=60).split()[-1]
    return process


ENDPOINTS: dict[int, str] = {}  # id of a process started by start() -> its endpoint


def stop(process: subprocess.Popen[str]) -> str:
    process.send_signal(signal.SIGTERM)
    _, errors = process.communicate(timeout=60)
    assert process.returncode == 0, errors
    return errors


def private(tmp_path: Path) -> Path:
    directory = tmp_path / "state"
    directory.mkdir(mode=0o700)
    os.chmod(directory, 0o700)
    return directory


def test_the_directory_is_made_private(tmp_path: Path, processes) -> None:
    directory = tmp_path / "new" / "state"
    stop(start(processes, directory))
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700


def test_a_lock_link_makes_no_file_at_its_target(tmp_path: Path, processes) -> None:
    directory, target = private(tmp_path), tmp_path / "made-by-the-broker"
    (directory / state.LOCK_FILE).symlink_to(target)
    errors = stop(start(processes, directory))
    assert not target.exists() and not target.is_symlink()
    assert "lock is unusable" in errors and (directory / state.LOCK_FILE).is_file()


def test_a_planted_handover_key_link_is_not_used(tmp_path: Path) -> None:
    directory, known = private(tmp_path), tmp_path / "known.key"
    known.write_bytes(b"k" * state.KEY_BYTES)
    os.chmod(known, 0o600)
    (directory / state.KEY_FILE).symlink_to(known)
    store = StateDir(directory)
    try:
        assert store.handover_key != known.read_bytes() and not store.reused
    finally:
        store.close()
    assert known.read_bytes() == b"k" * state.KEY_BYTES  # not written through either
    assert not (directory / state.KEY_FILE).is_symlink()


@pytest.mark.parametrize("name", [state.STATE_FILE, state.KEY_FILE, state.LOCK_FILE])
def test_a_fifo_in_the_directory_does_not_hang_the_start(tmp_path: Path, processes, name: str) -> None:
    directory = private(tmp_path)
    os.mkfifo(directory / name, 0o600)
    errors = stop(start(processes, directory))
    assert f"{name} is unusable" in errors and "not a regular file" in errors
    assert not (directory / name).is_fifo()


@pytest.mark.parametrize("name", [state.STATE_FILE, state.KEY_FILE])
def test_a_link_to_dev_zero_is_not_read(tmp_path: Path, processes, name: str) -> None:
    directory = private(tmp_path)
    (directory / name).symlink_to("/dev/zero")
    errors = stop(start(processes, directory))
    assert f"{name} is unusable" in errors and "symbolic link" in errors


def test_leftovers_of_a_write_killed_midway_are_removed_at_start(tmp_path: Path, processes) -> None:
    directory = private(tmp_path)
    leftovers = [directory / ".state.json.abc123.tmp", directory / ".handover.key.def456.tmp"]
    for path in leftovers:
        path.write_bytes(b"x" * 1000)
    stop(start(processes, directory))
    assert not any(path.exists() for path in leftovers)


def test_a_directory_of_another_user_or_open_to_others_is_refused(tmp_path: Path, processes) -> None:
    directory = private(tmp_path)
    os.chmod(directory, 0o777)
    for mode in (0o777, 0o770):
        os.chmod(directory, mode)
        with pytest.raises(StateError, match="writable by others"):
            StateDir(directory)
    os.chmod(directory, 0o700)
    if os.geteuid() == 0:  # root can give the directory to another user
        os.chown(directory, NOBODY, NOBODY)
        with pytest.raises(StateError, match="owned by another user"):
            StateDir(directory)
        run = subprocess.run(
            [*COMMAND, "broker", "--bind", "tcp://127.0.0.1:*", "--state-dir", str(directory)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 2 and "owned by another user" in run.stderr and str(directory) in run.stderr


def test_a_flow_answer_waits_for_the_disk_while_others_are_served(tmp_path: Path) -> None:
    """The state file is written off the loop: while a write is held up, other peers get their answers, the
    change's own answer waits, and it comes once the change is on disk."""
    broker = Broker("router", ["tcp://127.0.0.1:*"], settings=LOOSE, state_dir=private(tmp_path))
    assert broker.state is not None
    store, write = broker.state, broker.state._write
    entered, release = threading.Event(), threading.Event()

    def held_write(data: bytes) -> None:  # the real write, once the test lets it go
        entered.set()
        release.wait(120)
        write(data)

    store._write = held_write  # type: ignore[method-assign]
    broker.start()
    endpoint = broker.endpoint("router", "tcp")
    worker = Worker(endpoint, "echo", lambda payload: payload, heartbeat_interval=1.0, liveness=6)
    thread = threading.Thread(target=worker.serve, daemon=True)
    thread.start()
    answered = threading.Event()
    try:
        with Client(endpoint) as admin, Client(endpoint, fail_unknown=False) as honest:
            assert honest.request("echo", b"up", timeout=60).frames == (b"up",)  # the worker is registered

            def change() -> None:
                admin.flow("echo", concurrency=3)
                answered.set()

            changing = threading.Thread(target=change, daemon=True)
            changing.start()
            assert entered.wait(60)
            for n in range(3):  # the loop serves while the write is held up
                assert honest.request("echo", b"%d" % n, timeout=60).frames == (b"%d" % n,)
            assert not answered.is_set()
            release.set()
            assert answered.wait(60)
            changing.join(60)
        body = json.loads((store.path / state.STATE_FILE).read_text())
        assert body["flows"]["echo"]["limits"]["concurrency"] == 3
    finally:
        release.set()
        worker.stop()
        broker.stop()
        thread.join(10)


def test_changes_made_during_a_write_are_coalesced(tmp_path: Path) -> None:
    store = StateDir(private(tmp_path))
    store.restore({})
    writes: list[bytes] = []
    write, entered, release = store._write, threading.Event(), threading.Event()

    def counted(data: bytes) -> None:
        writes.append(data)
        entered.set()
        release.wait(60)
        write(data)

    store._write = counted  # type: ignore[method-assign]
    try:
        store.record([FlowChange("a", FlowLimits(concurrency=1))])
        assert entered.wait(60)
        for n in range(2, 50):
            store.record([FlowChange("a", FlowLimits(concurrency=n))])
        release.set()
        store.flush(60)
        eventually(lambda: store.durable == store.generation, 60)
        assert len(writes) == 2  # the first, then one for the 48 changes made during it
    finally:
        release.set()
        store.close()
    assert json.loads((tmp_path / "state" / state.STATE_FILE).read_text())["flows"]["a"]["limits"]["concurrency"] == 49


def test_a_state_file_too_large_does_not_stop_the_broker(tmp_path: Path, processes) -> None:
    directory = private(tmp_path)
    with open(directory / state.STATE_FILE, "wb") as file:
        file.truncate(state.MAX_STATE_BYTES + 1)  # sparse: what a peer's limits grew it to, without the disk
    errors = stop(start(processes, directory))
    assert "state.json is unusable" in errors and "larger than" in errors
    assert len(list(directory.glob("state.json.unusable-*"))) == 1


def test_a_state_write_that_fails_stops_the_broker_unanswered(tmp_path: Path, processes) -> None:
    directory = private(tmp_path)
    broker = start(processes, directory)
    (directory / state.STATE_FILE).mkdir()  # the rename over it fails (EISDIR), as a full disk would fail it
    endpoint = ENDPOINTS[id(broker)]
    flow = subprocess.run([*COMMAND, "flow", "echo", "--create", "--concurrency", "3", "--connect", endpoint,
                           "--timeout", "10"], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert flow.returncode != 0 and '"concurrency": 3' not in flow.stdout
    _, errors = broker.communicate(timeout=60)
    assert broker.returncode == 6 and "cannot write the broker state file" in errors

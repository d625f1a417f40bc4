"""Issue 20 item 7: a refused worker backs off (about 1 s, doubled up to 60 s, with jitter), saying why once per
step, and the broker's refusal lines are rate-limited per key. Sans-IO, then real sockets on both transports."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from curve_keys import Keyring
from waiting import eventually

from generaldomo import Broker, Worker
from generaldomo.io import keys
from generaldomo.sansio.config.settings import PeerSettings
from generaldomo.sansio.peer.session import RETRY_WAIT_FIRST, RETRY_WAIT_MOST, Reconnect, ToBroker, WorkerSession
from generaldomo.sansio.wire import protocol

DISCONNECT = protocol.gdp_worker_command(protocol.DISCONNECT)
HEARTBEAT = protocol.gdp_worker_command(protocol.HEARTBEAT)


def refused_until(session: WorkerSession, now: float) -> list[float]:
    """Refuse each READY the session sends up to ``now``; return when each READY went out."""
    readies = [0.0]
    session.start()
    while True:
        assert session.receive(DISCONNECT, readies[-1]) == []  # refused: nothing at once
        retry = session.deadline()
        assert retry is not None and retry > readies[-1]
        assert session.tick(retry - 0.001) == []  # nothing goes out during the wait, heartbeats neither
        if retry > now:
            return readies
        actions = session.tick(retry)
        assert isinstance(actions[0], Reconnect) and isinstance(actions[1], ToBroker)
        readies.append(retry)


def test_refused_readies_wait_twice_as_long_each_time_up_to_a_minute() -> None:
    session = WorkerSession(b"echo", PeerSettings(), 0.0)  # no jitter: the steps themselves
    readies = refused_until(session, 600.0)
    waits = [round(b - a, 6) for a, b in itertools.pairwise(readies)]
    assert waits[:7] == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0] and set(waits[6:]) == {RETRY_WAIT_MOST}
    assert session.refusals == len(readies)


@pytest.mark.parametrize("draw", [0.0, 0.999])
def test_the_waits_have_jitter_within_a_quarter_of_their_step(draw: float) -> None:
    session = WorkerSession(b"echo", PeerSettings(), 0.0, uniform=lambda: draw)
    readies = refused_until(session, 100.0)
    first = readies[1] - readies[0]
    assert 0.75 * RETRY_WAIT_FIRST <= first <= 1.25 * RETRY_WAIT_FIRST and first != RETRY_WAIT_FIRST


def test_an_answered_ready_resets_the_wait_and_a_later_disconnect_registers_at_once() -> None:
    session = WorkerSession(b"echo", PeerSettings(), 0.0)
    session.start()
    session.receive(DISCONNECT, 0.0)
    session.tick(1.0)  # READY again
    session.receive(DISCONNECT, 1.0)
    assert session.deadline() == 3.0  # the second wait: 2 s
    session.tick(3.0)
    session.receive(HEARTBEAT, 3.1)  # registered
    again = session.receive(DISCONNECT, 10.0)  # the broker restarted and forgot it: not a refusal
    assert isinstance(again[0], Reconnect) and isinstance(again[1], ToBroker)
    assert session.receive(DISCONNECT, 10.0) == [] and session.deadline() == 11.0  # refused: the first step


# ---------------------------------------------------------------------------------------------- live


@pytest.fixture
def keyring(tmp_path: Path) -> Keyring:
    return Keyring(tmp_path)


def serve(worker: Worker) -> threading.Thread:
    thread = threading.Thread(target=worker.serve, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("refusal", ["curve service", "curve role", "mmi description"])
def test_a_refused_worker_backs_off_and_both_sides_log_a_few_lines(
    transport: str, keyring: Keyring, refusal: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The finding: a refused CURVE worker reconnected every ~7 ms, ~130 registrations a second, each logged on
    both sides."""
    curve = refusal.startswith("curve")
    broker = Broker(transport, ["tcp://127.0.0.1:*"], security=keyring.security() if curve else None).start()
    endpoint = broker.endpoint(transport, "tcp")
    options: dict[str, Any] = {}
    if curve:  # the worker key may serve echo* only; the client key has no worker role
        name = "worker" if refusal == "curve service" else "client"
        options = {"server_key": keys.load_public(keyring.secret("broker")),
                   "keys": keys.load_secret(keyring.secret(name))}  # fmt: skip
    description = "mmi.mine" if refusal == "mmi description" else "other"
    worker = Worker(endpoint, description, lambda payload: payload, transport, **options)
    with caplog.at_level(logging.INFO):
        thread = serve(worker)
        try:
            eventually(lambda: worker.refusals >= 2, 30, "two refusals")
            started, refusals = time.monotonic(), worker.refusals
            time.sleep(4.0)  # the next waits are 2 s and 4 s: at most two more READYs
            assert worker.refusals - refusals <= 2, f"{worker.refusals - refusals} refusals in 4 s"
        finally:
            worker.stop()
            thread.join(20)
            broker.stop()
    elapsed = time.monotonic() - started
    counters = broker.core.counters
    refused = max(counters["workers_refused"], counters["forbidden"])  # without the worker role: forbidden only
    assert worker.refusals <= 5 and refused <= worker.refusals + 3, (dict(counters), elapsed)  # + its DISCONNECTs
    said = [r for r in caplog.records if "refused this worker's READY" in r.getMessage()]
    assert len(said) == worker.refusals  # one line per step
    broker_lines = [
        r for r in caplog.records if r.name == "generaldomo.sansio.broker.core" and "refused" in r.getMessage()
    ]
    assert len(broker_lines) <= 2  # rate-limited per key, not per connection

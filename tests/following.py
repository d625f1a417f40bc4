"""Peers that follow a broker that moves (address files, beacons, several endpoints): the settings they run
with, a beacon port of the test's own, a worker served in a thread, and a broker silenced as kill -9 would."""

from __future__ import annotations

import threading

import pytest

from generaldomo import Broker, Settings, Worker
from generaldomo.io.beacon import Listener

FAST = Settings(heartbeat_interval=0.25, liveness=4)  # a silent broker is noticed within a second
PEER = {"heartbeat_interval": 0.25, "liveness": 4}  # the peers' side of FAST


def beacon_port(monkeypatch: pytest.MonkeyPatch) -> int:
    """A free UDP port for this test's beacons, on loopback, which peers listen on (their variables set, and a
    broker named by the environment unset, so that they look for a beacon)."""
    with Listener(port=0, bind="127.0.0.1") as probe:
        port = probe.port
    monkeypatch.setenv("GENERALDOMO_BEACON_PORT", str(port))
    monkeypatch.setenv("GENERALDOMO_BEACON_BIND", "127.0.0.1")
    for variable in ("GENERALDOMO_BROKER", "GENERALDOMO_BROKER_FILE"):
        monkeypatch.delenv(variable, raising=False)
    return port


def serve(worker: Worker) -> threading.Thread:
    """``worker`` serving in a daemon thread (the caller stops it and joins the thread)."""
    thread = threading.Thread(target=worker.serve, daemon=True)
    thread.start()
    return thread


def silence(broker: Broker) -> None:
    """A broker that goes away without a word (as kill -9 would: no DISCONNECT to its workers)."""
    broker.core.close()  # forget the workers, so that stop() says nothing to them
    broker.stop()

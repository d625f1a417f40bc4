"""The fuzzer learns sequences: a hypothesis state machine against a live ``generaldomo broker`` process with a
state directory and metrics, whose rules add up what one peer may make over time (services, tenants' limits,
flow entries, status pages back to back, a budget filled to its end, one-off tenant names) and restart the broker
on its state directory (``kill -9``). After each step: the honest echo client is answered (within a generous
bound: its figure is bench.bombs's), the broker's barrier caught nothing, its resident memory is within 1.5
times its ledger's budget plus a constant, and its metrics page answers. ``tox`` runs a short profile of it,
``tox -e fuzz`` a longer one (fuzz_profiles)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import zmq
from fuzz_profiles import fuzz_settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from raw_peers import RawClient, rss_kib
from transports import TRANSPORTS

from generaldomo import Client, Worker
from generaldomo.sansio.wire import protocol

MIB = 1024 * 1024
HELD = 16 * MIB  # --held-bytes: small, so that rules reach it
SLACK = 96 * MIB  # what the process may grow by beyond 1.5 times that budget (allocator, caches, pages)
WAIT = 20.0  # seconds the honest echo may take on a loaded machine (the figure is the bench's)
EMOJI = "\U0001f600"


class Live:
    """A broker process on ``transport`` with a state directory and a metrics port, an echo worker and an
    honest client; :meth:`restart` kills it (``-9``) and starts another on the same state directory."""

    def __init__(self, transport: str, state: Path) -> None:
        self.transport, self.state = transport, state
        self.context = zmq.Context()
        self.start()

    def start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "generaldomo", "broker", "--transport", self.transport,
             "--bind", "tcp://127.0.0.1:*", "--state-dir", str(self.state), "--metrics-port", "0",
             "--held-bytes", str(HELD), "--connection-bytes", str(HELD // 4)],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.process.stdout is not None
        lines = [self.process.stdout.readline() for _ in range(2)]
        self.endpoint = next(line.split()[-1] for line in lines if "tcp://" in line)
        self.metrics = next(line.split()[-1] for line in lines if "http://" in line)
        self.worker = Worker(self.endpoint, "echo", lambda payload: payload, self.transport)
        self.thread = threading.Thread(target=self.worker.serve, daemon=True)
        self.thread.start()
        self.client = Client(self.endpoint, self.transport)
        self.client.request("echo", b"up", timeout=60)
        self.before = rss_kib(self.process.pid) * 1024
        self.attackers: list[RawClient] = []

    def raw(self) -> RawClient:
        peer = RawClient(self.context, self.endpoint, self.transport)
        self.attackers.append(peer)
        return peer

    def stop(self, kill: bool = False) -> None:
        for peer in self.attackers:
            peer.close()
        self.client.close()
        self.worker.stop()
        self.thread.join(10)
        if kill:
            self.process.send_signal(signal.SIGKILL)
        else:
            self.process.terminate()
        self.process.wait(30)
        assert self.process.stdout is not None
        self.process.stdout.close()

    def restart(self) -> None:
        self.stop(kill=True)
        self.start()

    def status(self) -> dict[str, Any]:
        return self.client.status(timeout=WAIT * 3)


def answers(peer: RawClient, count: int) -> list[bytes]:
    """The statuses of the next ``count`` answers ``peer`` gets (each within a minute)."""
    got = []
    for _ in range(count):
        assert peer.socket.poll(60_000), f"{len(got)} of {count} answers came"
        reply = protocol.parse_client_reply(peer.recv())
        if reply is not None and reply[1] is not None:
            got.append(reply[1])
    return got


class Sequences(RuleBasedStateMachine):
    """Rules that add up what peers make; invariants that the others are served and the budgets hold."""

    live: Live  # set per test (a fixture's broker: real IO, shared by the cases of one test)

    def __init__(self) -> None:
        super().__init__()
        self.made = 0  # names made so far (each rule's are new)
        self.worst = 0.0

    @rule(services=st.integers(1, 400))
    def many_services(self, services: int) -> None:
        peer = self.live.raw()
        for n in range(services):
            peer.send(protocol.gdp_request(b"s%d" % n, f"svc-{self.made}-{n}-{EMOJI * 40}".encode(), [b"x"]))
        self.made += 1

    @rule(names=st.integers(1, 30), tenants=st.integers(1, 40))
    def tenants_limits(self, names: int, tenants: int) -> None:
        peer = self.live.raw()
        for n in range(names):
            limits = {f"{k:04d}{EMOJI * 14}": {"weight": 2} for k in range(n * 40, n * 40 + tenants)}
            body = json.dumps({"tenants": limits}, ensure_ascii=False).encode()
            peer.send(protocol.gdp_request(b"f%d" % n, b"mmi.flow", [f"flow-{self.made % 3}".encode(), body]))
        self.made += 1
        assert set(answers(peer, names)) <= {protocol.OK, protocol.OVER_BUDGET, protocol.BAD_REQUEST}

    @rule(pages=st.integers(1, 40), limit=st.sampled_from([1, 100, 1000]))
    def status_pages_back_to_back(self, pages: int, limit: int) -> None:
        peer = self.live.raw()
        query = json.dumps({"limit": limit}).encode()
        for n in range(pages):
            peer.send(protocol.gdp_request(b"p%d" % n, b"mmi.status", [query]))
        assert set(answers(peer, pages)) <= {protocol.OK, protocol.OVER_BUDGET}

    @rule(requests=st.integers(1, 8))
    def budget_filled_then_an_honest_request(self, requests: int) -> None:
        peer = self.live.raw()
        for n in range(requests):  # up to a connection's budget (a quarter of held bytes) and beyond
            peer.send(protocol.gdp_request(b"b%d" % n, b"nobody", [bytes(HELD // 8)]))
        # the invariant's honest request comes next: the small-request rule lets it in

    @rule(pairs=st.integers(1, 2000))
    def one_off_tenants(self, pairs: int) -> None:
        peer = self.live.raw()
        for n in range(pairs):
            rid = b"t%d-%d" % (self.made, n)
            fields = protocol.request_fields(tenant=f"t-{self.made}-{n}")
            peer.send(protocol.gdp_request(rid, b"svc-%d" % (n % 50), [b"x"], fields))
            peer.send(protocol.gdp_cancel(rid))
        self.made += 1

    @rule()
    def restart_on_its_state_directory(self) -> None:
        self.live.restart()

    @invariant()
    def others_are_served_within_the_budgets(self) -> None:
        live = self.live
        start = time.monotonic()
        assert live.client.request("echo", b"honest", timeout=WAIT * 3).payload == b"honest"
        self.worst = max(self.worst, time.monotonic() - start)
        assert self.worst < WAIT, f"the honest echo waited {self.worst:.1f} s"
        report = live.status()
        assert report["broker"]["counters"].get("internal_errors", 0) == 0
        assert live.process.poll() is None
        grown = rss_kib(live.process.pid) * 1024 - live.before
        assert grown <= 1.5 * HELD + SLACK, f"the broker grew by {grown / MIB:.0f} MiB under a 16 MiB ledger"
        with urllib.request.urlopen(live.metrics, timeout=WAIT * 3) as page:
            assert b"generaldomo_" in page.read()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_sequences_of_valid_messages_leave_the_others_served(transport: str, tmp_path: Path) -> None:
    live = Live(transport, tmp_path)
    try:
        Sequences.live = live
        Sequences.TestCase.settings = fuzz_settings(2, steps=6, live=True)
        Sequences.TestCase().runTest()
    finally:
        live.stop()

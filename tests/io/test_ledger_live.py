"""Issue 20's attacks on what the broker holds, over real sockets against a ``generaldomo broker`` process:
its resident memory (from /proc) stays within 1.5 times its ledger's budget plus a constant, and an honest
echo client is served all along. Figures (RSS per budget, the honest client's worst stall) are bench.bombs's,
in bench/README.md; the bounds here are generous."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
import zmq
from raw_peers import Probe, RawClient, rss_kib, start_broker
from waiting import eventually

from generaldomo import Client
from generaldomo.sansio.broker.accounts.ledger import MARGIN
from generaldomo.sansio.broker.report import StatusReport
from generaldomo.sansio.wire import codec, protocol

MIB = 1024 * 1024
HELD = 64 * MIB  # the ledger's budgets for these brokers: small, so that the attacks reach them quickly
PER_CONNECTION = 16 * MIB
FLAGS = ("--held-bytes", str(HELD), "--connection-bytes", str(PER_CONNECTION))
SLACK = 48 * MIB  # what the allocator, libzmq's buffers and the interpreter may keep beyond the ledger's bytes


class Attacked:
    """A broker process with an echo worker and an honest client probing it; ``held()`` checks its memory."""

    def __init__(self, transport: str, workers: Callable[..., object], *flags: str) -> None:
        self.transport = transport
        self.process, self.endpoint = start_broker(transport, *FLAGS, *flags)
        self.context = zmq.Context()
        workers(self.endpoint, transport)
        with Client(self.endpoint, transport) as client:
            client.request("echo", b"up", timeout=60)
        self.before = rss_kib(self.process.pid) * 1024
        self.probe = Probe(self.endpoint, transport)
        self.probe.start()

    def raw(self) -> RawClient:
        return RawClient(self.context, self.endpoint, self.transport)

    def status(self) -> StatusReport:
        with Client(self.endpoint, self.transport) as client:
            return StatusReport.from_dict(client.status(timeout=60))

    def counted(self, name: str, at_least: int) -> None:
        """Wait until the broker's counter ``name`` reaches ``at_least``: it has seen the whole attack."""
        eventually(lambda: self.status().broker.counters.get(name, 0) >= at_least, 120, f"{name} >= {at_least}")

    def memory_within_budget(self) -> int:
        """Check the broker's resident memory now; return how much it grew."""
        grown = rss_kib(self.process.pid) * 1024 - self.before
        assert grown <= 1.5 * HELD + SLACK, (
            f"the broker grew by {grown / MIB:.0f} MiB under a {HELD / MIB:.0f} MiB ledger"
        )
        return grown

    def close(self) -> dict[str, object]:
        figures = self.probe.stop()
        self.context.destroy(linger=0)
        self.process.terminate()
        self.process.wait(30)
        return figures


@pytest.fixture
def attacked(workers: Callable[..., object]) -> Iterator[Callable[..., Attacked]]:
    made: list[Attacked] = []

    def make(transport: str, *flags: str) -> Attacked:
        made.append(Attacked(transport, workers, *flags))
        return made[-1]

    yield make
    for broker in made:
        figures = broker.close()
        assert figures["failures"] == 0 and figures["max"] < 30.0, repr(figures)


def test_requests_with_huge_ids_are_charged_their_ids(attacked: Callable[..., Attacked], transport: str) -> None:
    broker = attacked(transport)
    rid = b"i" * (4 * MIB)
    with broker.raw() as attacker:
        for n in range(60):
            attacker.send(protocol.gdp_request(rid[:-8] + b"%08d" % n, b"nobody", [b"x"]))
        broker.counted("requests", 61)
        report = broker.status()
        assert report.broker.queued <= PER_CONNECTION // (4 * MIB)  # the rest got 429 (or were malformed)
        assert report.broker.ledger.held_bytes <= HELD * (1 + MARGIN)
        broker.memory_within_budget()


def test_many_one_request_services_are_charged_their_cost(attacked: Callable[..., Attacked], transport: str) -> None:
    broker = attacked(transport)
    attackers = [broker.raw() for _ in range(20)]
    try:
        for c, attacker in enumerate(attackers):
            for n in range(2500):
                attacker.send(protocol.gdp_request(b"r%d-%d" % (c, n), b"s-%d-%d" % (c, n), [b"x"]))
        broker.counted("requests", 20 * 2500)
        report = broker.status()
        counters = report.broker.counters
        assert counters.get("refused_connection_services", 0) + counters.get("refused_total_bytes", 0) > 20 * 1000
        assert report.broker.ledger.held_bytes <= HELD * (1 + MARGIN) and report.broker.queued < 20 * 1000
        broker.memory_within_budget()
    finally:
        for attacker in attackers:
            attacker.close()


def handled(broker: Attacked) -> int:
    """Requests for the service nobody serves that the broker refused or holds."""
    report = broker.status().broker
    return report.counters.get("over_budget", 0) + report.queued


def test_mdp_requests_with_huge_hops_stay_charged_after_the_sender_left(attacked: Callable[..., Attacked]) -> None:
    broker = attacked("router")
    huge = b"h" * (8 * MIB)  # the finding's hops: beyond the bound of a hop (generaldomo.sansio.wire.limits), malformed
    with broker.raw() as attacker:
        for n in range(12):
            attacker.send([huge[:-4] + b"%04d" % n, b"", b"MDPC01", b"nobody", b"x"])
        broker.counted("malformed", 12)  # (before the socket closes: what it has not sent would be dropped)
    body = b"x" * MIB  # within the bounds: 15 hops of 255 bytes (the identity is the 16th), and a large body
    for round_ in range(1, 4):  # each connection holds at most its budget, after it left too
        with broker.raw() as attacker:
            for n in range(24):
                hops = [b"%03d" % n + b"h" * 252 for _ in range(15)]
                attacker.send([*hops, b"", b"MDPC01", b"nobody", body])
            sent = 24 * round_
            eventually(lambda sent=sent: handled(broker) >= sent, 120, "the requests")  # before the socket closes
    report = broker.status()
    assert report.broker.queued <= 3 * (PER_CONNECTION // MIB)
    assert report.broker.ledger.held_bytes <= HELD * (1 + MARGIN)
    assert report.broker.counters["over_budget"] == 72 - report.broker.queued, report.broker.counters
    broker.memory_within_budget()


def test_one_connection_claiming_workers_through_hops_gets_its_share(attacked: Callable[..., Attacked]) -> None:
    broker = attacked("router", "--liveness", "40")  # the claimed workers never heartbeat: let them stay a while
    with broker.raw() as claimer:
        for n in range(40_000):
            claimer.send([b"\xffclaimed-%06d" % n, *protocol.gdp_ready(b"fake-%d" % (n % 50))])
        broker.counted("workers_refused", 40_000 - 25_000)
        time.sleep(6.0)  # two heartbeat turns over the claimed workers, while the probe is served
        report = broker.status()
        assert report.broker.counters["workers_refused"] >= 40_000 - report.broker.settings.connection_workers
        top = report.broker.ledger.top[0]
        assert top.holdings["workers"] <= report.broker.settings.connection_workers and top.bytes <= PER_CONNECTION
        broker.memory_within_budget()


def test_a_client_that_does_not_read_is_held_by_bytes_not_by_messages(
    attacked: Callable[..., Attacked], transport: str
) -> None:
    broker = attacked(transport)
    answer = b"a" * (2 * MIB)
    with broker.raw() as attacker:  # gets a large answer kept for it, then stops reading and re-asks it
        attacker.send(protocol.gdp_request(b"big", b"echo", [answer]))
        assert protocol.parse_client_reply(attacker.recv())[3] == (answer,)
        attacker.socket.setsockopt(zmq.RCVHWM, 1)  # (for the connections libzmq makes from now on)
    sink = broker.context.socket(zmq.CLIENT if transport == "server" else zmq.DEALER)
    sink.setsockopt(zmq.RCVHWM, 1)
    sink.setsockopt(zmq.RCVBUF, 4096)
    sink.setsockopt(zmq.LINGER, 0)
    sink.connect(broker.endpoint)
    ask = protocol.gdp_client_heartbeat(None, [b"big"] * protocol.MAX_REASKED)
    send = (lambda f: sink.send(codec.encode(f))) if transport == "server" else sink.send_multipart
    try:
        for _ in range(400):  # 800 MiB of answers if each re-ask were answered
            send(ask)
        broker.counted("reasked", 400 * protocol.MAX_REASKED)
        counters = broker.status().broker.counters
        held_back = ("resends_refused", "sends_dropped_unread", "resends_paced")  # (paced: work per second)
        assert sum(counters.get(name, 0) for name in held_back) > 300, counters
        assert counters["answers_resent"] < 100
        assert 0 < broker.status().broker.ledger.by_kind["unsent"] <= PER_CONNECTION
        broker.memory_within_budget()
    finally:
        sink.close(linger=0)
    # once it has gone, libzmq lets go of what it held for it, and the ledger knows
    eventually(lambda: "unsent" not in broker.status().broker.ledger.by_kind, 30, "the unsent bytes released")

"""What one peer may cost over time, over real sockets against a ``generaldomo broker`` process, both transports:
requests nobody will ever ask about again (every MDP request) do not hold the queue budget for good, and one
worker's 429 does not pause its whole service. Each test reproduces a finding (it failed on the code before)."""

from __future__ import annotations

import zmq
from raw_peers import RawClient, start_broker
from waiting import eventually

from generaldomo import Client, Reject
from generaldomo.sansio.broker.report import StatusReport
from generaldomo.sansio.wire import protocol

MIB = 1024 * 1024


def status(endpoint: str, transport: str) -> StatusReport:
    with Client(endpoint, transport) as client:
        return StatusReport.from_dict(client.status(timeout=60))


def abandon_mdp_requests(endpoint: str, transport: str) -> None:
    """Two connections send MDP/0.1 requests (2 x 31 MiB each, then top-ups from 1 MiB down to a byte, to fill
    the queue budget to the byte) for services nobody serves, wait until the broker has them all, and leave."""
    sizes = (31 * MIB, 31 * MIB, *(MIB >> i for i in range(21)))
    context = zmq.Context()
    try:
        attackers = [RawClient(context, endpoint, transport) for _ in range(2)]
        for k, size in enumerate(sizes):
            for n, attacker in enumerate(attackers):
                attacker.send(protocol.mdp_client_request(b"nobody-%d-%d" % (n, k), [b"x" * size]))

        def handled() -> int:  # held or refused
            report = status(endpoint, transport).broker
            return report.queued + report.counters.get("over_budget", 0)

        eventually(lambda: handled() >= 2 * len(sizes), 120, "the requests")
        for attacker in attackers:
            attacker.close()
    finally:
        context.destroy(linger=0)


def test_abandoned_mdp_requests_do_not_lock_out_every_client(transport: str, workers) -> None:  # type: ignore[no-untyped-def]
    process, endpoint = start_broker(transport)  # the defaults: queue_bytes 64 MiB
    try:
        workers(endpoint, transport)
        with Client(endpoint, transport) as client:
            assert client.request("echo", b"up", timeout=60).frames == (b"up",)
            abandon_mdp_requests(endpoint, transport)
            report = status(endpoint, transport).broker
            assert report.queued_bytes >= 31 * MIB  # they hold what they may
            for n in range(20):  # an honest client is served all the same (it got 429 for every one)
                assert client.request("echo", b"%d" % n, timeout=60).frames == (b"%d" % n,)
    finally:
        process.terminate()
        process.wait(30)


def test_abandoned_mdp_requests_are_answered_504_after_the_anonymous_queue_timeout(transport: str) -> None:
    process, endpoint = start_broker(transport, "--heartbeat", "0.5", "--anonymous-queue-timeout", "2")
    try:
        abandon_mdp_requests(endpoint, transport)
        eventually(lambda: status(endpoint, transport).broker.queued_bytes == 0, 120, "the queue freed")
        counters = status(endpoint, transport).broker.counters
        assert counters.get("expired", 0) >= 2, counters
    finally:
        process.terminate()
        process.wait(30)


def test_one_worker_saying_429_does_not_pause_its_whole_service(transport: str, workers) -> None:  # type: ignore[no-untyped-def]
    """A worker that answers every task 429 with retry_after=300 held every dispatch of its service for 300 s
    (four honest workers idle, most requests timed out at 5 s): now it holds back itself alone."""

    def pausing(payload: bytes) -> bytes:
        raise Reject(429, "hold the whole service", retry_after=300)

    process, endpoint = start_broker(transport)
    try:
        workers(endpoint, transport, "echo", pausing)  # registered first: it waits longest, gets the first task
        eventually(lambda: status(endpoint, transport).broker.worker_count == 1, 60, "the pausing worker")
        for _ in range(4):
            workers(endpoint, transport)
        eventually(lambda: status(endpoint, transport).broker.worker_count == 5, 60, "the honest workers")
        with Client(endpoint, transport) as client:
            for n in range(10):
                assert client.request("echo", b"%d" % n, timeout=30).frames == (b"%d" % n,)
        report = status(endpoint, transport)
        (service,) = [s for s in report.services if s.name == "echo"]
        assert service.throttled >= 1 and service.flow.backoff is not None
        assert service.flow.backoff.rate is None  # one worker of five: the rate did not fall
    finally:
        process.terminate()
        process.wait(30)

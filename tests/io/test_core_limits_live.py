"""The core's limits over real sockets (issue 10): a flood is told 429 and memory stays bounded; requests and
services that short-lived clients leave behind are dropped and forgotten. Raw GDP frames, both transports."""

from __future__ import annotations

import time

import zmq
from raw_peers import RawClient, rss_kib, start_broker
from waiting import eventually
from worker_commands import parse_worker_command

from generaldomo.sansio.broker.accounts.ledger import request_charge
from generaldomo.sansio.broker.report import StatusReport
from generaldomo.sansio.config.settings import Settings
from generaldomo.sansio.wire import protocol

FLOOD = 200_000
KIB = b"x" * 1024


def flood(client: RawClient, count: int, deadline: float) -> dict[bytes, int]:
    """Send ``count`` 1 KiB requests for a service nobody serves, reading replies as they come; return the
    statuses of the replies received once every request is sent and the replies have stopped."""
    statuses: dict[bytes, int] = {}
    poller = zmq.Poller()
    poller.register(client.socket, zmq.POLLIN | zmq.POLLOUT)
    sent = 0
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        events = dict(poller.poll(100))
        if events.get(client.socket, 0) & zmq.POLLIN:
            while client.socket.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                status = protocol.parse_client_reply(client.recv())[1]
                statuses[status] = statuses.get(status, 0) + 1
            quiet_since = time.monotonic()
        if sent < count and events.get(client.socket, 0) & zmq.POLLOUT:
            for _ in range(256):
                if sent == count:
                    break
                client.send(protocol.gdp_request(b"%016d" % sent, b"nobody", [KIB]))
                sent += 1
            quiet_since = time.monotonic()
        if sent == count and time.monotonic() - quiet_since > 2.0:
            break
    return statuses


def test_a_flood_is_told_429_and_the_broker_stays_small(transport: str) -> None:
    broker, endpoint = start_broker(transport)
    context = zmq.Context()
    client = RawClient(context, endpoint, transport)
    try:
        before = rss_kib(broker.pid)
        statuses = flood(client, FLOOD, time.monotonic() + 240)
        after = rss_kib(broker.pid)
        settings = Settings()
        assert settings.service_queue_bytes is not None and settings.connection_requests is not None
        charge = request_charge(len(KIB) + len(b"nobody"), 1, b"%016d" % 0, bytes(5 if transport == "router" else 0))
        held = min(settings.service_queue_bytes // charge, settings.connection_requests)
        # The rest wait in the queue. A reply the ROUTER drops because this reader fell behind is not kept (a
        # refusal runs nothing): the client's re-ask would learn the id is unknown and send it again.
        assert set(statuses) == {protocol.OVER_BUDGET} and statuses[protocol.OVER_BUDGET] > 0.9 * (FLOOD - held)
        assert after - before < 300 * 1024, f"the broker grew from {before} to {after} KiB"
        client.send(protocol.gdp_request(b"status", b"mmi.status", []))  # and it still answers
        report = StatusReport.from_json(protocol.parse_client_reply(client.recv())[3][0])
        assert report.broker.counters["over_budget"] == FLOOD - held and report.broker.queued == held
    finally:
        client.close()
        context.term()
        broker.terminate()
        broker.wait(10)


def test_short_lived_clients_leave_nothing_behind(transport: str, brokers) -> None:
    settings = Settings(heartbeat_interval=0.1, client_expiry=0.5, service_idle=0.5)
    broker = brokers(transport, ["tcp://127.0.0.1:*"], settings=settings)
    endpoint = broker.endpoint(transport, "tcp")
    context = zmq.Context()
    try:
        for n in range(2000):
            client = RawClient(context, endpoint, transport)
            client.send(protocol.gdp_request(b"r%d" % n, b"unique-%d" % n, [b"x"]))
            client.send(protocol.gdp_client_heartbeat())
            client.recv()  # the broker has the request once it answers the heartbeat
            client.close()
        eventually(lambda: broker.core.counters["client_gone_dropped"] == 2000, 60, "the requests to be dropped")
        forgotten = broker.core.counters
        eventually(lambda: forgotten["services_forgotten"] == 2000, 60, "the services to be forgotten")
        with RawClient(context, endpoint, transport) as client:  # the report shows none of them
            client.send(protocol.gdp_request(b"status", b"mmi.status", []))
            report = StatusReport.from_json(protocol.parse_client_reply(client.recv())[3][0])
        assert not report.services and report.broker.queued == 0 and report.broker.queued_bytes == 0
    finally:
        context.term()


def test_one_connection_claiming_many_workers_gets_its_share(brokers) -> None:
    # Envelope frames let one DEALER speak for many peers (as a proxy does): each READY below claims a worker
    # of its own. The broker keeps the connection's share of max_workers, tells the rest to DISCONNECT, and
    # still registers the workers of other connections, up to max_workers.
    settings = Settings(max_workers=50, heartbeat_interval=30.0)
    share = settings.connection_workers
    assert share == 12
    broker = brokers("router", ["tcp://127.0.0.1:*"], settings=settings)
    endpoint = broker.endpoint("router", "tcp")
    context = zmq.Context()
    try:
        with RawClient(context, endpoint, "router") as claimer:
            for n in range(200):
                claimer.send([b"\xffhop-%04d" % n, *protocol.gdp_ready(b"svc-%d" % (n % 7))])
            told = [claimer.recv() for _ in range(200 - share)]
            assert all(frames[0].startswith(b"\xffhop-") for frames in told)  # back through the claimed hops
            assert {parse_worker_command(frames[1:])[0] for frames in told} == {protocol.DISCONNECT}
            eventually(lambda: broker.core.counters["workers_refused"] == 200 - share, 30, "the refusals counted")
            assert len(broker.core.workers) == share
            others = [RawClient(context, endpoint, "router") for _ in range(45)]
            for other in others:
                other.send(protocol.gdp_ready(b"svc-0"))
            refused = 45 - (50 - share)  # told to go once the table is full
            eventually(lambda: len(broker.core.workers) == 50, 30, "the other connections' workers to register")
            eventually(lambda: broker.core.counters["workers_refused"] == 200 - share + refused, 30, "the refusals")
            for other in others:
                other.close()
            with RawClient(context, endpoint, "router") as client:
                client.send(protocol.gdp_request(b"status", b"mmi.status", []))
                report = StatusReport.from_json(protocol.parse_client_reply(client.recv())[3][0])
            assert report.broker.counters["workers_refused"] == 200 - share + refused
            assert report.broker.settings.max_workers == 50 and report.broker.settings.connection_workers == share
            assert report.broker.counters["refused_connection_workers"] == 200 - share
    finally:
        context.term()

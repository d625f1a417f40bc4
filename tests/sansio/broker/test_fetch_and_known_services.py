"""Detached requests, fetching an answer by its id, and failing fast for a service nobody serves: the flags field,
the broker core's rules and the client session's fetch, case by case (sans IO), then the CLI end to end."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import zmq
import zmq.auth
from cli_processes import run, spawn
from core_harness import Harness, client, worker

from generaldomo import Broker, Client, NotFound
from generaldomo.io import keys
from generaldomo.io.auth import BrokerSecurity
from generaldomo.sansio.broker.served import MAX_NAMES, ServedRecently
from generaldomo.sansio.config.settings import PeerSettings
from generaldomo.sansio.peer.session import ClientSession, Resolve, ToBroker
from generaldomo.sansio.wire import protocol
from generaldomo.sansio.wire.events import Dialect

KNOWN, DETACHED = protocol.FLAG_KNOWN_SERVICE, protocol.FLAG_DETACHED


def flagged(h: Harness, peer, rid: bytes, service: bytes, flags: int) -> None:
    h.feed(peer, protocol.gdp_request(rid, service, [rid], protocol.request_fields(flags=flags)))


def heartbeat(*ids: bytes) -> list[bytes]:
    return protocol.gdp_client_heartbeat(ids=list(ids))


# ------------------------------------------------------------------------------------------------ the field


def test_the_flags_field_round_trips_and_unknown_bits_are_ignored() -> None:
    frame = protocol.request_fields(2.0, "t", 1, KNOWN | DETACHED)
    assert protocol.parse_fields(frame)[:5] == (2.0, "t", 1, KNOWN | DETACHED, None)
    assert protocol.parse_fields(bytes((protocol.FIELD_FLAGS, 1, 0xFF)))[:5] == (None, None, 0, protocol.FLAGS, None)
    assert protocol.parse_fields(bytes((protocol.FIELD_FLAGS, 2, 1, 1))) == "a flags field has 1 byte"
    with pytest.raises(ValueError, match="unknown request flags"):
        protocol.request_fields(flags=0x80)
    assert protocol.request_fields() == b""  # nothing set: a plain REQUEST


# ------------------------------------------------------------------------------------------------ the core


def test_a_known_service_request_fails_fast_only_for_a_service_nobody_served() -> None:
    h = Harness(heartbeat_interval=1.0, liveness=2, served_memory=30.0)  # grace: 2 x 2 s
    h.ready(worker(1), b"echo")
    flagged(h, client(0), b"early", b"ehco", KNOWN)
    assert h.replies_of(client(0)) == [] and len(h.core.tasks) == 1  # within the grace after start: queued
    h.feed(client(0), protocol.gdp_cancel(b"early"))
    for _ in range(4):  # past the grace, the worker alive
        h.advance(1.0)
        h.feed(worker(1), protocol.worker_command(Dialect.GDP, protocol.HEARTBEAT))
    flagged(h, client(0), b"typo", b"ehco", KNOWN)
    ((rid, status, (text,)),) = h.replies_of(client(0))
    assert (rid, status) == (b"typo", protocol.NOT_FOUND)
    assert b"no worker serves 'ehco'" in text and b"'echo'" in text and b"did you mean 'echo'?" in text
    flagged(h, client(0), b"plain", b"ehco", 0)  # without the flag it waits, as before
    assert len(h.replies_of(client(0))) == 1 and h.core.counters["unknown_service"] == 1
    flagged(h, client(0), b"served", b"echo", KNOWN)
    assert h.tasks_of(worker(1))[0][2] == (b"served",)


def test_a_request_that_asked_to_fail_fast_within_the_grace_is_answered_when_it_ends() -> None:
    h = Harness(heartbeat_interval=1.0, liveness=2, served_memory=30.0)  # grace: 2 x 2 s
    h.ready(worker(1), b"echo")
    flagged(h, client(0), b"early", b"ehco", KNOWN)  # within the grace: it may be a restart's worker to come
    flagged(h, client(0), b"later", b"late", KNOWN)
    flagged(h, client(0), b"patient", b"ehco", 0)
    h.advance(1.0)
    h.feed(worker(1), protocol.worker_command(Dialect.GDP, protocol.HEARTBEAT))
    h.ready(worker(2), b"late")  # came within the grace: served
    assert h.replies_of(client(0)) == [] and h.tasks_of(worker(2))[0][2] == (b"later",)
    for _ in range(4):  # past the grace
        h.advance(1.0)
        h.feed(worker(1), protocol.worker_command(Dialect.GDP, protocol.HEARTBEAT))
    ((rid, status, (text,)),) = h.replies_of(client(0))
    assert (rid, status) == (b"early", protocol.NOT_FOUND) and b"did you mean 'echo'?" in text
    assert [t.request_id for t in h.core.tasks.values()] == [b"later", b"patient"]  # the others wait
    assert h.core.counters["unknown_service"] == 1


def test_a_service_whose_workers_left_is_known_for_served_memory() -> None:
    h = Harness(heartbeat_interval=1.0, liveness=2, served_memory=30.0)
    h.advance(5.0)
    h.ready(worker(1), b"gone")
    h.feed(worker(1), protocol.worker_command(Dialect.GDP, protocol.DISCONNECT))
    h.advance(20.0)
    flagged(h, client(0), b"soon", b"gone", KNOWN)
    assert h.replies_of(client(0)) == []  # queued: it had a worker 20 s ago
    h.feed(client(0), protocol.gdp_cancel(b"soon"))
    h.advance(11.0)
    flagged(h, client(0), b"late", b"gone", KNOWN)
    assert [status for _, status, _ in h.replies_of(client(0))] == [protocol.NOT_FOUND]


def test_the_served_record_is_bounded() -> None:
    served = ServedRecently(60.0)
    for n in range(MAX_NAMES + 10):
        served.seen(f"s{n}", 1.0)
    assert len(served) == MAX_NAMES and not served.recent("s0", 1.0) and served.recent(f"s{MAX_NAMES + 9}", 1.0)
    assert not served.recent("s20", 100.0)  # older than its memory


def test_a_detached_request_outlives_its_silent_client_and_is_fetched_by_its_id() -> None:
    h = Harness(heartbeat_interval=1.0, client_expiry=3.0)
    flagged(h, client(0), b"kept", b"echo", DETACHED)
    flagged(h, client(0), b"dropped", b"echo", 0)
    h.advance(10.0)  # client 0 went silent
    assert [t.request_id for t in h.core.tasks.values()] == [b"kept"]
    h.feed(client(1), heartbeat(b"kept"))  # another connection fetches it while it is queued
    assert protocol.parse_client_reply(h.inbox[client(1)][-1]) is None  # known: no kept answer yet
    h.ready(worker(1))
    task_id = h.tasks_of(worker(1))[0][0]
    h.answer(worker(1), task_id, b"done")
    assert h.replies_of(client(1)) == [(b"kept", protocol.OK, (b"done",))] and h.replies_of(client(0)) == []
    h.feed(client(2), heartbeat(b"kept", b"never"))  # later: the kept answer; an unknown id is listed
    assert h.replies_of(client(2)) == [(b"kept", protocol.OK, (b"done",))]
    assert h.inbox[client(2)][-1] == protocol.gdp_client_heartbeat(b"test", [b"never"])


# ------------------------------------------------------------------------------------------------ the session


def test_a_fetch_asks_at_once_and_resolves_404_for_an_unknown_id() -> None:
    session: ClientSession[str] = ClientSession(PeerSettings(1.0, 3), 0.0)
    assert session.fetch(b"r1", "caller", 0.0) == heartbeat(b"r1")
    (resolved,) = session.receive(protocol.gdp_client_heartbeat(b"b1", [b"r1"]), 0.1)
    assert isinstance(resolved, Resolve) and resolved.status == protocol.NOT_FOUND and not session.outstanding


def test_a_fetch_gets_the_answer_asks_again_after_a_restart_and_cancels_nothing() -> None:
    session: ClientSession[str] = ClientSession(PeerSettings(1.0, 3), 0.0)
    session.fetch(b"r1", "caller", 0.0)
    assert session.receive(protocol.gdp_client_heartbeat(b"b1", []), 0.1) == []  # live: its answer will come
    again = session.receive(protocol.gdp_client_heartbeat(b"b2", []), 0.2)  # a new broker: ask, never resend
    assert [list(a.frames) for a in again if isinstance(a, ToBroker)] == [heartbeat(b"r1")]
    final = [protocol.GDP_CLIENT, b"\x03", b"r1", protocol.OK, b"", b"answer"]
    (resolved,) = session.receive(final, 0.3)
    assert isinstance(resolved, Resolve) and resolved.body == (b"answer",)
    session.fetch(b"r2", "caller", 0.4)
    assert session.cancel(b"r2") == [] and not session.outstanding  # a fetch withdraws nothing


# ------------------------------------------------------------------------------------------------ end to end

HEARTBEAT = ["--heartbeat", "0.1", "--liveness", "3"]  # the broker's grace before it says 404: 0.6 s


def test_the_cli_fails_fast_sends_detached_and_fetches(transport: str, processes) -> None:
    """A misspelled service: exit 1 at once with the broker's 404 and the nearest name. ``--no-wait``: the id,
    and the request outlives its client (past --client-expiry) until a worker comes; ``--fetch ID`` waits for
    its answer, gets the kept one again, and says 404 for an id the broker does not know."""
    broker = spawn(processes, "broker", "--transport", transport, "--bind", "tcp://127.0.0.1:*", *HEARTBEAT,
                   "--client-expiry", "1")  # fmt: skip
    endpoint = broker.stdout.readline().split()[-1]
    at = ["--transport", transport, "--connect", endpoint, *HEARTBEAT]
    spawn(processes, "worker", *at)
    assert run("client", *at, "--wait-for-service", "--timeout", "60", "echo", "up").stdout == "up\n"  # started
    started = time.monotonic()
    typo = run("client", *at, "--timeout", "60", "ehco", "x")
    assert time.monotonic() - started < 30  # a generous bound (the process's start included); the timeout is 60 s
    assert typo.returncode == 1 and "404: no worker serves 'ehco'" in typo.stderr, typo.stderr
    assert "did you mean 'echo'?" in typo.stderr
    waited = run("client", *at, "--wait-for-service", "--timeout", "1", "ehco", "x")
    assert waited.returncode == 1 and "no worker serves 'ehco'" in waited.stderr  # after waiting, as before

    sent = run("client", *at, "--no-wait", "--wait-for-service", "later", "job")
    assert sent.returncode == 0, sent.stderr
    request_id = sent.stdout.strip()
    assert len(bytes.fromhex(request_id)) == 16
    time.sleep(2.0)  # the sender is gone for longer than --client-expiry
    pending = run("client", *at, "--fetch", request_id, "--timeout", "1")
    assert pending.returncode == 4 and "still queued or running" in pending.stderr, pending.stderr
    spawn(processes, "worker", *at, "--service", "later", "--tag", "w")
    fetched = run("client", *at, "--fetch", request_id, "--timeout", "60")
    assert (fetched.returncode, fetched.stdout) == (0, "w:job\n"), fetched.stderr
    again = run("client", *at, "--fetch", request_id, "--timeout", "60")
    assert again.stdout == "w:job\n"  # the kept answer
    unknown = run("client", *at, "--fetch", "00" * 16, "--timeout", "60")
    assert unknown.returncode == 1 and "no request with this id" in unknown.stderr


def test_under_curve_only_the_same_key_fetches_an_answer(curve_broker, workers) -> None:
    endpoint, server_key, (mine, other) = curve_broker
    with Client(endpoint, server_key=server_key, keys=mine, heartbeat_interval=0.1) as sender:
        future = sender.submit("echo", b"secret", detached=True)
        assert future.result(60).payload == b"secret"
    with Client(endpoint, server_key=server_key, keys=other, heartbeat_interval=0.1) as stranger:
        with pytest.raises(NotFound):
            stranger.fetch(future.request_id, timeout=60)
    with Client(endpoint, server_key=server_key, keys=mine, heartbeat_interval=0.1) as again:
        assert again.fetch(future.request_id, timeout=60).payload == b"secret"


@pytest.fixture
def curve_broker(tmp_path: Path, workers):
    """A CURVE broker admitting two client keys, with an echo worker; yields (endpoint, its key, both keys)."""
    _, broker_secret = zmq.auth.create_certificates(tmp_path, "broker")
    (tmp_path / "clients").mkdir()
    (tmp_path / "workers").mkdir()
    for name in ("one", "two"):
        zmq.auth.create_certificates(tmp_path / "clients", name)
    zmq.auth.create_certificates(tmp_path / "workers", "worker")
    security = BrokerSecurity.from_files(broker_secret, clients=tmp_path / "clients", workers=tmp_path / "workers")
    broker = Broker("router", ["tcp://127.0.0.1:*"], security=security).start()
    try:
        endpoint = broker.endpoints[0][1]
        worker_keys = keys.load_secret(tmp_path / "workers" / "worker.key_secret")
        workers(endpoint, "router", server_key=security.public_key, keys=worker_keys)
        both = [keys.load_secret(tmp_path / "clients" / f"{name}.key_secret") for name in ("one", "two")]
        yield endpoint, security.public_key, both
    finally:
        broker.stop()

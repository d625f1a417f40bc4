"""The core against peers that lie: forged results, hijacked request ids, keys without the role (issue 16)."""

from __future__ import annotations

import logging

import pytest
from core_harness import Harness, client, worker

from generaldomo.sansio.broker.access import Credential, Role
from generaldomo.sansio.broker.core import Peer
from generaldomo.sansio.wire import protocol
from generaldomo.sansio.wire.events import Dialect

CLIENT = Credential("client-key", frozenset({Role.CLIENT}))
OTHER_CLIENT = Credential("other-client-key", frozenset({Role.CLIENT}))
WORKER = Credential("worker-key", frozenset({Role.WORKER}))
FFT_WORKER = Credential("fft-worker-key", frozenset({Role.WORKER}), ("fft*",))
ADMIN = Credential("admin-key", frozenset({Role.ADMIN}))


def test_task_ids_are_random_16_bytes() -> None:
    h = Harness()
    for n in range(50):
        h.request(client(0), b"r%d" % n)
    ids = list(h.core.tasks)
    assert all(len(task_id) == 16 for task_id in ids) and len(set(ids)) == 50
    assert not any(task_id.startswith(h.core.instance) for task_id in ids)


def test_forged_results_never_complete_fail_or_reorder_a_task() -> None:
    h = Harness()
    h.request(client(0), b"running", body=b"one")
    h.request(client(0), b"queued", body=b"two")
    h.ready(worker(1))
    h.ready(worker(2), b"other")  # a registered worker of another service
    [(running_id, _, _)] = h.tasks_of(worker(1))
    ids = list(h.core.tasks)
    forger, stranger = worker(2), Peer(1, b"never-registered")
    for peer in (forger, stranger):
        for task_id in ids:
            h.feed(peer, protocol.gdp_partial(task_id, [b"forged"]))
            h.feed(peer, protocol.gdp_ready(b"other", (task_id, protocol.OK, [b"forged"])))
            h.feed(peer, [b"MDPW02", b"\x04", task_id, b"", b"forged"])
    assert not h.replies_of(client(0))
    assert h.core.counters["results_refused"] == 3 * 2 * len(ids)
    assert [t.request_id for t in h.core.tasks.values()] == [b"running", b"queued"]
    assert h.core.tasks[running_id].worker is h.core.workers[worker(1)]
    h.answer(worker(1), running_id, b"ONE")
    second = h.tasks_of(worker(1))[1][0]
    h.answer(worker(1), second, b"TWO")
    assert h.replies_of(client(0)) == [(b"running", b"200", (b"ONE",)), (b"queued", b"200", (b"TWO",))]


def test_without_credentials_a_retry_matches_by_id_alone() -> None:
    h = Harness()
    h.request(client(1), b"shared")
    h.request(client(2), b"shared")  # the documented residual risk without CURVE: ids travel in clear
    assert len(h.core.tasks) == 1 and h.core.counters["retries_absorbed"] == 1


def test_with_credentials_request_ids_are_scoped_to_the_key() -> None:
    h = Harness()
    victim, thief = client(1), client(2)
    h.core.receive(victim, protocol.gdp_request(b"rid", b"echo", [b"mine"]), h.now, CLIENT)
    for to, out in h.core.receive(thief, protocol.gdp_request(b"rid", b"echo", [b"theirs"]), h.now, OTHER_CLIENT):
        h.inbox[to].append(out)
    assert len(h.core.tasks) == 2  # not a retry: another key's id
    for to, out in h.core.receive(thief, [protocol.GDP_CLIENT, b"\x05", b"rid"], h.now, OTHER_CLIENT):
        h.inbox[to].append(out)
    reask = h.core.receive(thief, [protocol.GDP_CLIENT, b"\x04", b"rid"], h.now, OTHER_CLIENT)
    assert reask[-1].frames == [protocol.GDP_CLIENT, b"\x04", b"test", b"rid"]  # the thief's own was cancelled
    h.ready(worker(1))
    for task_id, _, body in h.tasks_of(worker(1)):
        h.answer(worker(1), task_id, body[0])
    assert h.replies_of(victim) == [(b"rid", b"200", (b"mine",))]
    assert h.replies_of(thief) == []


def feed(h: Harness, peer: Peer, frames: list[bytes], credential: Credential) -> None:
    for to, out in h.core.receive(peer, frames, h.now, credential):
        h.inbox[to].append(out)


def test_a_client_key_cannot_register_as_a_worker_nor_a_worker_key_submit() -> None:
    h = Harness()
    feed(h, worker(1), protocol.gdp_ready(b"echo"), CLIENT)
    assert worker(1) not in h.core.workers
    assert h.inbox[worker(1)] == [protocol.worker_command(Dialect.GDP, protocol.DISCONNECT)]
    feed(h, client(0), protocol.gdp_request(b"r", b"echo", [b"x"]), WORKER)
    feed(h, client(0), protocol.gdp_request(b"s", b"mmi.status", []), WORKER)
    assert [(rid, status) for rid, status, _ in h.replies_of(client(0))] == [(b"r", b"403"), (b"s", b"403")]
    assert not h.core.tasks and h.core.counters["forbidden"] == 3


def test_a_worker_key_serves_only_the_services_its_patterns_allow() -> None:
    h = Harness()
    feed(h, worker(1), protocol.gdp_ready(b"fft-gpu"), FFT_WORKER)
    feed(h, worker(2), protocol.gdp_ready(b"echo"), FFT_WORKER)
    assert worker(1) in h.core.workers and worker(2) not in h.core.workers
    assert h.inbox[worker(2)] == [protocol.worker_command(Dialect.GDP, protocol.DISCONNECT)]
    feed(h, worker(3), protocol.gdp_ready(b"echo"), WORKER)  # no patterns: any service
    assert worker(3) in h.core.workers


@pytest.mark.parametrize(
    ("credential", "status"), [(CLIENT, b"403"), (WORKER, b"403"), (ADMIN, b"200"), (None, b"200")]
)
def test_only_admins_change_flow_limits(credential: Credential | None, status: bytes) -> None:
    h = Harness()
    h.core.receive(client(0), protocol.gdp_request(b"read", b"mmi.flow", [b"echo"]), h.now, credential)
    out = h.core.receive(
        client(0), protocol.gdp_request(b"set", b"mmi.flow", [b"echo", b'{"rate": 5}']), h.now, credential
    )
    [(_, got, _, _)] = [protocol.parse_client_reply(m.frames) for m in out]
    assert got == status
    assert (h.core.flow_limits("echo").rate == 5) is (status == b"200")


def test_reading_flow_limits_needs_the_client_role() -> None:
    h = Harness()
    out = h.core.receive(client(0), protocol.gdp_request(b"read", b"mmi.flow", [b"echo"]), h.now, CLIENT)
    assert protocol.parse_client_reply(out[0].frames)[1] == b"200"


def test_routing_ids_appear_in_neither_the_report_nor_the_logs(caplog: pytest.LogCaptureFixture) -> None:
    h = Harness()
    identity = b"\x00\x6b\x8b\x45\x67"
    peer, other = Peer(0, identity), Peer(0, identity + b"x")
    with caplog.at_level(logging.INFO, logger="generaldomo"):
        h.feed(peer, protocol.gdp_ready(b"echo"))
        report = h.core.report(h.now)
        h.feed(peer, protocol.worker_command(Dialect.GDP, protocol.DISCONNECT))
        h.feed(other, [b"garbage"])
        h.feed(other, protocol.gdp_ready(b"mmi.nope"))
        h.feed(other, protocol.gdp_partial(b"t" * 16, []))
    [listed] = report.workers
    assert identity.hex() not in report.to_json() and identity.hex() not in caplog.text
    assert listed.peer.startswith("0/") and listed.peer in caplog.text  # the label names it instead
    assert len(caplog.records) == 4

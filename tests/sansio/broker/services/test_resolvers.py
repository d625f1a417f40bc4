"""The built-in resolvers (attributes, balanced), loading by name, and the name resolver as Majordomo."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import deque

import pytest
from core_harness import Harness, client, worker
from hypothesis import given
from hypothesis import strategies as st

from generaldomo import Client
from generaldomo.sansio.broker.services.resolver import load_resolver
from generaldomo.sansio.broker.services.resolvers.attributes import AttributeResolver
from generaldomo.sansio.broker.services.resolvers.balanced import BalancedResolver
from generaldomo.sansio.broker.services.resolvers.descriptions import parse, satisfies
from generaldomo.sansio.wire import protocol

GPUS = ["a100", "v100", "t4"]


def sdo(**attributes: object) -> bytes:
    return json.dumps({"service": "fft", **attributes}).encode()


def harness(resolver) -> Harness:
    h = Harness()
    h.core.resolver = resolver
    return h


def dispatched_pairs(h: Harness, peers: list) -> list[tuple[bytes, bytes]]:
    """(worker description, request description) of every task handed out."""
    pairs = []
    for peer in peers:
        for task_id, description, _ in h.tasks_of(peer):
            pairs.append((h.core.workers[peer].description, description))
            h.answer(peer, task_id, b"done", h.core.workers[peer].description)
    return pairs


@given(
    st.lists(st.sampled_from(GPUS), min_size=1, max_size=6),
    st.lists(st.one_of(st.none(), st.sampled_from(GPUS), st.lists(st.sampled_from(GPUS), min_size=1)), max_size=12),
)
def test_attributes_never_routes_to_an_unsatisfying_worker(offers: list[str], demands: list) -> None:
    h = harness(AttributeResolver(prefer="gpu:a100,v100,t4"))
    peers = [worker(n) for n in range(len(offers))]
    for n, demand in enumerate(demands):
        h.request(client(0), b"r%d" % n, sdo() if demand is None else sdo(gpu=demand))
    for peer, gpu in zip(peers, offers, strict=True):
        h.ready(peer, sdo(gpu=gpu))
    for _ in range(len(demands) + 1):
        for offer, demand in dispatched_pairs(h, peers):
            assert satisfies(parse(offer)[1], parse(demand)[1])
    servable = [d for d in demands if d is None or set([d] if isinstance(d, str) else d) & set(offers)]
    assert len(h.replies_of(client(0))) == len(servable)  # everything that can be served is served


def test_priority_bias_prefers_the_better_gpu() -> None:
    h = harness(AttributeResolver(prefer="gpu:a100,v100,t4"))
    h.ready(worker(1), sdo(gpu="t4"))
    h.ready(worker(2), sdo(gpu="a100"))
    h.request(client(0), b"any", sdo())
    assert h.tasks_of(worker(2)) and not h.tasks_of(worker(1))
    h.request(client(0), b"needs-a100", sdo(gpu="a100"))
    assert not h.tasks_of(worker(1))  # the t4 worker never gets an a100 request, even when idle
    h.ready(worker(3), sdo(gpu="t4", priority=5))
    h.request(client(0), b"any2", sdo())
    assert h.tasks_of(worker(3))  # an explicit priority outranks the preference order


def test_mmi_service_with_attributes_checks_satisfiability() -> None:
    h = harness(AttributeResolver())
    h.ready(worker(1), sdo(gpu="t4"))
    for rid, demand in ((b"1", sdo(gpu="t4")), (b"2", sdo(gpu="a100")), (b"3", b"not json")):
        h.feed(client(0), protocol.gdp_request(rid, b"mmi.service", [demand]))
    assert [(r[1], r[2]) for r in h.replies_of(client(0))] == [
        (b"200", (b"200",)),
        (b"200", (b"404",)),
        (b"400", (b"description is not JSON: Expecting value: line 1 column 1 (char 0)",)),
    ]


def test_bad_json_description_is_a_400() -> None:
    h = harness(AttributeResolver())
    h.request(client(0), b"r", b"{not json")
    h.request(client(0), b"s", b'{"gpu": "a100"}')
    assert [r[1] for r in h.replies_of(client(0))] == [b"400", b"400"]
    h.ready(worker(1), b"[]")
    assert worker(1) not in h.core.workers


def test_balanced_spreads_work_across_hosts() -> None:
    h = harness(BalancedResolver())
    peers = [worker(n) for n in range(6)]
    for n, peer in enumerate(peers):  # host a's workers all register first
        h.ready(peer, sdo(host="a" if n < 3 else "b"))
    for n in range(4):
        h.request(client(0), b"r%d" % n, sdo())
    busy_hosts = [parse(h.core.workers[p].description)[1]["host"] for p in peers if h.tasks_of(p)]
    assert sorted(busy_hosts) == ["a", "a", "b", "b"]


class Majordomo:
    """Reference model: per service name, FIFO queues of waiting workers and pending requests."""

    def __init__(self) -> None:
        self.workers: dict[bytes, deque] = {}
        self.requests: dict[bytes, deque] = {}
        self.assigned: list[tuple[int, bytes]] = []

    def ready(self, n: int, service: bytes) -> None:
        self.workers.setdefault(service, deque()).append(n)
        self.match(service)

    def request(self, rid: bytes, service: bytes) -> None:
        self.requests.setdefault(service, deque()).append(rid)
        self.match(service)

    def match(self, service: bytes) -> None:
        while self.workers.get(service) and self.requests.get(service):
            self.assigned.append((self.workers[service].popleft(), self.requests[service].popleft()))


@given(st.lists(st.tuples(st.sampled_from(["ready", "request", "answer"]), st.sampled_from([b"a", b"b"])), max_size=40))
def test_name_resolver_behaves_like_plain_majordomo(steps: list[tuple[str, bytes]]) -> None:
    h = Harness()
    model = Majordomo()
    busy: dict[int, tuple[bytes, bytes]] = {}  # worker -> (task id, service)
    serial = 0
    for action, service in steps:
        serial += 1
        if action == "ready":
            h.ready(worker(serial), service)
            model.ready(serial, service)
        elif action == "request":
            h.request(client(0), b"r%d" % serial, service)
            model.request(b"r%d" % serial, service)
        elif busy:
            n = min(busy)
            task_id, served = busy.pop(n)
            h.answer(worker(n), task_id, b"x", served)
            model.ready(n, served)
        for peer, record in h.core.workers.items():
            if record.task is not None:
                busy[peer.address] = (record.task.id, record.description)
    actual = [(peer.address, body[0]) for peer in map(worker, range(serial + 1)) for _, _, body in h.tasks_of(peer)]
    assert sorted(actual) == sorted(model.assigned)


def test_resolvers_load_by_name_and_module() -> None:
    assert isinstance(load_resolver("attributes", {"prefer": "gpu:a100,t4"}), AttributeResolver)
    assert isinstance(load_resolver("balanced", {"key": "rack"}), BalancedResolver)
    assert isinstance(
        load_resolver("generaldomo.sansio.broker.services.resolvers.balanced:BalancedResolver"), BalancedResolver
    )
    with pytest.raises(ValueError, match="known: attributes, balanced, name"):
        load_resolver("nonesuch")


def test_attributes_end_to_end(transport, brokers, workers) -> None:
    broker = brokers(transport, ["tcp://127.0.0.1:*"], resolver=AttributeResolver(prefer="gpu:a100,t4"))
    endpoint = broker.endpoint(transport, "tcp")
    workers(endpoint, transport, sdo(gpu="t4").decode(), lambda p: b"t4:" + p)
    workers(endpoint, transport, sdo(gpu="a100").decode(), lambda p: b"a100:" + p)
    with Client(endpoint, transport) as c:
        for n in range(10):
            assert c.request(sdo(gpu="a100"), b"%d" % n, timeout=30).payload == b"a100:%d" % n
        answers = {c.request(sdo(gpu=["t4"]), b"x", timeout=30).payload for _ in range(3)}
        assert answers == {b"t4:x"}


def test_cli_loads_a_resolver_by_name(transport) -> None:
    base = [sys.executable, "-m", "generaldomo"]
    broker = subprocess.Popen(
        [*base, "broker", "--transport", transport, "--bind", "tcp://127.0.0.1:*",
         "--resolver", "attributes", "--resolver-opt", "prefer=gpu:a100,t4"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    worker_ = None
    try:
        endpoint = broker.stdout.readline().split()[-1]
        worker_ = subprocess.Popen(
            [*base, "worker", "--transport", transport, "--connect", endpoint, "--service", sdo(gpu="t4").decode(),
             "--tag", "t4"],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        result = subprocess.run(
            [*base, "client", "--transport", transport, "--connect", endpoint, sdo(gpu="t4").decode(), "hi"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert result.stdout.strip() == "t4:hi", result.stderr
    finally:
        for process in (worker_, broker):
            if process is not None:
                process.terminate()
                process.wait(10)


@pytest.mark.parametrize("resolver", [AttributeResolver(), BalancedResolver()])
def test_attribute_resolvers_forget_services(resolver) -> None:
    service = resolver.for_request(sdo())
    resolver.forget(service)
    assert resolver.find(sdo()) is None and not list(resolver.services())
    assert resolver.for_worker(sdo(gpu="t4")) is not service

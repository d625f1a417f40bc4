"""The fuzzer over real sockets: a live broker process on each transport, the bridge, and a Client and a Worker
facing a hostile broker, fed what :mod:`fuzz_strategies` makes (fewer cases than the core's tests: real IO).

The broker: a ``generaldomo broker`` process with small budgets, an honest echo worker and an honest client,
and three hostile connections (DEALERs behind forged envelopes on the router transport, CLIENTs sending packed
messages and bytes that are not on the server one). First the whole corpus, then batches the strategies draw;
after each, the honest client's echo is answered (its worst wait is recorded in the test's properties: a
figure, not an assertion), the process lives, its barrier caught nothing (``internal_errors`` is 0), the
ledger stays within its budget and the process's RSS within about 1.5 times the budget plus what it held
before. The bridge gets the same from its hostile clients (the honest echo comes through, its loop serves,
its barrier caught nothing) and odd replies from a hostile MDP broker upstream. A Client or a Worker facing a
raw broker gets batches of messages of every kind a broker sends, at and beyond their bounds, around each
honest request or task: its IO thread lives, it catches nothing, and the honest answer comes through.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fuzz_strategies as fs
import pytest
from fuzz_profiles import fuzz_settings
from hostile import RawBroker, RawPeer
from hypothesis import given
from hypothesis import strategies as st

from generaldomo import Broker, Client, RequestFailed, RequestRejected, Settings, Worker
from generaldomo.io.bridge import Bridge
from generaldomo.sansio.wire import limits, protocol
from generaldomo.sansio.wire.events import Dialect

MIB = 1024 * 1024
HELD_BYTES = 16 * MIB  # the broker's ledger budget (--held-bytes)
RSS_SLACK = 96 * MIB  # what the process may grow by beyond 1.5 times that budget (allocator, caches, pages)
WAIT = 30.0  # seconds an honest answer may take on a loaded machine (its real wait is recorded, not asserted)
HOSTILES = 3


FINAL = [protocol.GDP_CLIENT, b"\x03"]


def settle(hostile: RawPeer, question: list[bytes], is_answer: Callable[[list[bytes]], bool]) -> None:
    """``hostile`` asks ``question`` and reads until its answer comes: the broker (or bridge) handled whatever
    it sent before (one connection's messages are handled in order). The question is asked again every
    second: libzmq disconnects a peer that sent a frame beyond the message size, and what it had queued (the
    question too) goes with that connection; its socket reconnects by itself."""
    deadline = time.monotonic() + WAIT
    while True:
        assert time.monotonic() < deadline, "a hostile connection that reads got no answer"
        hostile.send(question)
        until = time.monotonic() + 1.0
        while (left := until - time.monotonic()) > 0:
            frames = hostile.recv(max(1, int(left * 1000)))
            if frames is not None and is_answer(frames):
                return


def answers(rid: bytes) -> Callable[[list[bytes]], bool]:
    """Whether a message is the final answer to request ``rid``."""
    return lambda frames: frames[:3] == [*FINAL, rid]


def drain(hostiles: list[RawPeer]) -> None:
    """The hostile connections read what came for them (what a peer leaves unread beyond its budget is dropped,
    and a settling answer must not be one of those)."""
    for hostile in hostiles:
        for _ in range(100_000):
            if hostile.recv(0) is None:
                break


def rss(pid: int) -> int:
    """The resident set of process ``pid``, in bytes (from /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for process {pid}")


class LiveBroker:
    """A broker process with an honest echo worker and client, and hostile connections to it."""

    def __init__(self, transport: str) -> None:
        self.transport = transport
        self.process = subprocess.Popen(
            [sys.executable, "-m", "generaldomo", "broker", "--transport", transport, "--bind", "tcp://127.0.0.1:*",
             "--held-bytes", str(HELD_BYTES), "--connection-bytes", str(4 * MIB), "--max-workers", "64",
             "--max-message", str(256 * 1024), "--keep-bytes", str(MIB)],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.process.stdout is not None
        self.endpoint = self.process.stdout.readline().split()[-1]
        self.worker = Worker(self.endpoint, "echo", lambda payload: payload, transport)
        self.thread = threading.Thread(target=self.worker.serve, daemon=True)
        self.thread.start()
        self.client = Client(self.endpoint, transport)
        self.hostiles = [RawPeer(transport, self.endpoint) for _ in range(HOSTILES)]
        self.serial = 0
        self.waits: list[float] = []
        self.echo()  # the worker is registered: what the broker holds from now on is the fuzzer's doing
        self.rss_before = rss(self.process.pid)

    def send(self, sender: int, hops: list[bytes], frames: list[bytes]) -> None:
        """``frames`` from hostile connection ``sender`` (behind ``hops`` on the router transport; a message of no
        frames at all is one libzmq cannot send)."""
        message = frames if self.transport == "server" else [*hops, *frames]
        if message:
            self.hostiles[sender % HOSTILES].send(message)

    def send_part(self, sender: int, part: bytes) -> None:
        """One message part, packed or not, on the server transport."""
        self.hostiles[sender % HOSTILES].socket.send(part)

    def echo(self) -> None:
        """The honest client's echo is answered with its own payload (its wait is recorded)."""
        self.serial += 1
        payload = b"honest-%d" % self.serial
        start = time.monotonic()
        assert self.client.request("echo", payload, timeout=WAIT).payload == payload
        self.waits.append(time.monotonic() - start)

    def settle(self) -> None:
        """Each hostile connection asks ``mmi.service`` and reads until that answer comes (:func:`settle`)."""
        for n, hostile in enumerate(self.hostiles):
            rid = b"settle-%d-%d" % (n, self.serial)
            settle(hostile, protocol.gdp_request(rid, b"mmi.service", [b"echo"]), answers(rid))

    def check(self) -> dict[str, Any]:
        """The invariants after a batch: once the broker has handled it, the honest echo, a live process,
        nothing caught, budgets kept."""
        self.settle()
        self.echo()
        assert self.process.poll() is None, "the broker process died"
        assert self.thread.is_alive(), "the honest worker stopped"
        report = self.client.status(timeout=WAIT)["broker"]
        assert report["internal_errors"] == 0 and report["counters"].get("internal_errors", 0) == 0
        assert report["ledger"]["held_bytes"] - report["ledger"]["by_kind"].get("kept", 0) <= HELD_BYTES * 1.125
        grown = rss(self.process.pid)
        assert grown <= self.rss_before + 1.5 * HELD_BYTES + RSS_SLACK, f"RSS {grown} from {self.rss_before}"
        return dict(report["counters"])

    def close(self) -> None:
        for hostile in self.hostiles:
            hostile.close()
        self.client.close()
        self.worker.stop()
        self.thread.join(20)
        self.process.terminate()
        self.process.wait(20)


@pytest.fixture
def live(transport: str, record_property: Any) -> Iterator[LiveBroker]:
    broker = LiveBroker(transport)
    try:
        yield broker
        record_property("worst_honest_wait_s", round(max(broker.waits), 3))  # a figure, in the JUnit XML
    finally:
        broker.close()


def test_a_live_broker_takes_the_corpus(live: LiveBroker) -> None:
    """Every message of the corpus, from the hostile connections in turn, with an honest echo every 200."""
    for n, (_, route, message) in enumerate(fs.corpus()):
        live.send(n, route, message)
        if n % 200 == 199:
            drain(live.hostiles)
            live.check()
    counters = live.check()
    assert counters.get("malformed", 0) > 50, sorted(counters.items())  # the corpus reached the parser


BATCHES = st.lists(st.tuples(st.integers(0, HOSTILES - 1), fs.hops(), fs.messages()), min_size=5, max_size=40)


@fuzz_settings(20, live=True)
@given(batch=BATCHES, parts=st.lists(fs.server_parts(), max_size=10))
def test_a_live_broker_takes_fuzzed_batches(
    live: LiveBroker, batch: list[tuple[int, list[bytes], list[bytes]]], parts: list[bytes]
) -> None:
    for sender, route, message in batch:
        live.send(sender, route, message)
    if live.transport == "server":
        for n, part in enumerate(parts):
            live.send_part(n, part)
    drain(live.hostiles)
    live.check()


# ---------------------------------------------------------------------------------------------- the bridge


class LiveBridge:
    """A bridge in front of a broker with an honest echo worker, an honest client of the bridge, and hostile
    connections to it (the bridge speaks to clients over SERVER sockets only). Several hostile connections
    can hold every place in flight with requests nobody serves (one connection at most
    :data:`~generaldomo.io.bridge.CLIENT_SHARE` of them) until they expire upstream: the honest client's
    requests wait in its queue meanwhile, or are answered ``429`` beyond it, and it asks again."""

    def __init__(self, broker: Broker, workers: Callable[..., Worker]) -> None:
        workers(broker.endpoint("router"), "router")
        # a small queue per connection: the corpus's requests beyond it are refused (429), those within it wait
        self.bridge = Bridge(
            ["tcp://127.0.0.1:*"], broker.endpoint("router"), max_in_flight=32, connection_queue_bytes=4096
        ).start()
        endpoint = self.bridge.endpoints[0]
        self.client = Client(endpoint, "server")
        self.hostiles = [RawPeer("server", endpoint) for _ in range(HOSTILES)]
        self.serial = 0
        self.waits: list[float] = []

    def check(self) -> None:
        """Once the bridge has handled every hostile message (each connection's heartbeat is answered), the
        honest echo comes through, the bridge serves, its barrier caught nothing, its DEALERs are bounded."""
        drain(self.hostiles)
        for hostile in self.hostiles:
            settle(hostile, protocol.gdp_client_heartbeat(), lambda f: f[:2] == [protocol.GDP_CLIENT, b"\x04"])
        self.serial += 1
        payload = b"honest-%d" % self.serial
        start = time.monotonic()
        while True:  # the hostile connections' requests may hold every place until they expire upstream (1 s)
            try:
                assert self.client.request("echo", payload, timeout=WAIT).payload == payload
                break
            except RequestRejected:
                assert time.monotonic() - start < WAIT, "the honest client never got a place in flight"
                time.sleep(0.2)
        self.waits.append(time.monotonic() - start)
        self.bridge.check()  # raises BridgeFailed if its loop died
        assert self.bridge.internal_errors == 0 and self.bridge.dealers <= self.bridge.max_in_flight

    def close(self) -> None:
        for hostile in self.hostiles:
            hostile.close()
        self.client.close()
        self.bridge.stop()


@pytest.fixture
def live_bridge(
    brokers: Callable[..., Broker], workers: Callable[..., Worker], record_property: Any
) -> Iterator[LiveBridge]:
    bridge = LiveBridge(brokers("router", ["tcp://127.0.0.1:*"], settings=Settings(queue_timeout=1.0)), workers)
    try:
        yield bridge
        record_property("worst_honest_wait_s", round(max(bridge.waits), 3))
    finally:
        bridge.close()


def test_a_bridge_takes_the_corpus(live_bridge: LiveBridge, caplog: pytest.LogCaptureFixture) -> None:
    for n, (_, _, message) in enumerate(fs.corpus()):
        if message:
            live_bridge.hostiles[n % HOSTILES].send(message)
        if n % 500 == 499:
            live_bridge.check()
    live_bridge.check()
    said = caplog.text
    assert "bridge dropped a message" in said and "bridge refused a request" in said, "the corpus never got in"


@fuzz_settings(15, live=True)
@given(batch=BATCHES, parts=st.lists(fs.server_parts(), max_size=10))
def test_a_bridge_takes_fuzzed_batches(
    live_bridge: LiveBridge, batch: list[tuple[int, list[bytes], list[bytes]]], parts: list[bytes]
) -> None:
    for sender, _, message in batch:
        live_bridge.hostiles[sender].send(message)
    for n, part in enumerate(parts):
        live_bridge.hostiles[n % HOSTILES].socket.send(part)
    live_bridge.check()


@st.composite
def to_bridge(draw: st.DrawFn) -> list[bytes]:
    """What a hostile MDP/0.1 broker sends one of the bridge's DEALERs: replies with the service and body
    typical or odd, an error status in place of the body, or anything at all; one in five mutated."""
    service = draw(st.sampled_from([b"echo", b"other", b"", b"x" * 300]))
    body = draw(st.sampled_from([[b"fuzzed"], *fs.body_lists()[:3], [b"5" * 5000], [protocol.OVER_BUDGET]]))
    return draw(fs.mutated(draw(st.sampled_from([[b"", b"MDPC01", service, *body]] * 2) | fs.messages())))


@pytest.fixture
def bridge_facing_a_broker() -> Iterator[tuple[RawBroker, Bridge, Client]]:
    with RawBroker("router") as upstream:
        bridge = Bridge(["tcp://127.0.0.1:*"], upstream.endpoint, max_in_flight=32).start()
        try:
            with Client(bridge.endpoints[0], "server") as client:
                yield upstream, bridge, client
        finally:
            bridge.stop()


@fuzz_settings(15, live=True)
@given(batch=st.lists(to_bridge(), min_size=1, max_size=20))
def test_a_bridge_facing_a_hostile_broker(
    bridge_facing_a_broker: tuple[RawBroker, Bridge, Client], batch: list[list[bytes]]
) -> None:
    """An honest request through the bridge, the batch to the DEALER that relays it, then an honest reply: the
    request is answered (MDP has no request id: a well-formed reply in the batch may be its answer), the bridge
    serves on and its barrier caught nothing."""
    upstream, bridge, client = bridge_facing_a_broker
    future = client.submit("echo", b"honest")
    dealer, _ = upstream.recv_until(lambda frames: frames[1:3] == [b"MDPC01", b"echo"])
    for message in batch:
        upstream.send(dealer, message or [b""])
    upstream.send(dealer, [b"", b"MDPC01", b"echo", b"honest"])
    try:
        future.result(WAIT)
    except RequestFailed:
        pass  # a reply of the batch that the bridge relays as an error status
    bridge.check()
    assert bridge.internal_errors == 0 and bridge.serving


# ---------------------------------------------------------------------------------- facing a hostile broker

_TIMINGS = [b"", protocol.timing(0.5, 0.25), b"\xff" * 16, b"\x00" * 15, b"\x7f\xf8" + b"\x00" * 14]
_RIDS = st.sampled_from([frame for [frame] in fs.EDGES["rid"]]) | st.binary(min_size=1, max_size=20)


@st.composite
def to_client(draw: st.DrawFn) -> list[bytes]:
    """What a hostile broker sends a client: replies, partial results and heartbeats of every dialect with each
    field typical or at its bounds (never a well-formed answer to the client's own request: the ids are others),
    or anything at all; one in five mutated."""
    rid = draw(_RIDS)
    command = draw(st.sampled_from([*protocol.CLIENT_COMMANDS[Dialect.GDP], "unknown"]))
    byte = protocol.CLIENT_COMMANDS[Dialect.GDP].get(command, 0x7E).to_bytes(1, "big")
    status, timing = draw(st.sampled_from(fs.statuses())), draw(st.sampled_from(_TIMINGS))
    body = draw(st.sampled_from(fs.body_lists()[:3]) | st.lists(st.binary(max_size=16), max_size=3))
    if command == protocol.HEARTBEAT:
        args = [draw(st.sampled_from(fs.edge_frames(limits.INSTANCE, b"i"))), *draw(st.sampled_from(fs.EDGES["ids"]))]
    elif command == protocol.FINAL:
        args = [rid, status, timing, *body]
    else:
        args = [rid, *body]
    gdp = [protocol.GDP_CLIENT, byte, *args]
    mdp = [b"", b"MDPC02", b"\x02", b"echo", *body]
    return draw(fs.mutated(draw(st.sampled_from([gdp, gdp, mdp]) | fs.messages())))


@st.composite
def to_worker(draw: st.DrawFn) -> list[bytes]:
    """What a hostile broker sends a worker: tasks (with fields), cancels and heartbeats with each field
    typical or at its bounds, or anything at all; one in five mutated. No task id is the honest one's."""
    task = draw(st.sampled_from([frame for [frame] in fs.EDGES["task"]]) | st.binary(min_size=1, max_size=20))
    command = draw(st.sampled_from([protocol.REQUEST, protocol.FIELDS_REQUEST, protocol.CANCEL, protocol.HEARTBEAT,
                                    "unknown"]))  # fmt: skip
    byte = protocol.WORKER_COMMANDS[Dialect.GDP].get(command, 0x7E).to_bytes(1, "big")
    body = draw(st.sampled_from(fs.body_lists()[:3]) | st.lists(st.binary(max_size=16), max_size=3))
    description = draw(st.sampled_from(fs.descriptions()[:6]) | st.just(b"echo"))
    if command == protocol.REQUEST:
        args = [task, description, *body]
    elif command == protocol.FIELDS_REQUEST:
        args = [task, description, draw(st.sampled_from(fs.fields_frames())), *body]
    elif command == protocol.HEARTBEAT:
        args = [draw(st.sampled_from(fs.edge_frames(limits.INSTANCE, b"i"))), *draw(st.sampled_from(fs.EDGES["ids"]))]
    else:
        args = [task]
    return draw(fs.mutated(draw(st.sampled_from([[protocol.GDP_WORKER, byte, *args]] * 2) | fs.messages())))


def is_request(frames: list[bytes]) -> bool:
    return len(frames) > 2 and frames[:2] in ([protocol.GDP_CLIENT, b"\x01"], [protocol.GDP_CLIENT, b"\x06"])


class FacingClient:
    """A raw broker and a Client connected to it; ``answered``: the request ids it answered (a heartbeat of
    another broker instance in a batch makes the client send its requests again: those are not new ones)."""

    def __init__(self, broker: RawBroker, client: Client) -> None:
        self.broker, self.client = broker, client
        self.answered: set[bytes] = set()


@pytest.fixture
def facing_client(transport: str) -> Iterator[FacingClient]:
    with RawBroker(transport) as broker, Client(broker.endpoint, transport, heartbeat_interval=60) as client:
        yield FacingClient(broker, client)
        assert client.malformed > 0, "no hostile message reached the client's reader"


@fuzz_settings(15, live=True)
@given(batch=st.lists(to_client(), min_size=1, max_size=30))
def test_a_client_facing_a_hostile_broker(facing_client: FacingClient, batch: list[list[bytes]]) -> None:
    """An honest request, the batch, then the request's answer: it comes through."""
    here, broker = facing_client, facing_client.broker
    future = here.client.submit("echo", b"honest")
    peer, frames = broker.recv_until(lambda frames: is_request(frames) and frames[2] not in here.answered)
    for message in batch:
        broker.send(peer, message)
    broker.send(peer, [protocol.GDP_CLIENT, b"\x03", frames[2], protocol.OK, b"", b"honest"])
    here.answered.add(frames[2])
    assert future.result(WAIT).payload == b"honest"
    assert here.client.internal_errors == 0


class FacingWorker:
    """A raw broker and a Worker connected to it; ``peer``: the worker's socket, once it said READY."""

    def __init__(self, broker: RawBroker, worker: Worker) -> None:
        self.broker, self.worker = broker, worker
        self.peer: Any = None
        self.tasks = 0


@pytest.fixture
def facing_worker(transport: str) -> Iterator[FacingWorker]:
    with RawBroker(transport) as broker:
        worker = Worker(broker.endpoint, "echo", lambda payload: payload, transport, heartbeat_interval=60)
        thread = threading.Thread(target=worker.serve, daemon=True)
        thread.start()
        try:
            yield FacingWorker(broker, worker)
            assert thread.is_alive(), "the worker's loop stopped"
            assert worker.malformed > 0, "no hostile message reached the worker's reader"
        finally:
            worker.stop()
            thread.join(20)


def is_ready(frames: list[bytes]) -> bool:
    return frames[:2] == [protocol.GDP_WORKER, b"\x01"]


@fuzz_settings(15, live=True)
@given(batch=st.lists(to_worker(), min_size=1, max_size=30))
def test_a_worker_facing_a_hostile_broker(facing_worker: FacingWorker, batch: list[list[bytes]]) -> None:
    """The batch, then an honest task: its result comes back (each READY without a result, after a DISCONNECT
    or a heartbeat of another broker instance in the batch, gets the task again)."""
    here, broker = facing_worker, facing_worker.broker
    here.tasks += 1
    task = b"honest-task-%d" % here.tasks
    if here.peer is None:
        here.peer, _ = broker.recv_until(is_ready)
    for message in batch:
        broker.send(here.peer, message)
    broker.send(here.peer, protocol.worker_request(Dialect.GDP, task, b"echo", [b"honest"]))
    for _ in range(1000):
        peer, frames = broker.recv_until(is_ready)
        if len(frames) >= 5 and frames[3] == task:
            assert frames[4:] == [protocol.OK, b"honest"], frames
            break
        if len(frames) <= 4:  # it registered again: the task it had was dropped with its registration
            here.peer = peer
            broker.send(peer, protocol.worker_request(Dialect.GDP, task, b"echo", [b"honest"]))
    else:
        raise AssertionError("the honest task was never answered")
    assert here.worker.internal_errors == 0

"""Re-ask, resend on unknown and cancel, over real sockets.

First against a scripted broker (a bare ROUTER or SERVER socket this test drives frame by frame), which
checks the client's side of the wire exactly; then against the real broker, for the parts that need the
broker's support for kept answers and CANCEL (round 2): those skip, saying so, when the broker lacks it.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator

import pytest
import zmq
from waiting import eventually, served

from generaldomo import Client
from generaldomo.sansio.config.settings import Settings
from generaldomo.sansio.wire import codec, protocol


class ScriptedBroker:
    """One bound socket of either transport; the test reads the client's messages and answers by hand."""

    def __init__(self, transport: str) -> None:
        self.transport = transport
        self.socket = zmq.Context.instance().socket(zmq.ROUTER if transport == "router" else zmq.SERVER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.bind("tcp://127.0.0.1:*")
        self.endpoint = self.socket.getsockopt(zmq.LAST_ENDPOINT).decode()
        self.peer: bytes | int | None = None

    def read(self, timeout: float = 20.0) -> list[bytes]:
        assert self.socket.poll(int(timeout * 1000)), "the client sent nothing"
        if self.transport == "router":
            self.peer, *frames = self.socket.recv_multipart()
            return frames
        frame = self.socket.recv(copy=False)
        self.peer = frame.routing_id
        return codec.decode(frame.bytes)

    def read_until(self, wanted, what: str) -> list[bytes]:
        """Read past heartbeats (answering them) until a message ``wanted`` accepts."""
        for _ in range(200):
            frames = self.read()
            if wanted(frames):
                return frames
            if frames[1] == b"\x04":  # alive, and holding whatever was asked about
                self.send(protocol.gdp_client_heartbeat(b"scripted"))
        raise AssertionError(f"never got {what}")

    def send(self, frames: list[bytes]) -> None:
        if self.transport == "router":
            self.socket.send_multipart([self.peer, *frames], zmq.NOBLOCK)
        else:
            self.socket.send(codec.encode(frames), zmq.NOBLOCK, routing_id=self.peer)

    def close(self) -> None:
        self.socket.close()


@pytest.fixture
def scripted(transport: str) -> Iterator[ScriptedBroker]:
    broker = ScriptedBroker(transport)
    yield broker
    broker.close()


def is_request(frames: list[bytes]) -> bool:
    return frames[1] in (b"\x01", b"\x06")  # REQUEST, or REQUEST+FIELDS (request() sends its deadline)


def final(request_id: bytes, body: bytes) -> list[bytes]:
    return [protocol.GDP_CLIENT, b"\x03", request_id, protocol.OK, b"", body]


def test_a_lost_answer_is_asked_for_and_delivered(scripted: ScriptedBroker, transport: str) -> None:
    with Client(scripted.endpoint, transport, heartbeat_interval=0.1, reask_after=0.3) as client:
        future = client.submit("echo", b"lost")
        request_id = scripted.read_until(is_request, "the request")[2]
        asked = scripted.read_until(lambda f: f[1] == b"\x04" and request_id in f[2:], "a heartbeat asking")
        assert asked[:2] == [b"GDPC01", b"\x04"]
        scripted.send(final(request_id, b"kept answer"))  # the broker re-sends its kept answer
        scripted.send(protocol.gdp_client_heartbeat(b"scripted"))
        assert future.result(20).payload == b"kept answer" and client.resent == 0


def test_an_unknown_request_is_sent_again_with_its_id(scripted: ScriptedBroker, transport: str) -> None:
    with Client(scripted.endpoint, transport, heartbeat_interval=0.1, reask_after=0.3) as client:
        future = client.submit("echo", [b"a", b""])
        first = scripted.read_until(is_request, "the request")
        scripted.read_until(lambda f: f[1] == b"\x04" and first[2] in f[2:], "a heartbeat asking")
        scripted.send(protocol.gdp_client_heartbeat(b"scripted", [first[2]]))
        assert scripted.read_until(is_request, "the request again") == first
        scripted.send(final(first[2], b"done"))
        assert future.result(20).payload == b"done" and client.resent == 1


def test_cancel_and_timeout_send_cancel(scripted: ScriptedBroker, transport: str) -> None:
    with Client(scripted.endpoint, transport, heartbeat_interval=1.0) as client:  # no reconnect meanwhile
        future = client.submit("echo", b"never mind")
        request_id = scripted.read_until(is_request, "the request")[2]
        assert future.cancel()
        assert scripted.read_until(lambda f: f[1] == b"\x05", "CANCEL") == [b"GDPC01", b"\x05", request_id]
        with pytest.raises(TimeoutError):
            client.request("echo", b"too slow", timeout=0.2)
        late = scripted.read_until(is_request, "the second request")[2]
        assert scripted.read_until(lambda f: f[1] == b"\x05", "CANCEL") == [b"GDPC01", b"\x05", late]
        scripted.send(final(late, b"late"))  # dropped: nobody waits for it
        eventually(lambda: client.replies_dropped == 1, what="the late reply to be dropped")


def test_an_abandoned_stream_and_an_interrupted_request_send_cancel(scripted: ScriptedBroker, transport) -> None:
    with Client(scripted.endpoint, transport, heartbeat_interval=1.0) as client:
        parts = client.stream("count", b"x", timeout=20)
        reader = threading.Thread(target=lambda: next(parts, None))
        reader.start()
        request_id = scripted.read_until(is_request, "the request")[2]
        scripted.send([protocol.GDP_CLIENT, b"\x02", request_id, b"part"])
        reader.join(20)
        parts.close()  # the caller stops reading
        assert scripted.read_until(lambda f: f[1] == b"\x05", "CANCEL") == [b"GDPC01", b"\x05", request_id]

        def interrupt(*_: object) -> None:
            raise KeyboardInterrupt

        previous = signal.signal(signal.SIGALRM, interrupt)
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.3)  # Ctrl-C while the request waits
            with pytest.raises(KeyboardInterrupt):
                client.request("echo", b"interrupted", timeout=None)
        finally:
            signal.signal(signal.SIGALRM, previous)
        interrupted = scripted.read_until(is_request, "the second request")[2]
        assert scripted.read_until(lambda f: f[1] == b"\x05", "CANCEL") == [b"GDPC01", b"\x05", interrupted]


# ----------------------------------------------------------------------- needs the broker's support (round 2)


def broker_keeps_answers(client: Client) -> None:
    """Skip unless the broker supports kept answers and CANCEL (``keep_answers`` in mmi.status settings)."""
    if "keep_answers" not in client.status()["broker"]["settings"]:
        pytest.skip("needs the broker side of kept answers, re-ask and CANCEL (keep_answers in mmi.status)")


def test_with_the_broker_reasking_a_running_task_resends_nothing(transport: str, brokers, workers) -> None:
    # heartbeats of 0.25 s (silences of 0.75 s): a loaded machine's stalls must not pass for a lost broker
    broker = brokers(transport, ["tcp://127.0.0.1:*"], settings=Settings(heartbeat_interval=0.25))
    endpoint = broker.endpoint(transport, "tcp")
    done = threading.Event()

    def slow(payload: bytes) -> bytes:
        done.wait(2.0)  # outstanding for many re-ask ages
        return payload

    worker = workers(endpoint, transport, "slow", slow, heartbeat_interval=0.25)
    with Client(endpoint, transport, heartbeat_interval=0.25, reask_after=0.1) as client:
        broker_keeps_answers(client)
        served(client, "slow")  # the broker's grace for 404s is 0.75 s here
        assert client.request("slow", b"once", timeout=30).payload == b"once"
        assert client.resent == 0 and client.reconnects == 0 and worker.tasks_done == 1


def test_with_the_broker_a_cancelled_request_never_runs(transport: str, brokers, workers) -> None:
    broker = brokers(transport, ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint(transport, "tcp")
    with Client(endpoint, transport) as client:
        broker_keeps_answers(client)
        client.submit("echo", b"withdrawn").cancel()
        with pytest.raises(TimeoutError):
            client.request("echo", b"timed out", timeout=0.2)
        eventually(lambda: client.status()["broker"]["queued"] == 0, what="the cancelled tasks to leave the queue")
        worker = workers(endpoint, transport)
        served(client, "echo")
        assert client.request("echo", b"served", timeout=30).payload == b"served"
        assert worker.tasks_done == 1


def test_with_the_broker_a_repeated_request_id_gets_the_kept_answer(transport: str, brokers, workers) -> None:
    broker = brokers(transport, ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint(transport, "tcp")
    worker = workers(endpoint, transport)
    with Client(endpoint, transport) as client:
        broker_keeps_answers(client)
    kind = zmq.DEALER if transport == "router" else zmq.CLIENT
    raw = zmq.Context.instance().socket(kind)
    raw.setsockopt(zmq.LINGER, 0)
    raw.connect(endpoint)

    def receive() -> list[bytes]:
        assert raw.poll(20_000)
        return raw.recv_multipart() if kind == zmq.DEALER else codec.decode(raw.recv())

    def ask(frames: list[bytes]) -> list[bytes]:
        raw.send_multipart(frames) if kind == zmq.DEALER else raw.send(codec.encode(frames))
        return receive()

    try:
        request = protocol.gdp_request(b"id-1", b"echo", [b"once"])
        assert ask(request)[-1] == b"once"
        assert ask(request)[-1] == b"once"  # answered again from the kept answer
        assert ask(protocol.gdp_client_heartbeat(ids=[b"id-1"]))[2] == b"id-1"  # the kept FINAL first
        answer = receive()
        assert answer[1] == b"\x04" and answer[3:] == []  # ... then the answer: nothing unknown
        assert ask(protocol.gdp_client_heartbeat(ids=[b"never-asked"]))[3:] == [b"never-asked"]
        assert worker.tasks_done == 1
    finally:
        raw.close()

"""The Client API: many threads, futures, errors, timeouts, closing."""

from __future__ import annotations

import threading
import time

import pytest
import zmq
from waiting import eventually

from generaldomo import Client, ClientClosed, RequestFailed

THREADS = 16
PER_THREAD = 200


def test_threads_sharing_one_client_each_get_their_own_results(transport: str, brokers, workers, endpoint_for) -> None:
    broker = brokers(transport, [endpoint_for("tcp")])
    endpoint = broker.endpoint(transport, "tcp")
    for _ in range(2):
        workers(endpoint, transport)
    errors: list[str] = []
    with Client(endpoint, transport) as client:

        def caller(n: int) -> None:
            for i in range(PER_THREAD):
                payload = b"thread%d-%d" % (n, i)
                future = client.submit("echo", payload) if i % 2 else None
                got = future.result(30).payload if future else client.request("echo", payload, timeout=30).payload
                if got != payload:
                    errors.append(f"thread {n} asked {payload!r} got {got!r}")

        threads = [threading.Thread(target=caller, args=(n,)) for n in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert not any(t.is_alive() for t in threads)
        assert client.replies_dropped == 0
    assert not errors
    assert broker.core.counters["completed"] == THREADS * PER_THREAD


def test_multi_frame_payloads_with_empty_frames(transport: str, brokers, workers, endpoint_for) -> None:
    broker = brokers(transport, [endpoint_for("inproc")])
    endpoint = broker.endpoint(transport)
    workers(endpoint, transport)
    with Client(endpoint, transport) as client:
        # The earlier prototype crashed on a request whose last frame was empty.
        assert client.request("echo", [b"a", b"", b""], timeout=10).frames == (b"a", b"", b"")
        assert client.request("echo", b"", timeout=10).frames == (b"",)
        assert client.request("echo", [], timeout=10).frames == ()
        big = b"z" * (1 << 17)
        assert client.request("echo", big, timeout=10).payload == big


def test_handler_error_is_a_request_failure(transport: str, brokers, workers, endpoint_for) -> None:
    broker = brokers(transport, [endpoint_for("inproc")])
    endpoint = broker.endpoint(transport)

    def fail(payload: bytes) -> bytes:
        raise KeyError(payload.decode())

    workers(endpoint, transport, "fail", fail)
    workers(endpoint, transport, "echo")
    with Client(endpoint, transport) as client:
        with pytest.raises(RequestFailed) as caught:
            client.request("fail", b"boom", timeout=10)
        assert caught.value.status == 500 and caught.value.status_bytes == b"500" and "KeyError" in caught.value.reason
        assert client.request("echo", b"still fine", timeout=10).payload == b"still fine"


def test_bad_description_is_a_request_failure(transport: str, brokers, endpoint_for) -> None:
    broker = brokers(transport, [endpoint_for("inproc")])
    with Client(broker.endpoint(transport), transport) as client:
        with pytest.raises(RequestFailed) as caught:
            client.request(b"\xff\xfe", b"x", timeout=10)
        assert caught.value.status == 400 and caught.value.status_bytes == b"400"


def test_timeout_then_close_fails_what_is_left(transport: str, brokers, endpoint_for) -> None:
    broker = brokers(transport, [endpoint_for("inproc")])
    client = Client(broker.endpoint(transport), transport)
    with pytest.raises(TimeoutError):
        client.request("nobody-serves-this", b"x", timeout=0.2)
    pending = client.submit("nobody-serves-this", b"y")
    client.close()
    with pytest.raises(ClientClosed):
        pending.result(5)
    with pytest.raises(ClientClosed):
        client.submit("echo", b"z")


def test_mmi_service_through_the_client(transport: str, brokers, workers, endpoint_for) -> None:
    broker = brokers(transport, [endpoint_for("inproc")])
    endpoint = broker.endpoint(transport)
    with Client(endpoint, transport) as client:
        assert client.request("mmi.service", b"echo", timeout=10).payload == b"404"
        workers(endpoint, transport)
        eventually(lambda: client.request("mmi.service", b"echo", timeout=10).payload == b"200", what="a worker")
        assert client.request("mmi.whatever", b"", timeout=10).payload == b"501"


def test_idle_client_does_not_spin(monkeypatch) -> None:
    polls = []
    original = zmq.Poller.poll

    def counting(self, timeout=None):
        if threading.current_thread().name == "generaldomo-client":
            polls.append(timeout)
        return original(self, timeout)

    monkeypatch.setattr(zmq.Poller, "poll", counting)
    with Client("tcp://127.0.0.1:9", "router", heartbeat_interval=0.05):  # nothing listens; nothing asked
        time.sleep(1.5)
    assert len(polls) < 20, f"the idle IO thread polled {len(polls)} times in 1.5 s"

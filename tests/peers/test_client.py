"""The Client API: many threads, futures, errors, timeouts, closing."""

from __future__ import annotations

import threading
import time

import pytest
import zmq
from waiting import eventually

from generaldomo import (
    AsyncClient,
    Client,
    ClientClosed,
    NotFound,
    RequestFailed,
    RequestRejected,
    RequestTimeout,
    TypedClient,
    WorkerError,
)

pytestmark = pytest.mark.pure  # runs again in env pure, on the pure-Python path

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


def test_a_cancel_has_reached_the_broker_when_close_returns(transport: str, brokers, endpoint_for) -> None:
    broker = brokers(transport, [endpoint_for("tcp")])
    endpoint = broker.endpoint(transport, "tcp")
    for _ in range(3):  # the process may exit right after close: nothing the broker needs may still be in flight
        client = Client(endpoint, transport, fail_unknown=False)
        before = broker.core.counters["cancelled"]
        future = client.submit("nobody-serves-this", b"x")
        eventually(lambda: broker.core.tasks, 30, "the request to be queued")
        assert future.cancel()
        client.close()
        assert broker.core.counters["cancelled"] == before + 1 and not broker.core.tasks


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


@pytest.mark.parametrize("payload", ["text", [b"ok", "text"], 42, None, {"a": b"b"}])
def test_a_payload_that_is_not_bytes_fails_in_the_caller_before_anything_is_sent(
    transport: str, payload, brokers, workers, endpoint_for
) -> None:
    broker = brokers(transport, [endpoint_for("inproc")])
    endpoint = broker.endpoint(transport)
    workers(endpoint, transport)
    with Client(endpoint, transport) as client:
        with pytest.raises(TypeError, match=type(payload[1] if isinstance(payload, list) else payload).__name__):
            client.submit("echo", payload)
        with pytest.raises(TypeError):
            client.request("echo", payload, timeout=10)
        assert client.request("echo", bytearray(b"still fine"), timeout=10).payload == b"still fine"
    assert broker.core.counters["requests"] == 1 and broker.core.counters["malformed"] == 0


def test_status_codes_are_ints_and_families_are_classes(transport: str, brokers, workers, endpoint_for) -> None:
    broker = brokers(transport, [endpoint_for("inproc")])
    endpoint = broker.endpoint(transport)
    workers(endpoint, transport, "fail", lambda payload: 1 / 0)
    with Client(endpoint, transport) as client:
        with pytest.raises(WorkerError) as failed:
            client.request("fail", b"x", timeout=10)
        assert failed.value.status == 500 and "ZeroDivisionError" in failed.value.reason
        with pytest.raises(RequestRejected) as rejected:
            client.request(b"\xff", b"x", timeout=10)
        assert isinstance(rejected.value, RequestFailed) and rejected.value.status_bytes == b"400"


def test_default_timeout_and_a_message_that_says_nobody_answered() -> None:
    # nothing listens there; a client told to wait for its broker times out saying so
    with Client("tcp://127.0.0.1:9", "router", default_timeout=0.3, fail_unreachable=False) as client:
        with pytest.raises(RequestTimeout, match=r"no broker has answered at tcp://127.0.0.1:9 over the router"):
            client.request("echo", b"x")
        assert isinstance(RequestTimeout(), TimeoutError)


def test_a_dead_io_thread_fails_every_call_with_its_cause(transport: str, brokers, endpoint_for) -> None:
    broker = brokers(transport, [endpoint_for("tcp")])
    context = zmq.Context()  # terminated under the client: its IO thread stops
    client = Client(broker.endpoint(transport, "tcp"), transport, context=context)
    pending = client.submit("nobody-serves-this", b"x")
    terminating = threading.Thread(target=context.term)
    terminating.start()
    with pytest.raises(ClientClosed) as outstanding:
        pending.result(20)
    assert isinstance(outstanding.value.__cause__, zmq.ZMQError)
    with pytest.raises(ClientClosed, match="IO thread stopped") as later:
        client.submit("echo", b"y")
    assert isinstance(later.value.__cause__, zmq.ZMQError)
    client.close()
    terminating.join(20)
    assert not terminating.is_alive()


def test_a_callback_that_raises_past_exception_stops_the_io_thread_loudly(transport, brokers, workers) -> None:
    class Fatal(BaseException):
        pass

    release = threading.Event()

    def stream(payload: bytes):
        yield b"part"
        release.wait(20)  # the final result comes after the client has failed the call
        return b"final"

    broker = brokers(transport, ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint(transport, "tcp")
    workers(endpoint, transport, "stream", stream)

    def fatal(reply) -> None:
        raise Fatal

    with Client(endpoint, transport) as client:
        future = client.submit("stream", b"x", on_partial=fatal)
        with pytest.raises(ClientClosed) as closed:
            future.result(20)
        release.set()
        assert isinstance(closed.value.__cause__, Fatal)
        with pytest.raises(ClientClosed):
            client.submit("stream", b"y")


def test_errors_name_a_service_the_same_whether_it_was_given_as_text_or_bytes(brokers) -> None:
    """``TypedClient`` sends descriptions as bytes; its errors name ``'square'`` as ``Client``'s do, not
    ``b'square'`` (bytes that are not UTF-8 keep their form)."""
    import asyncio
    import uuid

    from generaldomo.peers.client import named

    endpoint = f"inproc://named-{uuid.uuid4().hex}"
    brokers("router", [endpoint])
    with Client(endpoint, deadlines=False) as client:  # (a deadline would answer 504 first)
        typed = TypedClient(client, "json")
        for ask in (
            lambda: client.request("square", b"", timeout=0.3, fail_unknown=False),
            lambda: client.request(b"square", b"", timeout=0.3, fail_unknown=False),
            lambda: typed.request("square", [1], timeout=0.3, fail_unknown=False),
        ):
            with pytest.raises(RequestTimeout) as waited:
                ask()
            assert str(waited.value).startswith("no reply to 'square' within 0.3 s"), waited.value
        with pytest.raises(NotFound) as unknown:
            typed.request("square", [1], timeout=30, fail_unknown=True)
        assert "'square'" in str(unknown.value) and "b'square'" not in str(unknown.value)
    assert named(b"\xff") == "b'\\xff'"  # (the broker refuses such a name with 400: nothing waits for it)

    async def wait_async() -> str:
        async with AsyncClient(endpoint, deadlines=False) as aio:
            try:
                await aio.request(b"square", b"", timeout=0.3, fail_unknown=False)
            except RequestTimeout as error:
                return str(error)
        return ""

    assert asyncio.run(wait_async()).startswith("no reply to 'square'")

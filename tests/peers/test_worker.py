"""The Worker API: heartbeats during long tasks, reconnecting, stopping."""

from __future__ import annotations

import errno
import threading
import time

import pytest
import zmq
from waiting import eventually

from generaldomo import Client, Worker, WorkerError, WorkerStopped
from generaldomo.sansio.broker.core import Settings

pytestmark = pytest.mark.pure  # runs again in env pure, on the pure-Python path


def test_long_task_keeps_heartbeating(transport: str, brokers, workers, endpoint_for) -> None:
    # an expiry period of 1 s: a shorter one is missed by a loaded machine's stalls, not by a worker that stops
    settings = Settings(heartbeat_interval=0.2, liveness=5)
    broker = brokers(transport, [endpoint_for("tcp")], settings=settings)
    endpoint = broker.endpoint(transport, "tcp")

    def slow(payload: bytes) -> bytes:
        time.sleep(3.5)  # three and a half expiry periods
        return payload

    worker = workers(endpoint, transport, "slow", slow, heartbeat_interval=0.2, liveness=5)
    eventually(lambda: worker.registered, what="the broker to answer the worker")
    with Client(endpoint, transport) as client:
        assert client.request("slow", b"patience", timeout=10).payload == b"patience"
    assert broker.core.counters["workers_expired"] == 0 and broker.core.counters["reissued"] == 0


def rebind(start):
    """Start a broker on a just-released port; libzmq closes the old listener asynchronously."""
    for _ in range(100):
        try:
            return start()
        except zmq.ZMQError as error:
            if error.errno != errno.EADDRINUSE:
                raise
            time.sleep(0.05)
    raise AssertionError("the port stayed in use")


def test_worker_reconnects_to_a_broker_that_went_silent(transport: str, brokers, endpoint_for) -> None:
    first = brokers(transport, [endpoint_for("tcp")], settings=Settings(heartbeat_interval=0.05))
    endpoint = first.endpoint(transport, "tcp")
    worker = Worker(endpoint, "echo", lambda p: p, transport, heartbeat_interval=0.05, liveness=3)
    thread = threading.Thread(target=worker.serve, daemon=True)
    thread.start()
    try:
        with Client(endpoint, transport) as client:
            assert client.request("echo", b"before", timeout=10).payload == b"before"
        first.stop()
        second = rebind(lambda: brokers(transport, [endpoint], settings=Settings(heartbeat_interval=0.05)))
        # waits for the worker (its start-up grace for 404s is three heartbeats: 0.15 s, short on a loaded machine)
        with Client(endpoint, transport, fail_unknown=False) as client:
            assert client.request("echo", b"after", timeout=10).payload == b"after"
        assert worker.reconnects >= 1 and len(second.core.workers) == 1
    finally:
        worker.stop()
        thread.join(10)
    assert not thread.is_alive()


@pytest.mark.parametrize(
    ("result", "named"), [("text", "str"), ({"a": 1}, "dict"), (7, "int"), (None, "NoneType"), ([b"a", 2], "int")]
)
def test_a_result_that_cannot_be_sent_is_a_500_naming_its_type(
    transport: str, result, named: str, brokers, workers, endpoint_for
) -> None:
    broker = brokers(transport, [endpoint_for("inproc")])
    endpoint = broker.endpoint(transport)
    worker = workers(endpoint, transport, "odd", lambda payload: payload if payload == b"fine" else result)
    with Client(endpoint, transport) as client:
        with pytest.raises(WorkerError, match=rf"TypeError: .* is a {named}\b"):
            client.request("odd", b"x", timeout=10)
        assert client.request("odd", b"fine", timeout=10).payload == b"fine"  # it keeps serving
    assert worker.tasks_done == 2


def test_a_stream_that_yields_text_ends_in_a_500(transport: str, brokers, workers, endpoint_for) -> None:
    broker = brokers(transport, [endpoint_for("inproc")])
    endpoint = broker.endpoint(transport)

    def chatty(payload: bytes):
        yield b"one"
        yield "two"

    workers(endpoint, transport, "chatty", chatty)
    with Client(endpoint, transport) as client:
        parts = client.stream("chatty", b"x", timeout=10)
        assert next(parts).payload == b"one"
        with pytest.raises(WorkerError, match="partial result is a str"):
            next(parts)


def test_serve_never_ends_silently(transport: str, brokers, endpoint_for) -> None:
    broker = brokers(transport, [endpoint_for("tcp")])
    context = zmq.Context()
    worker = Worker(broker.endpoint(transport, "tcp"), "echo", lambda p: p, transport, context=context)
    failures: list[BaseException] = []

    def serve() -> None:
        try:
            worker.serve()
        except WorkerStopped as error:
            failures.append(error)

    thread = threading.Thread(target=serve)
    thread.start()
    context.term()  # returns once the worker has closed its socket
    thread.join(20)
    assert not thread.is_alive()
    assert len(failures) == 1 and isinstance(failures[0].__cause__, zmq.ZMQError)


def test_stop_with_finish_sends_the_running_tasks_result_then_leaves(transport: str, brokers, endpoint_for) -> None:
    broker = brokers(transport, [endpoint_for("tcp")])
    endpoint = broker.endpoint(transport, "tcp")
    started, release = threading.Event(), threading.Event()

    def slow(payload: bytes) -> bytes:
        started.set()
        release.wait(20)
        return payload

    worker = Worker(endpoint, "slow", slow, transport)
    thread = threading.Thread(target=worker.serve)
    thread.start()
    with Client(endpoint, transport) as client:
        future = client.submit("slow", b"finished")
        assert started.wait(20)
        worker.stop(finish=True)
        release.set()
        assert future.result(20).payload == b"finished"
        thread.join(20)
        assert not thread.is_alive()
        eventually(lambda: not broker.core.workers, what="the worker to leave")
    assert broker.core.counters["reissued"] == 0


def test_a_worker_stopped_before_its_broker_says_nothing_of_the_brokers_disconnect(brokers, caplog) -> None:
    """The guide's examples end ``worker.stop(); broker.stop()``: the broker's DISCONNECT may reach the worker
    while it leaves, which is no reason to reconnect nor to warn (it did, about one run in three)."""
    import logging
    import uuid

    caplog.set_level(logging.INFO, logger="generaldomo")
    for _ in range(20):
        endpoint = f"inproc://leaving-{uuid.uuid4().hex}"
        broker = brokers("router", [endpoint])
        worker = Worker(endpoint, "report", lambda payload: payload)
        serving = threading.Thread(target=worker.serve, daemon=True)
        serving.start()
        with Client(endpoint) as client:
            assert client.request("report", b"x", timeout=30).payload == b"x"
        worker.stop()
        broker.stop()
        serving.join(30)
        assert not serving.is_alive()
    assert [r.getMessage() for r in caplog.records if "reconnecting" in r.getMessage()] == []

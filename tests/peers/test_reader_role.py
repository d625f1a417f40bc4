"""The Client's reader role: a caller waiting for its reply reads the socket itself, and hands the role back.

Real brokers and workers in threads, over tcp on both transports; every wait is bounded, nothing is timed.
"""

from __future__ import annotations

import os
import signal
import threading
from collections import deque
from concurrent.futures import CancelledError, Future, wait

import pytest
from waiting import eventually

from generaldomo import Client, ClientClosed, Reply, RequestTimeout

pytestmark = pytest.mark.pure  # runs again in env pure, on the pure-Python path


def _slow(release: threading.Event):
    """A handler that answers once ``release`` is set (or after 20 s)."""

    def handler(payload: bytes) -> bytes:
        release.wait(20)
        return payload

    return handler


def _stack(transport: str, brokers, workers, *services: tuple[str, object]) -> str:
    broker = brokers(transport, ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint(transport, "tcp")
    workers(endpoint, transport)
    for name, handler in services:
        workers(endpoint, transport, name, handler)
    return endpoint


def _wait_claiming(future: Future[Reply], outcome: list[BaseException]) -> None:
    """Wait for ``future``, putting what it raised in ``outcome``. A waiter that finds the reader role busy (a
    tick due, a hand-off to the IO thread) waits without reading: this one waits in short turns, claiming it again."""
    for _ in range(120):
        try:
            future.result(0.5)
        except TimeoutError:
            if not future.done():
                continue
        except BaseException as error:
            outcome.append(error)
        return


def test_a_sync_caller_reads_its_own_reply(transport: str, brokers, workers) -> None:
    endpoint = _stack(transport, brokers, workers)
    threads: list[str] = []
    with Client(endpoint, transport) as client:
        for n in range(20):
            future = client.submit("echo", b"%d" % n)
            future.add_done_callback(lambda _: threads.append(threading.current_thread().name))
            assert future.result(30).payload == b"%d" % n
    assert threading.current_thread().name in threads  # resolved where the caller waited, not on the IO thread


def test_many_threads_sync_while_others_pipeline(transport: str, brokers, workers) -> None:
    endpoint = _stack(transport, brokers, workers)
    failures: list[BaseException] = []

    def sync(client: Client, tag: int) -> None:
        for n in range(40):
            payload = b"s%d-%d" % (tag, n)
            assert client.request("echo", payload, timeout=30).payload == payload

    def pipelined(client: Client, tag: int) -> None:
        window: deque[tuple[bytes, Future[Reply]]] = deque()
        for n in range(150):
            payload = b"p%d-%d" % (tag, n)
            window.append((payload, client.submit("echo", payload)))
            if len(window) >= 20:
                sent, future = window.popleft()
                assert future.result(30).payload == sent
        for sent, future in window:
            assert future.result(30).payload == sent

    def guarded(job, client: Client, tag: int) -> None:
        try:
            job(client, tag)
        except BaseException as error:  # reported below
            failures.append(error)

    with Client(endpoint, transport) as client:
        jobs = [(sync, n) for n in range(6)] + [(pipelined, n) for n in range(2)]
        threads = [threading.Thread(target=guarded, args=(job, client, n)) for job, n in jobs]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert not any(thread.is_alive() for thread in threads)
        assert failures == []
        assert client.replies_dropped == 0 and client.resent == 0


def test_a_reader_that_times_out_hands_the_role_back(transport: str, brokers, workers) -> None:
    release = threading.Event()
    endpoint = _stack(transport, brokers, workers, ("slow", _slow(release)))
    # a reader keeps the role that long; no deadline: the broker's 504 would race the client's own timeout
    with Client(endpoint, transport, heartbeat_interval=30, deadlines=False) as client:
        assert client.request("echo", b"warm", timeout=30).payload == b"warm"
        with pytest.raises(RequestTimeout):
            client.request("slow", b"late", timeout=0.3)  # this thread was the reader when its time ran out
        others: list[bytes] = []
        thread = threading.Thread(target=lambda: others.append(client.request("echo", b"other", timeout=30).payload))
        thread.start()
        thread.join(60)
        assert others == [b"other"]
        release.set()
        assert client.request("echo", b"after", timeout=30).payload == b"after"


def test_cancelling_the_future_a_reader_waits_for_wakes_it(transport: str, brokers, workers) -> None:
    release = threading.Event()
    endpoint = _stack(transport, brokers, workers, ("slow", _slow(release)))
    with Client(endpoint, transport, heartbeat_interval=30) as client:  # a reader keeps the role that long
        assert client.request("echo", b"warm", timeout=30).payload == b"warm"
        future = client.submit("slow", b"x")
        outcome: list[BaseException] = []

        waiter = threading.Thread(target=_wait_claiming, args=(future, outcome))
        waiter.start()
        eventually(lambda: client._io._reading, what="the waiter to read")
        assert future.cancel()
        waiter.join(30)
        assert not waiter.is_alive() and len(outcome) == 1 and isinstance(outcome[0], CancelledError)
        release.set()
        assert client.request("echo", b"after", timeout=30).payload == b"after"


def test_a_callback_only_future_after_sync_requests_is_answered(transport: str, brokers, workers) -> None:
    endpoint = _stack(transport, brokers, workers)
    with Client(endpoint, transport) as client:
        for n in range(5):
            assert client.request("echo", b"%d" % n, timeout=30).payload == b"%d" % n
        answered = threading.Event()  # nobody waits in result(): the IO thread must take the lent role back
        client.submit("echo", b"async").add_done_callback(lambda _: answered.set())
        assert answered.wait(30)


def test_closing_the_client_under_a_reader_fails_its_wait(transport: str, brokers, workers) -> None:
    release = threading.Event()
    endpoint = _stack(transport, brokers, workers, ("slow", _slow(release)))
    client = Client(endpoint, transport, heartbeat_interval=30)  # a reader keeps the role that long
    assert client.request("echo", b"warm", timeout=30).payload == b"warm"
    future = client.submit("slow", b"x")
    outcome: list[BaseException] = []

    waiter = threading.Thread(target=_wait_claiming, args=(future, outcome))
    waiter.start()
    eventually(lambda: client._io._reading, what="the waiter to read")
    client.close()
    waiter.join(30)
    release.set()
    assert not waiter.is_alive() and len(outcome) == 1 and isinstance(outcome[0], ClientClosed)


def test_a_stream_stays_in_order_while_another_thread_reads(transport: str, brokers, workers) -> None:
    def counting(payload: bytes):
        for n in range(20):
            yield b"%d" % n
        return b"done"

    endpoint = _stack(transport, brokers, workers, ("count", counting))
    with Client(endpoint, transport) as client:
        stop = threading.Event()

        def sync() -> None:  # takes the reader role again and again while the stream comes in
            while not stop.is_set():
                client.request("echo", b"x", timeout=30)

        reader = threading.Thread(target=sync)
        reader.start()
        try:
            for _ in range(5):
                parts = [reply.payload for reply in client.stream("count", b"", timeout=30)]
                assert parts == [b"%d" % n for n in range(20)] + [b"done"]
        finally:
            stop.set()
            reader.join(30)


def test_ctrl_c_in_a_reading_request_withdraws_it(brokers, workers) -> None:
    release = threading.Event()
    endpoint = _stack("router", brokers, workers, ("slow", _slow(release)))
    with Client(endpoint, "router", heartbeat_interval=30) as client:  # a reader keeps the role that long
        assert client.request("echo", b"warm", timeout=30).payload == b"warm"
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C as Python's default has it
        timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                client.request("slow", b"interrupted", timeout=30)
        finally:
            timer.cancel()
            signal.signal(signal.SIGINT, previous)
        assert not client._session.outstanding  # withdrawn
        release.set()
        assert client.request("echo", b"after", timeout=30).payload == b"after"


def test_a_reader_whose_reply_came_before_it_took_the_role_returns(transport: str, brokers, workers) -> None:
    endpoint = _stack(transport, brokers, workers)
    with Client(endpoint, transport) as client:
        future = client.submit("echo", b"early")
        done, _ = wait([future], 30)  # resolved by the IO thread; nobody waited in result()
        assert done
        got: list[Reply] = []
        # the race: result() saw the future pending, then the IO thread resolved it, then the role was taken
        late = threading.Thread(target=lambda: got.append(client._io._await(future, 60, future.result)))
        late.start()
        late.join(20)  # it must not read on until its 60 s are up
        assert not late.is_alive() and got[0].payload == b"early"

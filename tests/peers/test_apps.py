"""Worker apps: declaring services, loading ``module:attr``, async handlers, errors that reach the client."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest
from app_harness import wait_for_workers
from hypothesis import given
from hypothesis import strategies as st

from generaldomo import App, Client, Reject, RequestFailed, TypedClient, Worker
from generaldomo.peers.app import Bound, load
from generaldomo.peers.pool import make_pool
from generaldomo.sansio.broker.services.resolvers.attributes import AttributeResolver
from generaldomo.sansio.peer import serializers


def test_services_are_declared_by_name_or_attributes() -> None:
    app = App("demo")

    @app.service("fft")
    def fft(payload: bytes) -> bytes:
        return payload

    @app.service({"service": "fft-gpu", "gpu": "a100"}, serializer="json")
    def fft_gpu(value: object) -> object:
        return value

    assert fft(b"x") == b"x"  # the decorator returns the function unchanged
    assert [(s.name, s.description) for s in app.services] == [
        ("fft", b"fft"),
        ("fft-gpu", json.dumps({"gpu": "a100", "service": "fft-gpu"}, separators=(",", ":")).encode()),
    ]
    assert app.services[1].serializer is serializers.JSON and app.services[0].serializer is None
    assert app.select(["fft-gpu"]) == (app.services[1],)
    with pytest.raises(LookupError, match=r"no service 'fttf' \(it has \['fft', 'fft-gpu'\]\)$"):
        app.select(["fttf"])
    with pytest.raises(LookupError, match=r"no service 'fft-gpy' .*; did you mean 'fft-gpu'\?"):
        app.select(["fft", "fft-gpy"])
    with pytest.raises(ValueError, match="already has a service named 'fft'"):
        app.add("fft", fft)


def test_load_takes_an_app_a_module_or_a_handler_function(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "userapp.py").write_text(
        "from generaldomo import App\n"
        "app = App('user')\n"
        "@app.service('hello')\n"
        "def hello(payload):\n"
        "    return b'hello ' + payload\n"
        "def shout(payload):\n"
        "    return payload.upper()\n"
        "number = 3\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    assert [s.name for s in load("userapp:app").services] == ["hello"]
    assert load("userapp") is load("userapp:app")
    single = load("userapp:shout")
    assert [(s.name, s.description) for s in single.services] == [("shout", b"shout")]
    assert Bound(single.services[0])(b"hi") == b"HI"
    assert [s.description for s in single.select(['{"service": "shout"}'])] == [b'{"service": "shout"}']
    with pytest.raises(LookupError, match="serves one description"):
        single.select(["a", "b"])
    with pytest.raises(LookupError, match="has no attribute 'nope'"):
        load("userapp:nope")
    with pytest.raises(TypeError, match="is a int, not an App or a handler function"):
        load("userapp:number")
    with pytest.raises(ModuleNotFoundError):
        load("no_such_module_here:app")


marked = st.sampled_from([None, "json", "msgpack", "pickle"]).map(
    lambda name: [] if name is None else [serializers.MARKER + name.encode()]
)
bodies = st.lists(st.binary(max_size=16) | st.sampled_from([b"1", b'"x"', b"\x01", b"{}"]), max_size=3)


@given(marked, bodies, st.sampled_from([None, "json", "msgpack"]))
def test_a_handler_only_ever_gets_its_own_content_type(head: list[bytes], body: list[bytes], name: str | None) -> None:
    frames = tuple(head + body) or (b"",)
    calls: list[object] = []
    service = App("p").add("s", lambda value: calls.append(value), serializer=name)
    sent = serializers.content_type(frames)
    try:
        Bound(service)(frames[0] if len(frames) == 1 else frames)
    except Reject as rejected:
        assert not calls
        assert rejected.status == (400 if sent == name else 415)
        return
    assert sent == name
    expected = (
        (frames[0] if len(frames) == 1 else frames) if name is None else serializers.decode(service.serializer, frames)
    )
    assert calls == [expected]


def test_async_handlers_run_on_the_slots_own_loop(transport: str, brokers) -> None:
    broker = brokers(transport, ["tcp://127.0.0.1:*"], resolver=AttributeResolver())
    endpoint = broker.endpoint(transport, "tcp")
    pool = make_pool(load("tests.apps:aio"), endpoint, transport, concurrency=1)
    pool.start()
    try:
        with Client(endpoint, transport) as client:
            wait_for_workers(client, {'{"kind":"async","service":"wait"}': 1, '{"service":"count"}': 1})
            waiter = TypedClient(client, "json")
            first, second = (waiter.request({"service": "wait"}, 0.01, timeout=30) for _ in range(2))
            assert first["slept"] == 0.01 and first["loop"] == second["loop"]  # one loop per slot, kept
            counter = TypedClient(client, "msgpack")
            assert list(counter.stream({"service": "count"}, 4, timeout=30)) == [0, 1, 2, 3, None]
    finally:
        pool.stop(grace=5.0)


def test_a_failing_handler_gives_500_with_type_and_message_and_the_slot_serves_on(transport: str, brokers) -> None:
    broker = brokers(transport, ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint(transport, "tcp")
    pool = make_pool(load("tests.apps:faults"), endpoint, transport, services=["fail"])
    pool.start()
    try:
        with Client(endpoint, transport) as client:
            typed = TypedClient(client, "msgpack")
            for value in ("one", "two"):
                with pytest.raises(RequestFailed, match=f"500: ValueError: cannot take '{value}'") as failure:
                    typed.request("fail", value, timeout=30)
                assert int(failure.value.status) == 500
            with pytest.raises(RequestFailed, match="422: no thanks") as failure:
                typed.request("fail", "reject", timeout=30)
            assert int(failure.value.status) == 422
    finally:
        assert pool.stop(grace=5.0) == 0


def test_worker_stop_with_finish_sends_the_running_tasks_result(transport: str, brokers) -> None:
    broker = brokers(transport, ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint(transport, "tcp")
    started, release = threading.Event(), threading.Event()

    def held(payload: bytes) -> bytes:
        started.set()
        release.wait(30)
        return payload + b" done"

    worker = Worker(endpoint, "held", held, transport)
    thread = threading.Thread(target=worker.serve, daemon=True)
    thread.start()
    with Client(endpoint, transport) as client:
        future = client.submit("held", b"task")
        assert started.wait(30)
        worker.stop(finish=True)
        release.set()
        assert future.result(30).payload == b"task done"
    thread.join(30)
    assert not thread.is_alive()
    assert broker.core.counters["reissued"] == 0

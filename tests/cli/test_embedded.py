"""What ``generaldomo::EmbeddedBroker`` asks of Python (generaldomo.cli.embedded), and a broker's draining stop.

The C++ side is tested in tests/cpp/test_one_program.py; here the same module is driven from Python, on a context
given by its address as the C++ code gives it, and the core's and the loop's part of a stop that loses nothing.
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import zmq
from waiting import eventually

from generaldomo import Broker, Client, RequestFailed, ServiceUnavailable, cpp
from generaldomo.cli.embedded import EmbeddedBroker, build_flags, flags, read_config
from generaldomo.errors import SettingsError
from generaldomo.io import keys
from generaldomo.sansio.broker.core import BrokerCore, Peer
from generaldomo.sansio.wire import protocol

WAIT = 60.0


def test_settings_are_the_broker_commands_flags() -> None:
    pairs = [("server", "inproc://a"), ("router", "tcp://127.0.0.1:*"), ("flow", "echo:rate=5"), ("beacon", "true")]
    pairs += [("max_message", "100"), ("--liveness", "4"), ("metrics-port", "0"), ("verbose", "1")]
    assert flags(pairs) == [
        "--server", "inproc://a", "--router", "tcp://127.0.0.1:*", "--flow", "echo:rate=5", "--beacon",
        "--max-message", "100", "--liveness", "4", "--metrics-port", "0", "--verbose", "1",
    ]  # fmt: skip
    assert flags([("beacon", "false"), ("flow", "a:rate=1"), ("flow", "b:rate=2")]) == [
        "--flow", "a:rate=1", "--flow", "b:rate=2",
    ]  # fmt: skip
    with pytest.raises(SettingsError, match=r"unknown broker setting 'serve' .*--serve"):
        flags([("serve", "inproc://a")])
    with pytest.raises(SettingsError, match="true or false"):
        flags([("beacon", "maybe")])


def test_a_configuration_file_is_read_before_the_pairs(tmp_path: Path) -> None:
    config = tmp_path / "broker.conf"
    config.write_text("# the broker of app X\n\nserver = inproc://x\nrouter tcp://127.0.0.1:*\nflow=echo:rate=5\n")
    assert read_config(config) == [("server", "inproc://x"), ("router", "tcp://127.0.0.1:*"), ("flow", "echo:rate=5")]
    (tmp_path / "bad.conf").write_text("= value\n")
    with pytest.raises(SettingsError, match=r"bad\.conf:1: no key"):
        read_config(tmp_path / "bad.conf")


def test_embedded_broker_on_a_context_address_serves_and_stops(tmp_path: Path) -> None:
    context = zmq.Context()
    config = tmp_path / "broker.conf"
    config.write_text("server = inproc://embedded-test\n")
    embedded = EmbeddedBroker(context.underlying, [("router", "tcp://127.0.0.1:*"), ("flow", "echo:concurrency=1")],
                              str(config))  # fmt: skip
    assert [t for t, _ in embedded.endpoints] == ["router", "server"]
    assert embedded.context.underlying == context.underlying
    thread = threading.Thread(target=embedded.run)
    thread.start()
    try:
        with Client("inproc://embedded-test", "server", context=context) as client:
            assert client.flow("echo")["concurrency"] == 1
    finally:
        embedded.stop(0.0)
        thread.join(WAIT)
    assert not thread.is_alive()
    context.term()  # every socket the broker made on the application's context is closed


def test_an_embedded_broker_speaks_curve_on_the_applications_context(keydir: Path) -> None:
    """CURVE settings as the command line takes them; the ZAP handler runs on the application's context."""
    context = zmq.Context()
    settings = [("router", "tcp://127.0.0.1:*"), ("curve-secret", str(keydir / "broker.key_secret"))]
    settings += [("clients", str(keydir / "clients")), ("workers", str(keydir / "workers"))]
    embedded = EmbeddedBroker(context.underlying, settings)
    thread = threading.Thread(target=embedded.run)
    thread.start()
    try:
        broker_key = keys.load_public(keydir / "broker.key")
        client_keys = keys.load_secret(keydir / "client.key_secret")
        endpoint = embedded.broker.endpoint("router", "tcp")
        with Client(endpoint, "router", server_key=broker_key, keys=client_keys) as client:
            assert client.request("mmi.service", b"echo", timeout=WAIT).payload == b"404"
    finally:
        embedded.stop(0.0)
        thread.join(WAIT)
    context.term()


def test_an_embedded_broker_serves_its_metrics(caplog: pytest.LogCaptureFixture) -> None:
    context = zmq.Context()
    with caplog.at_level(logging.INFO, logger="generaldomo.cli.embedded"):
        embedded = EmbeddedBroker(context.underlying, [("router", "tcp://127.0.0.1:*"), ("metrics-port", "0")])
    url = next(r.getMessage().split()[1] for r in caplog.records if r.getMessage().startswith("metrics "))
    thread = threading.Thread(target=embedded.run)
    thread.start()
    try:
        text = eventually(lambda: _metrics(url), WAIT, "the metrics served")
        assert "generaldomo_workers" in text
    finally:
        embedded.stop(0.0)
        thread.join(WAIT)
    context.term()


def _metrics(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.read().decode()
    except OSError:
        return ""


def test_a_broker_that_cannot_bind_leaves_no_socket_open() -> None:
    context = zmq.Context()
    with zmq.Context() as other, other.socket(zmq.ROUTER) as taken:
        taken.linger = 0
        port = taken.bind_to_random_port("tcp://127.0.0.1")
        with pytest.raises(zmq.ZMQError):  # the second link cannot bind: the first one is closed again
            EmbeddedBroker(context.underlying, [("router", "tcp://127.0.0.1:*"), ("server", f"tcp://127.0.0.1:{port}")])
    context.term()  # would block on a socket left open


def test_build_flags_name_pyzmqs_libzmq_and_this_python(tmp_path: Path) -> None:
    from zmq.backend.cython import _zmq

    found = build_flags(tmp_path)
    assert found.include[:2] == [f"-I{cpp.include_dir()}", f"-I{tmp_path / 'include'}"]
    assert found.libzmq[0] == str(Path(_zmq.__file__).resolve())
    assert any(flag.startswith("-lpython3") for flag in found.python)
    assert found.libs == [*found.libzmq, *found.python]


# ------------------------------------------------------------------------------------------ the draining stop


def test_core_abandon_answers_every_held_request() -> None:
    core = BrokerCore(random=lambda n: bytes(n))
    ids = iter(range(1, 100))
    core._random = lambda n: next(ids).to_bytes(n, "big")  # distinct task ids
    worker, client = Peer(0, b"w"), Peer(0, b"c")
    core.receive(worker, protocol.gdp_ready(b"echo"), 0.0)
    for n in range(3):  # one running, two queued
        core.receive(client, protocol.gdp_request(b"r%d" % n, b"echo", [b"x"]), 0.0)
    core.stop_accepting()
    refused = core.receive(client, protocol.gdp_request(b"late", b"echo", [b"x"]), 0.0)
    assert [protocol.parse_client_reply(frames)[:2] for _, frames in refused] == [(b"late", protocol.UNAVAILABLE)]
    answered = core.abandon(1.0)
    replies = sorted(protocol.parse_client_reply(frames)[:2] for peer, frames in answered if peer == client)
    assert replies == [(b"r0", protocol.UNAVAILABLE), (b"r1", protocol.UNAVAILABLE), (b"r2", protocol.UNAVAILABLE)]
    assert not core.tasks and core.counters["abandoned"] == 3
    assert core.close() == [(worker, protocol.worker_command(protocol.Dialect.GDP, protocol.DISCONNECT))]


@pytest.mark.parametrize("drain", [0.0, WAIT])
def test_broker_stop_with_drain_loses_no_request(workers, drain: float) -> None:
    broker = Broker("router", ["tcp://127.0.0.1:*"]).start()
    endpoint = broker.endpoint("router")

    def slow(payload: bytes) -> bytes:
        time.sleep(0.05)
        return payload

    workers(endpoint, "router", "echo", slow)
    with Client(endpoint, "router") as client:
        futures = [client.submit("echo", b"%d" % n) for n in range(20)]
        eventually(lambda: broker.core.counters["requests"] == 20, WAIT, "all 20 queued")
        broker.stop(WAIT, drain=drain)
        answered = failed = 0
        for n, future in enumerate(futures):
            try:
                assert future.result(WAIT).payload == b"%d" % n
                answered += 1
            except ServiceUnavailable as error:
                assert isinstance(error, RequestFailed) and error.reason.startswith("the broker stop")
                failed += 1
    assert answered + failed == 20
    assert failed == 0 if drain else failed > 0

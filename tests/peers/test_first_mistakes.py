"""The commonest mistakes, as the Python API meets them: each is answered at once, saying what to do.

A wrong endpoint or port (nothing accepts connections there), a service name typo, the wrong transport and no
draft support: each call below is given a timeout of 60 s that it must not reach (the answer comes from
libzmq's connection events or the broker's ``404``, not from a timer), and the error names the fix. The
opt-outs (``fail_unreachable=False``, ``fail_unknown=False``) wait instead, for a broker or a worker that
starts later. The command line's side is tests/cli/test_first_mistakes_cli.py.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from transports import TRANSPORTS, free_tcp_endpoint, unbound_endpoint
from waiting import eventually

from generaldomo import (
    Broker,
    BrokerUnreachable,
    Client,
    HandshakeFailed,
    NotFound,
    RequestExpired,
    RequestTimeout,
    Settings,
    Worker,
)

NEVER = 60.0  # seconds a call may wait: the old behaviour waited this long; the answer must come first
QUICK = Settings(heartbeat_interval=0.2, liveness=3)  # a broker whose start-up grace for 404s is 1.2 s


def endpoints(tmp_path: Path) -> list[str]:
    return [free_tcp_endpoint(), f"ipc://{tmp_path}/nobody-here.sock"]


@pytest.mark.pure
def test_a_wrong_endpoint_is_reported_at_once(tmp_path: Path) -> None:
    for endpoint in endpoints(tmp_path):
        with Client(endpoint) as client:
            with pytest.raises(BrokerUnreachable) as caught:
                client.request("echo", b"hi", timeout=NEVER)
            message = str(caught.value)
            assert f"nothing accepts connections at {endpoint}" in message
            assert "fail_unreachable=False" in message and caught.value.kind == "unreachable"
            assert isinstance(caught.value, HandshakeFailed | ConnectionError)
            with pytest.raises(BrokerUnreachable):  # the next call is answered at once too
                client.status(timeout=NEVER)


def test_a_wrong_endpoint_is_reported_over_the_server_transport_too(tmp_path: Path) -> None:
    with Client(f"ipc://{tmp_path}/nobody.sock", "server") as client:
        with pytest.raises(BrokerUnreachable, match="nothing accepts connections"):
            client.request("echo", b"hi", timeout=NEVER)


def test_a_client_told_to_wait_for_its_broker_waits(tmp_path: Path) -> None:
    endpoint = f"ipc://{tmp_path}/later.sock"
    with Client(endpoint, fail_unreachable=False) as client:
        future = client.submit("echo", b"hello")
        eventually(lambda: client.connection_refused, what="a refused connection attempt")
        eventually(lambda: client._channel.handshake.refusals >= 8, what="refusals past the fail-fast count")
        assert not future.done()
        with Broker("router", [endpoint]).start() as broker:
            worker = Worker(endpoint, "echo", lambda payload: payload)
            thread = threading.Thread(target=worker.serve, daemon=True)
            thread.start()
            try:
                assert future.result(NEVER).payload == b"hello"
            finally:
                worker.stop()
                thread.join(30)
            assert broker.serving


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("scheme", ["ipc", "tcp"])
def test_a_worker_and_a_client_started_before_their_broker_are_served(tmp_path: Path, scheme: str, transport: str):
    """Both have found nothing there (the worker's failure, the client's refused attempts) and reconnected on
    silence before the broker binds; then the worker registers (its failure cleared, still counted) and the
    client gets its answer."""
    endpoint = unbound_endpoint(scheme, tmp_path, "late")
    worker = Worker(endpoint, "echo", lambda payload: payload, transport, heartbeat_interval=0.2, liveness=3)
    thread = threading.Thread(target=worker.serve, daemon=True)
    thread.start()
    quick = {"heartbeat_interval": 0.2, "fail_unreachable": False, "fail_unknown": False}
    try:
        with Client(endpoint, transport, **quick) as client:  # type: ignore[arg-type]
            future = client.submit("echo", b"hello")
            eventually(lambda: worker.handshake_failure, timeout=NEVER, what="the worker's failure")
            reconnected = lambda: worker.reconnects and client.reconnects and client.connection_refused  # noqa: E731
            eventually(reconnected, timeout=NEVER, what="both reconnected, still refused")
            assert not future.done() and not worker.registered
            with Broker(transport, [endpoint], settings=QUICK).start():
                assert future.result(NEVER).payload == b"hello"
                eventually(lambda: worker.registered, timeout=NEVER, what="the worker's registration")
                eventually(lambda: worker.handshake_failure is None, timeout=NEVER, what="the failure cleared")
                assert worker.handshake_failures >= 1 and worker.handshake_failure is None
    finally:
        worker.stop()
        thread.join(30)
    assert not thread.is_alive()


def test_a_broker_that_starts_later_clears_the_failure(tmp_path: Path) -> None:
    endpoint = f"ipc://{tmp_path}/late.sock"
    with Client(endpoint) as client:
        with pytest.raises(BrokerUnreachable):
            client.request("mmi.status", timeout=NEVER)
        with Broker("router", [endpoint]).start():
            report = eventually(lambda: _status_or_none(client), timeout=NEVER, what="the broker's report")
            assert "broker" in report


def _status_or_none(client: Client) -> dict | None:
    try:
        return client.status(timeout=NEVER)
    except BrokerUnreachable:
        return None


def test_a_worker_says_at_once_that_nothing_accepts_connections(tmp_path: Path, caplog) -> None:
    endpoint = f"ipc://{tmp_path}/no-broker.sock"
    worker = Worker(endpoint, "echo", lambda payload: payload)
    thread = threading.Thread(target=worker.serve, daemon=True)
    with caplog.at_level(logging.WARNING, logger="generaldomo.peers.worker"):
        thread.start()
        try:  # the old warning came after the broker's silence (about 15 s); the monitor's refusals come at once
            failure = eventually(lambda: worker.handshake_failure, timeout=10, what="the worker's warning")
        finally:
            worker.stop()
            thread.join(30)
    assert failure.kind == "unreachable" and f"nothing accepts connections at {endpoint}" in failure.cause
    assert any("nothing accepts connections" in record.getMessage() for record in caplog.records)


def _serve(endpoint: str, service: str) -> tuple[Worker, threading.Thread]:
    worker = Worker(endpoint, service, lambda payload: payload, heartbeat_interval=0.2, liveness=3)
    thread = threading.Thread(target=worker.serve, daemon=True)
    thread.start()
    return worker, thread


def test_a_service_name_typo_is_answered_at_once_with_the_nearest_name(tmp_path: Path) -> None:
    endpoint = f"ipc://{tmp_path}/typo.sock"
    with Broker("router", [endpoint], settings=QUICK).start():
        worker, thread = _serve(endpoint, "shout")
        try:
            eventually(lambda: worker.registered, what="the worker's registration")
            with Client(endpoint, heartbeat_interval=0.2) as client:
                with pytest.raises(NotFound) as caught:
                    client.request("shuot", b"hi", timeout=NEVER)
                assert "did you mean 'shout'?" in str(caught.value)
                assert client.request("shout", b"hi", timeout=NEVER).payload == b"hi"
        finally:
            worker.stop()
            thread.join(30)


def test_a_client_told_to_wait_for_its_workers_waits(tmp_path: Path) -> None:
    endpoint = f"ipc://{tmp_path}/wait.sock"
    with Broker("router", [endpoint], settings=QUICK).start():
        with Client(endpoint, heartbeat_interval=0.2, fail_unknown=False) as client:
            future = client.submit("later", b"hi")
            assert client.request("mmi.service", b"later", timeout=NEVER).payload == b"404"
            with pytest.raises(RequestTimeout):  # still queued past the broker's grace: nobody serves it yet
                client.request("later", b"x", timeout=2.0)
            worker, thread = _serve(endpoint, "later")
            try:
                assert future.result(NEVER).payload == b"hi"
            finally:
                worker.stop()
                thread.join(30)


@pytest.mark.parametrize(("ours", "theirs"), [("server", "router"), ("router", "server")])
def test_the_wrong_transport_is_answered_at_once(tmp_path: Path, ours: str, theirs: str) -> None:
    endpoint = f"ipc://{tmp_path}/{theirs}.sock"
    with Broker(theirs, [endpoint]).start(), Client(endpoint, ours) as client:
        with pytest.raises(HandshakeFailed) as caught:
            client.request("echo", b"hi", timeout=NEVER)
    assert f"--transport {theirs}" in str(caught.value) and not isinstance(caught.value, BrokerUnreachable)


def test_no_draft_support_is_answered_at_once_with_the_install_command() -> None:
    code = (  # a pyzmq whose libzmq has no draft API: zmq.has("draft") is False there
        "import zmq; zmq.has = lambda feature: False\n"
        "from generaldomo import Client, DraftUnavailable\n"
        "try:\n"
        "    Client('tcp://127.0.0.1:5999', 'server')\n"
        "except DraftUnavailable as error:\n"
        "    print(error)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=NEVER)
    assert result.returncode == 0, result.stderr
    assert "draft" in result.stdout and "-m generaldomo.draft ensure" in result.stdout


def test_a_stopped_worker_s_service_times_out_one_way_whichever_side_gives_up_first(tmp_path: Path) -> None:
    """With its only worker stopped, a request to a service that had one waits (the worker may come back); when
    its timeout (which is also its deadline) passes, the broker's 504 and the client's own wait end at the same
    moment: ``request`` raises RequestTimeout either way, with the broker's reason when its 504 came first."""
    endpoint = f"ipc://{tmp_path}/stopped.sock"
    with Broker("router", [endpoint], settings=QUICK).start():
        worker, thread = _serve(endpoint, "echo")
        with Client(endpoint, heartbeat_interval=0.2) as client:
            assert client.request("echo", b"hi", timeout=NEVER).payload == b"hi"
            worker.stop()
            thread.join(30)
            eventually(lambda: client.request("mmi.service", b"echo", timeout=NEVER).payload == b"404")
            expired = client.submit("echo", b"x", deadline=0.3).exception(NEVER)  # the broker's 504, first
            assert isinstance(expired, RequestExpired) and expired.reason.startswith("the request's deadline")
            with pytest.raises(RequestTimeout, match="the broker: the request's deadline") as caught:
                client.pause_after(expired, "echo", 0.3, time.monotonic())
            assert caught.value.__cause__ is expired
            for _ in range(4):  # whichever side gives up first
                with pytest.raises(RequestTimeout, match=r"no reply to 'echo' within 0\.3 s"):
                    client.request("echo", b"x", timeout=0.3)

"""Embedding the broker in an application."""

from __future__ import annotations

import pytest

from generaldomo import Broker, Client

pytestmark = pytest.mark.pure  # runs again in env pure, on the pure-Python path


def test_embedded_broker_start_stop_and_endpoints(transport: str, workers, endpoint_for) -> None:
    broker = Broker(transport, [endpoint_for("inproc"), endpoint_for("tcp")])
    assert [t for t, _ in broker.endpoints] == [transport, transport]
    with broker.start():
        workers(broker.endpoint(transport, "inproc"), transport)
        with Client(broker.endpoint(transport, "tcp"), transport) as client:
            assert client.request("echo", b"embedded", timeout=10).payload == b"embedded"
        with pytest.raises(RuntimeError):
            broker.add_link("router", [endpoint_for("tcp")])
    assert not broker._thread.is_alive()


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="unknown transport"):
        Broker("carrier-pigeon", ["tcp://127.0.0.1:*"])
    with pytest.raises(RuntimeError, match="no link"):
        Broker().run()
    with pytest.raises(LookupError):
        Broker("router", ["tcp://127.0.0.1:*"]).endpoint("router", "ipc")

"""docs/status.schema.json describes the mmi.status report a real broker sends."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from generaldomo import Broker, Client, RequestFailed, Worker

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "docs" / "status.schema.json").read_text())


def fail(payload: bytes | tuple[bytes, ...]) -> bytes:
    raise ValueError("the handler failed")


@pytest.fixture
def report(workers: Callable[..., Worker]) -> Iterator[dict[str, Any]]:
    """A two-link broker's status after a success, a failure and a change of flow limits, over two services."""
    broker = Broker("router", ["tcp://127.0.0.1:*"])
    broker.add_link("server", ["tcp://127.0.0.1:*"])
    broker.start()
    try:
        workers(broker.endpoint("server", "tcp"), "server", "echo")
        workers(broker.endpoint("router", "tcp"), "router", "broken", fail)
        with Client(broker.endpoint("router", "tcp"), "router") as client:
            assert client.request("echo", b"hi", timeout=10).payload == b"hi"
            with pytest.raises(RequestFailed):
                client.request("broken", b"x", timeout=10)
            client.flow("echo", rate=5, burst=2, concurrency=3)
            yield client.status(timeout=10)
    finally:
        broker.stop()


def test_the_schema_is_a_valid_json_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_a_real_report_matches_the_schema(report: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator(SCHEMA).validate(report)
    assert {service["name"] for service in report["services"]} >= {"echo", "broken"}
    assert len(report["workers"]) == 2
    assert {endpoint["transport"] for endpoint in report["broker"]["endpoints"]} == {"router", "server"}


@pytest.mark.parametrize(
    ("path", "bad"),
    [(("broker", "uptime"), "long"), (("services", 0, "queue_time"), None), (("workers", 0, "state"), "asleep")],
)
def test_the_schema_rejects_a_report_that_breaks_it(report: dict[str, Any], path: tuple[Any, ...], bad: Any) -> None:
    broken = copy.deepcopy(report)
    target = broken
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = bad
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(SCHEMA).validate(broken)

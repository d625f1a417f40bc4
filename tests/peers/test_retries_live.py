"""Retry policies through the user's interfaces, on both transports: a handler's ``Reject(503, retry=True)`` and a
policy set with ``generaldomo flow SERVICE --retry`` (``Client.flow``), served by ``Worker`` in a thread and by
``generaldomo worker`` in pool processes, answered once, within the deadline; attempts in the status report."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import jsonschema
import pytest
from app_harness import start_pool, wait_for_workers
from cli_processes import run

from generaldomo import Client, Reject, Worker
from generaldomo.errors import RequestTimeout, ServiceUnavailable, WorkerError

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "docs" / "status.schema.json").read_text())


def service(report: dict, name: str) -> dict:
    return next(s for s in report["services"] if s["name"] == name)


def test_a_flaky_handler_is_retried_to_success_and_answered_once(transport: str, brokers, endpoint_for) -> None:
    broker = brokers(transport, [endpoint_for("ipc")])
    endpoint = broker.endpoint(transport, "ipc")
    calls: list[bytes] = []
    lock = threading.Lock()

    def flaky(payload: bytes) -> bytes:
        with lock:
            calls.append(payload)
            count = calls.count(payload)
        if count <= 2:
            raise Reject(503, f"attempt {count}: upstream unreachable", retry=True)
        return payload + b" on attempt %d" % count

    worker = Worker(endpoint, "flaky", flaky, transport)
    thread = threading.Thread(target=worker.serve, daemon=True)
    thread.start()
    try:
        with Client(endpoint, transport) as client:
            assert client.request("flaky", b"x", timeout=60).payload == b"x on attempt 3"
            report = client.status()
            jsonschema.Draft202012Validator(SCHEMA).validate(report)
            flaky_ = service(report, "flaky")
            assert (flaky_["retried"], flaky_["delayed"], flaky_["completed"], flaky_["failed"]) == (2, 0, 1, 0)
            assert report["broker"]["counters"]["retried"] == 2
            # no retries: the handler's 503 goes to the client, without the broker's mark
            assert client.flow("flaky", retry={"retries": 0})["retry"]["retries"] == 0
            with pytest.raises(ServiceUnavailable) as failed:
                client.request("flaky", b"y", timeout=60)
            assert failed.value.reason == "attempt 1: upstream unreachable"
    finally:
        worker.stop()
        thread.join(30)


def test_the_cli_sets_a_policy_that_pool_processes_are_retried_by(transport: str, brokers, tmp_path: Path) -> None:
    broker = brokers(transport, ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint(transport, "tcp")
    base = ["flow", "raises", "--transport", transport, "--connect", endpoint]
    bad = run(*base, "--retry", "retries=500")
    assert bad.returncode == 2 and "retry count" in bad.stderr and "500" in bad.stderr
    done = run(*base, "--retry", "retries=2/backoff=0.05..0.2/statuses=500", "--create")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["retry"] == {"retries": 2, "backoff": {"min": 0.05, "max": 0.2}, "statuses": [500]}
    pool = start_pool(
        "tests.retry_apps:app", endpoint, transport, tmp_path / "pool.log", "--pool", "process", "--concurrency", "2"
    )
    try:
        with Client(endpoint, transport) as client:
            wait_for_workers(client, {"raises": 2, "marked": 2})
            assert client.request("raises", f"{tmp_path}|a|2".encode(), timeout=60).payload == b"3"
            with pytest.raises(WorkerError, match="attempt 3 failed"):  # its retries run out: the last answer
                client.request("raises", f"{tmp_path}|b|5".encode(), timeout=60)
            assert client.request("marked", f"{tmp_path}|c|3".encode(), timeout=60).payload == b"4"  # the defaults
            raises, marked = (service(client.status(), name) for name in ("raises", "marked"))
        assert (raises["retried"], raises["completed"], marked["retried"]) == (4, 2, 3)
        assert [len(list(tmp_path.glob(f"{task}.*"))) for task in "abc"] == [3, 3, 4]
        shown = run(*base)
        assert shown.returncode == 0 and json.loads(shown.stdout)["retry"]["retries"] == 2
    finally:
        pool.terminate()
        pool.wait(60)


def test_a_retry_that_would_end_past_the_deadline_is_the_requests_timeout(
    transport: str, brokers, endpoint_for, tmp_path: Path
) -> None:
    broker = brokers(transport, [endpoint_for("ipc")])
    endpoint = broker.endpoint(transport, "ipc")
    with Client(endpoint, transport) as client:
        client.flow("marked", retry={"backoff": {"min": 600, "max": 600}})
    pool = start_pool("tests.retry_apps:app", endpoint, transport, tmp_path / "pool.log", "--service", "marked")
    try:
        with Client(endpoint, transport) as client:
            wait_for_workers(client, {"marked": 1})
            with pytest.raises(RequestTimeout, match="deadline would pass before its retry"):
                client.request("marked", f"{tmp_path}|a|1".encode(), timeout=30)
            counters = client.status()["broker"]["counters"]
        assert counters["retries_past_deadline"] == 1 and "retried" not in counters
        assert len(list(tmp_path.glob("a.*"))) == 1
    finally:
        pool.terminate()
        pool.wait(60)

"""The delayed-requests how-to's examples run as written."""

from __future__ import annotations

import contextlib
import io
import threading
from pathlib import Path

from doc_blocks import named
from doc_session import run
from waiting import served_at

from generaldomo import Broker, Worker


def test_the_shell_example_runs(tmp_path: Path) -> None:
    out = run(named("delayed-commands"), tmp_path)
    assert out.splitlines()[-2:] == ["half a second later", "on time"]


def test_the_python_example_runs() -> None:
    broker = Broker("router", ["tcp://127.0.0.1:*"]).start()
    endpoint = broker.endpoint("router", "tcp")
    worker = Worker(endpoint, "echo", lambda payload: payload)
    thread = threading.Thread(target=worker.serve, daemon=True)
    thread.start()
    try:
        served_at(endpoint, "echo")
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(named("delayed-client").replace("tcp://127.0.0.1:5555", endpoint), {})
        assert printed.getvalue().splitlines() == ["b'now'", "b'at a time' b'in a second'", "True"]
    finally:
        worker.stop()
        thread.join(10)
        broker.stop()


def test_the_deadline_dispatch_example_runs() -> None:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(named("deadline-dispatch"), {"__name__": "deadline_dispatch"})
    assert printed.getvalue().splitlines() == ["RequestExpired True", "b'in time'"]

"""Issue 10's lost-answer scenarios, end to end: every future of a live client resolves while the broker lives.

Both need the broker side of kept answers and re-asks (round 2); they skip, saying so, when the broker's
``mmi.status`` settings lack ``keep_answers``.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from generaldomo import Client, RequestExpired
from generaldomo.sansio.config.settings import Settings


def needs_kept_answers(client: Client) -> None:
    if "keep_answers" not in client.status()["broker"]["settings"]:
        pytest.skip("needs the broker side of kept answers and re-asks (keep_answers in mmi.status)")


def test_ten_thousand_expiries_all_reach_the_client(transport: str, brokers) -> None:
    settings = Settings(heartbeat_interval=0.25, queue_timeout=1.0)
    broker = brokers(transport, ["tcp://127.0.0.1:*"], settings=settings)
    with Client(broker.endpoint(transport, "tcp"), transport, heartbeat_interval=0.25, fail_unknown=False) as client:
        needs_kept_answers(client)
        futures = [client.submit("nobody-serves-this", b"x") for _ in range(10_000)]
        deadline = time.monotonic() + 180
        for future in futures:
            with pytest.raises(RequestExpired):
                future.result(max(1.0, deadline - time.monotonic()))


CLIENT = """
import json, sys, time
from generaldomo import Client
endpoint, transport = sys.argv[1:3]
with Client(endpoint, transport, heartbeat_interval=0.25, fail_unknown=False) as client:
    futures = [client.submit("echo", b"%06d" % n + b"x" * 4090) for n in range(5000)]
    print("submitted", flush=True)
    results = [future.result(240).payload[:6] for future in futures]
    ok = results == [b"%06d" % n for n in range(5000)]
    print(json.dumps({"ok": ok, "resent": client.resent, "dropped": client.replies_dropped}), flush=True)
"""


def test_a_client_paused_while_its_answers_arrive_gets_them_all(transport: str, brokers, workers) -> None:
    broker = brokers(transport, ["tcp://127.0.0.1:*"], settings=Settings(heartbeat_interval=0.25))
    endpoint = broker.endpoint(transport, "tcp")
    with Client(endpoint, transport) as client:
        needs_kept_answers(client)
    for _ in range(2):
        workers(endpoint, transport, heartbeat_interval=0.25)
    command = [sys.executable, "-c", CLIENT, endpoint, transport]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "submitted"
        process.send_signal(signal.SIGSTOP)  # the answers pile up in front of a client that reads nothing
        time.sleep(6)
        process.send_signal(signal.SIGCONT)
        outcome, _ = process.communicate(timeout=300)
    finally:
        process.kill()
    summary = json.loads(outcome.strip().splitlines()[-1])
    assert summary["ok"] and summary["dropped"] == 0, summary

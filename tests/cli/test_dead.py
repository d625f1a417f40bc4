"""``generaldomo dead`` through the command, both transports, a worker served by ``generaldomo worker``: a poison
task kept as a dead letter, shown, replayed after the fix and answered once; letters dropped; the status report
(against docs/status.schema.json), ``generaldomo status`` and the metrics; the admin role under CURVE."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import jsonschema
import pytest
from app_harness import start_pool, wait_for_workers
from cli_processes import expect, lines, run, spawn
from metrics_page import wait_for

from generaldomo import Client, RequestFailed

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "docs" / "status.schema.json").read_text())


def dead(transport: str, endpoint: str, *args: str) -> list[dict]:
    """``generaldomo dead ARGS``, which must succeed: its JSON lines."""
    done = run("dead", *args, "--transport", transport, "--connect", endpoint, "--timeout", "60")
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def test_a_poison_task_is_kept_shown_replayed_after_the_fix_and_answered(
    transport: str, brokers, tmp_path: Path
) -> None:
    broker = brokers(transport, ["tcp://127.0.0.1:*"])
    port = broker.serve_metrics(0, "127.0.0.1", period=0.05)
    endpoint = broker.endpoint(transport, "tcp")
    pool = start_pool("tests.dead_apps:app", endpoint, transport, tmp_path / "worker.log")
    marker = tmp_path / "mended"
    try:
        with Client(endpoint, transport) as client:
            wait_for_workers(client, {"echo-parse": 1})
            with pytest.raises(RequestFailed) as failed:
                client.request("echo-parse", str(marker).encode(), timeout=60)
            assert failed.value.status == 500
            for n in range(2):  # two more, to drop
                with pytest.raises(RequestFailed):
                    client.request("echo-parse", b"%s-%d" % (str(marker).encode(), n), timeout=60)
            report = client.status()
            jsonschema.Draft202012Validator(SCHEMA).validate(report)
            assert report["broker"]["dead_letters"]["letters"] == 3
            assert report["broker"]["dead_letters"]["services"][0]["service"] == "echo-parse"
            text = wait_for(port, "generaldomo_dead_letters 3.0")
            assert 'generaldomo_service_dead_letters{service="echo-parse"} 3.0' in text
            shown = run("status", "--transport", transport, "--connect", endpoint)
            assert shown.returncode == 0 and "dead letters 3 (" in shown.stdout and "echo-parse 3" in shown.stdout
            (services,) = dead(transport, endpoint, "list")
            assert services["services"][0]["count"] == 3
            (page,) = dead(transport, endpoint, "list", "echo-parse", "--limit", "1")
            assert page["count"] == 3 and page["next"] == page["letters"][0]["id"]
            poison = page["letters"][0]
            assert poison["status"] == "500" and "cannot parse" in poison["reason"]
            (shown,) = dead(transport, endpoint, "show", "echo-parse", poison["id"])
            assert shown["payload"] == [{"text": str(marker)}]
            marker.touch()  # the fix
            done = run(
                "dead", "replay", "echo-parse", poison["id"], "--wait", "--transport", transport, "--connect", endpoint,
                "--timeout", "60",
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            first, answer = done.stdout.splitlines()
            assert json.loads(first)["replayed"] == poison["id"] and answer == "parsed mended"
            (rest,) = dead(transport, endpoint, "list", "echo-parse")
            assert rest["count"] == 2 and poison["id"] not in {letter["id"] for letter in rest["letters"]}
            dropped = dead(transport, endpoint, "drop", "echo-parse", *(letter["id"] for letter in rest["letters"]))
            assert len(dropped) == 2
            again = run("dead", "replay", "echo-parse", poison["id"], "--transport", transport, "--connect", endpoint)
            assert again.returncode == 1 and "404" in again.stderr  # replayed once, never twice
            counters = client.status()["broker"]["counters"]
            assert (counters["dead_lettered"], counters["dead_replayed"], counters["dead_dropped"]) == (3, 1, 2)
            assert client.status()["broker"]["dead_letters"]["letters"] == 0
    finally:
        pool.send_signal(signal.SIGTERM)
        assert pool.wait(60) == 0, (tmp_path / "worker.log").read_text()


def test_bad_arguments_exit_2_and_name_what_is_wanted() -> None:
    for args, said in (
        (["replay", "echo-parse"], "needs the SERVICE and the ID"),
        (["show", "echo-parse", "zz"], "hex"),
        (["list", "--limit", "0"], "--limit"),
    ):
        done = run("dead", *args, "--connect", "tcp://127.0.0.1:9")
        assert done.returncode == 2 and said in done.stderr, done.stderr


def test_under_curve_only_an_admin_key_may_look_at_replay_or_drop_dead_letters(
    keydir: Path, processes, tmp_path: Path
) -> None:
    broker = spawn(
        processes, "broker", "--bind", "tcp://127.0.0.1:*", "--curve-secret", str(keydir / "broker.key_secret"),
        "--clients", str(keydir / "clients"), "--workers", str(keydir / "workers"), "--admins", str(keydir / "admins"),
    )  # fmt: skip
    endpoint = expect(lines(broker.stdout), "generaldomo broker: router tcp://").split()[-1]
    server = ["--connect", endpoint, "--curve-server-key", str(keydir / "broker.key"), "--curve-key"]
    pool = start_pool("tests.dead_apps:app", endpoint, "router", tmp_path / "worker.log", *server[2:],
                      str(keydir / "worker.key_secret"))  # fmt: skip
    try:
        failed = run("client", *server, str(keydir / "client.key_secret"), "--timeout", "60", "--wait-for-service",
                     "echo-parse", str(tmp_path / "mended"))  # fmt: skip
        assert failed.returncode == 1 and "500" in failed.stderr, failed.stderr
        for verb in (["list"], ["list", "echo-parse"], ["drop", "echo-parse", "00"]):
            refused = run("dead", *verb, *server, str(keydir / "client.key_secret"), "--timeout", "30")
            assert refused.returncode == 1 and "403" in refused.stderr, (verb, refused.stderr)
        admin = [*server, str(keydir / "admin.key_secret"), "--timeout", "60"]
        listed = run("dead", "list", "echo-parse", *admin)
        assert listed.returncode == 0, listed.stderr
        (letter,) = json.loads(listed.stdout)["letters"]
        (tmp_path / "mended").touch()
        replayed = run("dead", "replay", "echo-parse", letter["id"], "--wait", *admin)
        assert replayed.returncode == 0 and replayed.stdout.splitlines()[1] == "parsed mended", replayed.stderr
    finally:
        pool.send_signal(signal.SIGTERM)
        assert pool.wait(60) == 0, (tmp_path / "worker.log").read_text()

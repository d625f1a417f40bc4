"""The command line with CURVE (keys from ``generaldomo keygen``), the broker's limit flags, and the CLI client's
cancel on timeout and Ctrl-C: real processes over loopback tcp."""

from __future__ import annotations

import json
import os
import queue
import shlex
import signal
import subprocess
from pathlib import Path

import pytest
from cli_processes import COMMAND, expect, lines, run, spawn
from doc_blocks import named
from waiting import eventually

from generaldomo import Client
from generaldomo.io import address_file, keys


def test_keygen_writes_certificates_with_metadata_and_refuses_to_overwrite(keydir: Path) -> None:
    public, secret = keys.load_secret(keydir / "worker.key_secret")
    assert keys.load_public(keydir / "worker.key") == public and len(secret) == 40
    assert keys.load_allowlist(keydir / "workers") == {public.decode(): ("echo*",)}
    assert oct(os.stat(keydir / "worker.key_secret").st_mode & 0o777) == "0o600"
    again = run("keygen", "worker", "--dir", str(keydir))
    assert again.returncode == 2 and "--force" in again.stderr
    assert keys.load_secret(keydir / "worker.key_secret") == (public, secret)  # untouched


def start_broker(processes, transport: str, keydir: Path, *extra: str) -> tuple[str, queue.Queue[str]]:
    broker = spawn(
        processes,
        "broker",
        "--transport",
        transport,
        "--bind",
        "tcp://127.0.0.1:*",
        "--curve-secret",
        str(keydir / "broker.key_secret"),
        "--clients",
        str(keydir / "clients"),
        "--workers",
        str(keydir / "workers"),
        "--admins",
        str(keydir / "admins"),
        *extra,
    )
    out = lines(broker.stdout)
    return expect(out, f"generaldomo broker: {transport} tcp://").split()[-1], out


def test_echo_over_curve_from_the_command_line(transport: str, keydir: Path, tmp_path: Path, processes) -> None:
    address = tmp_path / "broker.json"
    endpoint, out = start_broker(processes, transport, keydir, "--address-file", str(address))
    expect(out, "address file")
    broker_key = keys.load_public(keydir / "broker.key").decode()
    assert address_file.read(address).public_key == broker_key  # announced; the secret never is
    assert keys.load_secret(keydir / "broker.key_secret")[1].decode() not in address.read_text()
    # The worker finds the broker and its key in the address file, trusting it on first use.
    worker = spawn(
        processes,
        "worker",
        "--transport",
        transport,
        "--broker-file",
        str(address),
        "--trust-announced-key",
        "--curve-key",
        str(keydir / "worker.key_secret"),
        "--service",
        "echo",
    )
    assert "serving 'echo'" in worker.stdout.readline()
    # The client takes its key and the broker's key (Z85 text) from the environment.
    env = {**os.environ, "GENERALDOMO_CURVE_KEY": str(keydir / "client.key_secret")}
    env["GENERALDOMO_CURVE_SERVER_KEY"] = broker_key
    client = run("client", "--transport", transport, "--connect", endpoint, "--timeout", "30", "echo", "hi", env=env)
    assert client.returncode == 0, client.stderr
    assert client.stdout.splitlines() == ["hi"]
    # A plaintext client and a client with an unknown key are refused; nothing answers them.
    for refused_env in (None, {**env, "GENERALDOMO_CURVE_KEY": str(keydir / "stranger.key_secret")}):
        refused = run(
            "client", "--transport", transport, "--connect", endpoint, "--timeout", "1", "echo", env=refused_env
        )
        assert refused.returncode == 3, refused.stderr  # no broker answered (the probes are refused as well)
    served = run("client", "--transport", transport, "--connect", endpoint, "--timeout", "30", "echo", "again", env=env)
    assert served.stdout.splitlines() == ["again"], served.stderr


def test_the_announced_key_is_used_only_when_trusted(keydir: Path, tmp_path: Path, processes) -> None:
    address = tmp_path / "broker.json"
    _, out = start_broker(processes, "router", keydir, "--address-file", str(address))
    expect(out, "address file")
    client_key = ["--curve-key", str(keydir / "client.key_secret")]
    untrusted = run("client", "--broker-file", str(address), *client_key, "mmi.service", "echo")
    assert untrusted.returncode == 2 and "--curve-server-key" in untrusted.stderr
    trusted = run("client", "--broker-file", str(address), "--trust-announced-key", *client_key, "mmi.service", "x")
    assert trusted.returncode == 0 and trusted.stdout.splitlines() == ["404"], trusted.stderr


def test_worker_and_client_keys_keep_their_roles_on_the_command_line(keydir: Path, processes) -> None:
    endpoint, _ = start_broker(processes, "router", keydir)
    server_key = ["--curve-server-key", str(keydir / "broker.key")]  # the broker's public certificate file
    as_worker = ["--connect", endpoint, *server_key, "--curve-key"]
    flow = ["flow", "echo", "--rate", "5", "--create", "--timeout", "30"]  # no worker yet: --create
    for name in ("client", "worker"):
        refused = run(*flow, *as_worker, str(keydir / f"{name}.key_secret"))
        assert refused.returncode == 1 and "403" in refused.stderr, (name, refused.stderr)
    admin = run(*flow, *as_worker, str(keydir / "admin.key_secret"))
    assert admin.returncode == 0 and json.loads(admin.stdout)["rate"] == 5, admin.stderr
    status = run("status", "--json", *as_worker, str(keydir / "admin.key_secret"))
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["broker"]["counters"]["forbidden"] >= 2  # and the worker key's heartbeats


LIMIT_FLAGS = {
    "--max-frames": ("max_frames", "77", 77),
    "--queue-bytes": ("queue_bytes", "none", None),
    "--service-queue-bytes": ("service_queue_bytes", "12345", 12345),
    "--keep-answers": ("keep_answers", "7.5", 7.5),
    "--keep-bytes": ("keep_bytes", "4096", 4096),
    "--service-idle": ("service_idle", "none", None),
    "--client-expiry": ("client_expiry", "33", 33.0),
}


def test_each_limit_flag_reaches_the_brokers_settings(processes) -> None:
    given = [part for flag, (_, text, _) in LIMIT_FLAGS.items() for part in (flag, text)]
    broker = spawn(processes, "broker", "--bind", "tcp://127.0.0.1:*", *given)
    endpoint = expect(lines(broker.stdout), "generaldomo broker: router").split()[-1]
    with Client(endpoint) as client:
        settings = client.status(timeout=30)["broker"]["settings"]
    assert {field: settings[field] for field, _, _ in LIMIT_FLAGS.values()} == {
        field: value for field, _, value in LIMIT_FLAGS.values()
    }
    defaults = spawn(processes, "broker", "--bind", "tcp://127.0.0.1:*")
    endpoint = expect(lines(defaults.stdout), "generaldomo broker: router").split()[-1]
    with Client(endpoint) as client:
        settings = client.status(timeout=30)["broker"]["settings"]
    assert settings["queue_bytes"] == 64 * 1024 * 1024 and settings["service_idle"] == 60.0


@pytest.mark.parametrize("how", ["timeout", "ctrl-c"])
def test_a_request_the_cli_client_gave_up_on_never_runs(transport: str, how: str, brokers, workers) -> None:
    broker = brokers(transport, ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint(transport, "tcp")
    argv = [*COMMAND, "client", "--transport", transport, "--connect", endpoint, "late", "abandoned"]
    if how == "timeout":
        gave_up = subprocess.run([*argv, "--timeout", "1"], capture_output=True, text=True, timeout=120)
        assert gave_up.returncode == 1 and "no worker serves 'late'" in gave_up.stderr, gave_up.stderr
    else:
        # the client starts with Ctrl-C as a terminal's foreground command has it, however the suite was started (a
        # shell's background job ignores SIGINT, and its children inherit that): a handler caught here is the
        # default in the child
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            client = subprocess.Popen(
                [*argv, "--timeout", "600", "--wait-for-service"], stderr=subprocess.PIPE, text=True
            )
        finally:
            signal.signal(signal.SIGINT, previous)
        eventually(lambda: broker.core.tasks, 60, "the request to be queued")
        client.send_signal(signal.SIGINT)
        assert client.wait(60) == 130, client.stderr.read() if client.stderr else ""
    eventually(lambda: broker.core.counters["cancelled"] == 1 and not broker.core.tasks, 60, "the cancel")
    ran: list[bytes] = []
    workers(endpoint, transport, "late", lambda payload: ran.append(payload) or payload)
    with Client(endpoint, transport) as client:
        assert client.request("late", b"fresh", timeout=30).payload == b"fresh"
    assert ran == [b"fresh"]


def test_curve_from_the_environment_through_a_worker_pool_and_the_bridge(keydir: Path, processes) -> None:
    assert run("keygen", "bridge", "--dir", str(keydir), "--role", "clients").returncode == 0
    broker_env = {
        **os.environ,
        "GENERALDOMO_CURVE_SECRET": str(keydir / "broker.key_secret"),
        "GENERALDOMO_CURVE_CLIENTS": str(keydir / "clients"),
        "GENERALDOMO_CURVE_WORKERS": str(keydir / "workers"),
    }
    broker = spawn(processes, "broker", "--bind", "tcp://127.0.0.1:*", env=broker_env)
    endpoint = expect(lines(broker.stdout), "generaldomo broker: router").split()[-1]
    peer_env = {**os.environ, "GENERALDOMO_CURVE_SERVER_KEY": str(keydir / "broker.key")}
    worker_env = {**peer_env, "GENERALDOMO_CURVE_KEY": str(keydir / "worker.key_secret")}
    pool = spawn(processes, "worker", "--connect", endpoint, "--concurrency", "2", "--tag", "pool", env=worker_env)
    assert "thread pool" in expect(lines(pool.stdout), "serving")
    bridge = spawn(
        processes,
        "bridge",
        "--server",
        "tcp://127.0.0.1:*",
        "--broker",
        endpoint,
        "--curve-secret",
        str(keydir / "bridge.key_secret"),
        "--clients",
        str(keydir / "clients"),
        "--curve-key",
        str(keydir / "bridge.key_secret"),
        "--curve-server-key",
        str(keydir / "broker.key"),
    )
    front = expect(lines(bridge.stdout), "generaldomo bridge: server").split()[3]
    client = ["--curve-key", str(keydir / "client.key_secret"), "--timeout", "30", "echo", "x"]
    direct = run("client", "--connect", endpoint, *client, env=peer_env)
    assert direct.returncode == 0 and direct.stdout.splitlines() == ["pool:x"], direct.stderr
    bridged = run(
        "client", "--transport", "server", "--connect", front, "--curve-server-key", str(keydir / "bridge.key"), *client
    )
    assert bridged.returncode == 0 and bridged.stdout.splitlines() == ["pool:x"], bridged.stderr


def test_curve_set_up_mistakes_are_usage_errors(keydir: Path) -> None:
    no_secret = run("broker", "--clients", str(keydir / "clients"))
    assert no_secret.returncode == 2 and "--curve-secret" in no_secret.stderr
    nobody = run("broker", "--curve-secret", str(keydir / "broker.key_secret"))
    assert nobody.returncode == 2 and "admits nobody" in nobody.stderr
    public_only = run("broker", "--curve-secret", str(keydir / "broker.key"), "--clients", str(keydir / "clients"))
    assert public_only.returncode == 2 and "no secret key" in public_only.stderr
    bad_key = run("client", "--curve-server-key", "not-a-key", "echo")
    assert bad_key.returncode == 2 and "neither a Z85 public key" in bad_key.stderr


def readme_security_commands() -> list[list[str]]:
    """The shell commands of the guide's CURVE set-up (its blocks curve-set-up and curve-peers), continuation lines
    joined."""
    joined = (named("curve-set-up") + named("curve-peers")).replace("\\\n", " ")
    return [shlex.split(line.split("#", 1)[0]) for line in joined.splitlines() if line.strip()]


def test_the_readme_security_set_up_runs_as_written(tmp_path: Path, processes) -> None:
    commands = readme_security_commands()
    assert [words[1] for words in commands] == ["keygen"] * 4 + ["broker", "worker", "client"]
    endpoint = "tcp://127.0.0.1:*"
    for words in commands:
        argv = [endpoint if word.startswith("tcp://") else word for word in words[1:]]
        if words[1] == "keygen":
            assert subprocess.run([*COMMAND, *argv], cwd=tmp_path, timeout=60).returncode == 0
        elif words[1] == "client":
            result = subprocess.run([*COMMAND, *argv], cwd=tmp_path, capture_output=True, text=True, timeout=120)
            assert result.returncode == 0 and result.stdout.splitlines() == ["hello"], result.stderr
        else:
            process = subprocess.Popen([*COMMAND, *argv], cwd=tmp_path, stdout=subprocess.PIPE, text=True)
            processes.append(process)
            line = expect(lines(process.stdout), "generaldomo")
            endpoint = line.split()[-1] if words[1] == "broker" else endpoint
            assert "serving 'echo'" in line or words[1] == "broker", line


def test_a_curve_worker_whose_key_is_not_listed_says_what_to_check(keydir: Path, processes) -> None:
    endpoint, _ = start_broker(processes, "router", keydir, "--heartbeat", "0.2")  # the same on both sides
    server_key = ["--curve-server-key", str(keydir / "broker.key"), "--heartbeat", "0.2"]
    listed = spawn(processes, "worker", "--connect", endpoint, "--curve-key", str(keydir / "worker.key_secret"),
                   *server_key)  # fmt: skip
    stranger = spawn(processes, "worker", "--connect", endpoint, "--curve-key", str(keydir / "stranger.key_secret"),
                     *server_key)  # fmt: skip
    warning = expect(lines(stranger.stderr), "refused this peer's CURVE key")  # the handshake's cause, at once
    assert "WARNING" in warning and "--workers" in warning
    assert "serving 'echo'" in listed.stdout.readline()
    client = ["--curve-key", str(keydir / "client.key_secret"), "--curve-server-key", str(keydir / "broker.key")]
    served = run("client", "--connect", endpoint, *client, "--timeout", "30", "echo", "ok")
    assert served.stdout.splitlines() == ["ok"], served.stderr
    listed.send_signal(signal.SIGTERM)
    listed.wait(30)
    assert "warning" not in listed.stderr.read().lower()  # registered: nothing to warn about

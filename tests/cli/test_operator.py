"""What an operator or a newcomer meets first, as real processes over loopback: refused handshakes named at once
(the other transport, CURVE missing or wrong), the CLI client's typed payloads, streams, stdin and option order,
and worker apps that say when they are registered, refuse what cannot work and stop within their grace."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import zmq
import zmq.auth
from cli_processes import expect, lines
from waiting import eventually

from generaldomo import Broker, Client, HandshakeFailed, Worker
from generaldomo.io import keys
from generaldomo.io.auth import BrokerSecurity

COMMAND = [sys.executable, "-m", "generaldomo"]
FAST = 10.0  # seconds: a generous bound on "about a second" on a loaded machine
OTHER = {"router": "server", "server": "router"}


def run(*args: str, cwd: Path | None = None, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COMMAND, *args], capture_output=True, text=True, timeout=120, cwd=cwd, input=stdin)


def spawn(processes: list[subprocess.Popen[str]], *args: str, cwd: Path | None = None) -> subprocess.Popen[str]:
    process = subprocess.Popen([*COMMAND, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd)
    processes.append(process)
    return process


def start_broker(processes, *args: str) -> str:
    broker = spawn(processes, "broker", "--bind", "tcp://127.0.0.1:*", *args)
    return broker.stdout.readline().split()[-1]


# ------------------------------------------------------------------------------------ refused handshakes


def test_a_client_on_the_other_transport_fails_at_once_naming_it(transport: str) -> None:
    broker = Broker(OTHER[transport], ["tcp://127.0.0.1:*"]).start()
    try:
        endpoint = broker.endpoints[0][1]
        with Client(endpoint, transport) as client:
            started = time.monotonic()
            with pytest.raises(HandshakeFailed) as failed:
                client.request("echo", b"x", timeout=60)
            assert time.monotonic() - started < FAST
            assert failed.value.kind == "handshake" and f"--transport {OTHER[transport]}" in str(failed.value)
            with pytest.raises(HandshakeFailed):  # later requests too, at once
                client.submit("echo", b"y").result(FAST)
    finally:
        broker.stop()


def test_the_cli_client_on_the_other_transport_exits_3_at_once(transport: str, processes) -> None:
    endpoint = start_broker(processes, "--transport", OTHER[transport])
    started = time.monotonic()
    result = run("client", "--transport", transport, "--connect", endpoint, "--timeout", "60", "echo", "x")
    assert time.monotonic() - started < 30  # the process's own start-up included; the timeout is 60 s
    assert result.returncode == 3 and f"use --transport {OTHER[transport]}" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


@pytest.fixture
def curve_broker(tmp_path: Path):
    """A CURVE broker admitting one client key; yields (endpoint, broker public key, client keys)."""
    _, broker_secret = zmq.auth.create_certificates(tmp_path, "broker")
    (tmp_path / "clients").mkdir()
    zmq.auth.create_certificates(tmp_path / "clients", "client")
    security = BrokerSecurity.from_files(broker_secret, clients=tmp_path / "clients")
    broker = Broker("router", ["tcp://127.0.0.1:*"], security=security).start()
    try:
        client_keys = keys.load_secret(tmp_path / "clients" / "client.key_secret")
        yield broker.endpoints[0][1], security.public_key, client_keys
    finally:
        broker.stop()


def refusal(endpoint: str, **curve) -> HandshakeFailed:
    with Client(endpoint, **curve) as client:
        with pytest.raises(HandshakeFailed) as failed:
            client.request("echo", b"x", timeout=60)
    return failed.value


def test_curve_mistakes_are_named(curve_broker) -> None:
    endpoint, broker_key, client_keys = curve_broker
    plaintext = refusal(endpoint)
    assert (
        plaintext.kind in ("curve", "handshake")
        and "uses CURVE" in str(plaintext)
        and "--curve-server-key" in str(plaintext)
    )
    stranger = refusal(endpoint, server_key=broker_key)  # a fresh key pair the broker does not list
    assert stranger.kind == "key" and "--clients" in str(stranger)
    wrong_server = refusal(endpoint, server_key=zmq.curve_keypair()[0], keys=client_keys)
    assert wrong_server.kind in ("curve", "handshake") and "broker's public key" in str(wrong_server)
    with Client(endpoint, server_key=broker_key, keys=client_keys) as client:  # the right keys: no refusal
        with pytest.raises(TimeoutError):
            client.request("echo", b"x", timeout=1)


def test_a_curve_client_of_a_plaintext_broker_is_told_so() -> None:
    broker = Broker("router", ["tcp://127.0.0.1:*"]).start()
    try:
        failed = refusal(broker.endpoints[0][1], server_key=zmq.curve_keypair()[0])
        assert failed.kind == "curve" and "does not use CURVE" in str(failed)
    finally:
        broker.stop()


def test_a_worker_names_the_refusal_at_once(caplog: pytest.LogCaptureFixture) -> None:
    broker = Broker("server", ["tcp://127.0.0.1:*"]).start()
    worker = Worker(broker.endpoints[0][1], "echo", lambda payload: payload, "router")
    thread = threading.Thread(target=worker.serve, daemon=True)
    thread.start()
    try:
        failure = eventually(lambda: worker.handshake_failure, FAST, "the worker's handshake failure")
        assert failure.kind == "handshake" and "--transport server" in failure.cause
    finally:
        worker.stop()
        thread.join(FAST)
        broker.stop()


def test_nothing_listening_is_said_with_the_real_time(tmp_path: Path) -> None:
    endpoint = f"ipc://{tmp_path}/nobody.sock"
    result = run("client", "--connect", endpoint, "--timeout", "0.5", "--wait-for-broker", "echo", "x")
    assert result.returncode == 3 and "nothing accepts connections there" in result.stderr, result.stderr
    waited = float(result.stderr.split("within ")[1].split(" s")[0])
    assert 0.5 <= waited < 30


# ------------------------------------------------------------------------------------ the CLI client

TASKS = """\
from generaldomo import App

app = App("tasks")


@app.service("square", serializer="json")
def square(numbers):
    return [n * n for n in numbers]


@app.service("count", serializer="msgpack")
def count(n):
    for i in range(n):
        yield {"step": i}
    return "done"


@app.service("size")
def size(payload):
    return str(len(payload)).encode()
"""


TASK_NAMES = ("count", "size", "square")


@pytest.fixture
def app_broker(tmp_path: Path, processes) -> str:
    (tmp_path / "tasks.py").write_text(TASKS)
    endpoint = start_broker(processes)
    worker = spawn(processes, "worker", "tasks:app", "--connect", endpoint, cwd=tmp_path)
    out = lines(worker.stdout)
    said = sorted(expect(out, "registered") for _ in range(3))
    assert [line.split()[3:] for line in said] == [[f"{name!r}", "x1", "at", endpoint] for name in TASK_NAMES]
    return endpoint


def test_the_cli_client_calls_typed_services_streams_and_reads_stdin(app_broker: str, tmp_path: Path) -> None:
    endpoint = app_broker
    assert run("client", "--connect", endpoint, "--json", "square", "[1, 2, 3]").stdout == "[1, 4, 9]\n"
    streamed = run("client", "count", "--connect", endpoint, "3", "--serializer", "msgpack")
    assert streamed.stdout.splitlines() == ['{"step": 0}', '{"step": 1}', '{"step": 2}', '"done"'], streamed.stderr
    assert run("client", "--connect", endpoint, "--json", "square", "--file", "-", stdin="[4]").stdout == "[16]\n"
    (tmp_path / "blob").write_bytes(b"\x00" * 1000)
    assert run("client", "size", "--file", str(tmp_path / "blob"), "--connect", endpoint).stdout == "1000\n"
    raw = run("client", "--connect", endpoint, "square", "[1]")  # bytes to a json service: the worker's 415
    assert raw.returncode == 1 and "415" in raw.stderr
    bad = run("client", "--connect", endpoint, "--json", "square", "[1,")
    assert bad.returncode == 2 and "not JSON" in bad.stderr


def test_options_may_follow_the_positional_arguments(app_broker: str) -> None:
    result = run("client", "size", "--timeout", "30", "abc", "--connect", app_broker, "de")
    assert result.returncode == 0 and result.stdout.splitlines() == ["2"], result.stderr  # two frames: abc, de
    unknown = run("client", "size", "--no-such-flag", "x")
    assert unknown.returncode == 2 and "usage: generaldomo client" in unknown.stderr


# ------------------------------------------------------------------------------------ worker apps


def test_a_pool_says_registered_once_per_service_with_its_slots(tmp_path: Path, processes) -> None:
    (tmp_path / "tasks.py").write_text(TASKS)
    endpoint = f"ipc://{tmp_path}/late.sock"
    for pool in ("thread", "process"):
        worker = spawn(
            processes, "worker", "tasks:app", "--connect", endpoint, "--concurrency", "2", "--pool", pool,
            "--heartbeat", "0.2", cwd=tmp_path,
        )  # fmt: skip
        assert "serving 'square' x2" in worker.stdout.readline()
        if pool == "thread":
            assert "no broker has answered" in expect(lines(worker.stderr), "warning")
            spawn(processes, "broker", "--bind", endpoint, "--heartbeat", "0.2")
        out = lines(worker.stdout)
        said = [expect(out, "registered") for _ in range(3)]
        assert sorted(line.split()[3] for line in said) == ["'count'", "'size'", "'square'"]
        assert all(line.split()[4] == "x2" for line in said)


def test_an_empty_app_and_a_broken_module_are_refused_with_the_reason(tmp_path: Path) -> None:
    (tmp_path / "empty.py").write_text("from generaldomo import App\n\napp = App('empty')\n")
    (tmp_path / "broken.py").write_text("import os\n\nvalue = 1\nboom = undefined_name + value\n")
    empty = run("worker", "empty:app", "--connect", "tcp://127.0.0.1:9", cwd=tmp_path)
    assert empty.returncode == 2 and "has no services to serve" in empty.stderr
    broken = run("worker", "broken:app", "--connect", "tcp://127.0.0.1:9", cwd=tmp_path)
    assert broken.returncode == 2, broken.stderr
    assert f'File "{tmp_path / "broken.py"}", line 4' in broken.stderr
    assert "boom = undefined_name + value" in broken.stderr and "NameError" in broken.stderr
    missing = run("worker", "no_such_module:app", cwd=tmp_path)
    assert missing.returncode == 2 and "no module named 'no_such_module'" in missing.stderr


@pytest.mark.parametrize("pool", ["thread", "process"])
def test_a_typo_in_a_worker_spec_is_one_line_exit_2_with_a_suggestion(tmp_path: Path, pool: str) -> None:
    """A mistyped attribute, service or module: one line naming the nearest there is, exit 2, no traceback."""
    (tmp_path / "tasks.py").write_text(TASKS)
    cases = {
        ("tasks:ap",): "'tasks' has no attribute 'ap' (from 'tasks:ap'); did you mean 'app'?",
        ("tasks:app", "--service", "sqare"): "has no service 'sqare' (it has ['square', 'count', 'size']); "
        "did you mean 'square'?",
        ("taks:app",): "no module named 'taks'",
    }
    for spec, message in cases.items():
        done = run("worker", *spec, "--pool", pool, "--connect", "tcp://127.0.0.1:9", cwd=tmp_path)
        assert done.returncode == 2, done.stderr
        assert message in done.stderr and "Traceback" not in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    misspelt = run("worker", "taks:app", "--connect", "tcp://127.0.0.1:9", cwd=tmp_path)
    assert misspelt.stderr.rstrip().endswith("did you mean 'tasks'?"), misspelt.stderr


def test_a_worker_stopped_by_ctrl_c_says_it_stopped(tmp_path: Path, processes) -> None:
    """SIGINT (Ctrl-C) on ``generaldomo worker``, the echo worker and an app in either pool: exit 0, and a last
    line saying it stopped."""
    (tmp_path / "tasks.py").write_text(TASKS)
    endpoint = start_broker(processes)
    for argv, said in (
        (["--service", "size"], "stopped serving 'size' after 1 tasks"),
        (["tasks:app"], "stopped serving 'square' x1, 'count' x1, 'size' x1"),
        (["tasks:app", "--pool", "process"], "stopped serving 'square' x1, 'count' x1, 'size' x1"),
    ):
        worker = spawn(processes, "worker", *argv, "--connect", endpoint, cwd=tmp_path)
        out = lines(worker.stdout)
        expect(out, "serving")
        if argv[0] == "tasks:app":
            expect(out, "registered 'size'")
        with Client(endpoint) as client:
            assert client.request("size", b"abc", timeout=60).payload == (b"abc" if argv[0] != "tasks:app" else b"3")
        worker.send_signal(signal.SIGINT)
        assert worker.wait(60) == 0, worker.stderr.read() if worker.stderr else ""
        assert said in expect(out, "stopped serving")


SLOW = """\
import time

from generaldomo import App

app = App("slow")


@app.service("slow")
def slow(payload):
    time.sleep(60)
    return payload
"""


@pytest.mark.parametrize("pool", ["thread", "process"])
def test_stop_grace_is_honoured_within_a_second(pool: str, tmp_path: Path, processes) -> None:
    (tmp_path / "slow.py").write_text(SLOW)
    endpoint = start_broker(processes)
    worker = spawn(
        processes, "worker", "slow:app", "--connect", endpoint, "--concurrency", "3", "--pool", pool,
        "--stop-grace", "1", cwd=tmp_path,
    )  # fmt: skip
    expect(lines(worker.stdout), "registered 'slow' x3")
    with Client(endpoint) as client:
        futures = [client.submit("slow", b"x") for _ in range(3)]
        eventually(lambda: client.status()["services"][0]["in_flight"] == 3, 60, "three running tasks")
        started = time.monotonic()
        worker.terminate()
        worker.wait(60)
        stopped = time.monotonic() - started
        for future in futures:
            future.cancel()
    assert stopped < 1 + 4, f"took {stopped:.1f} s to stop with --stop-grace 1"  # a second past the grace, loaded


# ------------------------------------------------------------------------------------ validation and logs


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["broker", "--bind", "tcp://localhost:5596"], "neither an IP address nor a network interface"),
        (["broker", "--bind", "127.0.0.1:5560"], "no transport"),
        (["broker", "--bind", "tcp://127.0.0.1:99999"], "is not a number from 1 to 65535"),
        (["client", "--connect", "tcp://*:5555", "echo"], "connects to a host, not *"),
        (["worker", "--connect", "ipc://" + "x" * 200], "more than libzmq's 107"),
    ],
)
def test_malformed_endpoints_are_refused_with_the_expected_form(args: list[str], said: str) -> None:
    result = run(*args)
    assert result.returncode == 2 and said in result.stderr and "expected tcp://" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_metrics_without_the_extra_is_refused_before_binding(tmp_path: Path) -> None:
    code = (
        "import importlib.util, sys\n"
        "real = importlib.util.find_spec\n"
        "importlib.util.find_spec = lambda name, *a: None if name == 'prometheus_client' else real(name, *a)\n"
        "from generaldomo.cli import main\n"
        f"sys.exit(main(['broker', '--bind', 'ipc://{tmp_path}/m.sock', '--metrics-port', '0']))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "generaldomo[metrics]" in result.stderr, result.stderr
    assert not (tmp_path / "m.sock").exists()  # nothing was bound


def test_flow_on_a_service_nobody_serves_needs_create(processes) -> None:
    endpoint = start_broker(processes)
    spawn(processes, "worker", "--connect", endpoint, "--service", "echo")
    eventually(lambda: run("client", "--connect", endpoint, "echo", "up").returncode == 0, 60, "the echo worker")
    typo = run("flow", "ehco", "--rate", "1", "--connect", endpoint)
    assert typo.returncode == 1 and "no worker serves 'ehco'" in typo.stderr and "did you mean 'echo'" in typo.stderr
    assert run("flow", "echo", "--rate", "5", "--connect", endpoint).returncode == 0
    created = run("flow", "later", "--rate", "2", "--connect", endpoint, "--create")
    assert created.returncode == 0 and '"rate": 2.0' in created.stdout, created.stderr


def test_a_broken_pipe_ends_quietly(processes) -> None:
    endpoint = start_broker(processes)
    pipeline = f"{sys.executable} -m generaldomo status {endpoint} --watch 0.1 | head -1"
    result = subprocess.run(["bash", "-o", "pipefail", "-c", pipeline], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "Traceback" not in result.stderr and "Broken pipe" not in result.stderr


def test_json_logs_to_a_file_with_a_line_per_task_and_per_dispatch(tmp_path: Path, processes) -> None:
    broker_log, worker_log = tmp_path / "broker.jsonl", tmp_path / "worker.jsonl"
    endpoint = start_broker(processes, "-vv", "--log-format", "json", "--log-file", str(broker_log))
    spawn(processes, "--log-format", "json", "worker", "--connect", endpoint, "-vv", "--log-file", str(worker_log))
    assert run("client", "--connect", endpoint, "--timeout", "60", "echo", "hi").stdout == "hi\n"

    def entries(path: Path) -> list[dict]:
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    dispatched = eventually(
        lambda: [e for e in entries(broker_log) if e["message"].startswith("dispatched task")], 30, "a dispatch line"
    )
    assert dispatched[0]["level"] == "DEBUG" and "'echo'" in dispatched[0]["message"]
    task = eventually(lambda: [e for e in entries(worker_log) if e["message"].startswith("task ")], 30, "a task line")
    assert "for b'echo': 200 in" in task[0]["message"] and {"time", "logger"} <= set(task[0])


def test_futures_and_replies_carry_the_request_id() -> None:
    broker = Broker("router", ["tcp://127.0.0.1:*"]).start()
    endpoint = broker.endpoints[0][1]
    worker = Worker(endpoint, "echo", lambda payload: payload)
    thread = threading.Thread(target=worker.serve, daemon=True)
    thread.start()
    try:
        with Client(endpoint) as client:
            futures = [client.submit("echo", b"%d" % n) for n in range(3)]
            ids = [future.request_id for future in futures]
            assert len(set(ids)) == 3 and all(isinstance(rid, bytes) and rid for rid in ids)
            assert [future.result(60).request_id for future in futures] == ids
            assert client.request("echo", b"x", timeout=60).request_id not in ids
    finally:
        worker.stop()
        thread.join(FAST)
        broker.stop()

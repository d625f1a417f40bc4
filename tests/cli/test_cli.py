"""The generaldomo command, run as real processes."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import zmq
from cli_processes import COMMAND, expect, lines, spawn
from transports import unbound_endpoint
from waiting import served_at

from generaldomo.cli import COMMANDS, parser
from generaldomo.sansio.config.settings import Settings


def test_broker_worker_client(transport: str, processes: list[subprocess.Popen]) -> None:
    broker = spawn(processes, "broker", "--transport", transport, "--bind", "tcp://127.0.0.1:*")
    line = broker.stdout.readline()
    assert line.startswith(f"generaldomo broker: {transport} tcp://127.0.0.1:"), line
    endpoint = line.split()[-1]
    worker = spawn(processes, "worker", "--transport", transport, "--connect", endpoint, "--service", "echo")
    assert "serving 'echo'" in worker.stdout.readline()
    served_at(endpoint, "echo", transport)
    client = subprocess.run(
        [*COMMAND, "client", "--transport", transport, "--connect", endpoint, "echo", "hello", "world"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert client.returncode == 0, client.stderr
    assert client.stdout.splitlines() == ["hello", "world"]
    for process in (worker, broker):  # SIGTERM stops both promptly and cleanly
        process.send_signal(signal.SIGTERM)
        assert process.wait(10) == 0


def test_client_times_out_with_a_clear_message(transport: str, processes: list[subprocess.Popen]) -> None:
    broker = spawn(processes, "broker", "--transport", transport, "--bind", "tcp://127.0.0.1:*")
    endpoint = broker.stdout.readline().split()[-1]
    client = subprocess.run(
        [*COMMAND, "client", "--transport", transport, "--connect", endpoint, "--timeout", "0.3", "nobody", "x"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert client.returncode == 1 and "no reply" in client.stderr and "Traceback" not in client.stderr


def test_server_transport_without_draft_support_says_how_to_fix_it() -> None:
    code = (
        "import zmq, sys; zmq.has = lambda feature: False\n"
        "from generaldomo.cli import main\n"
        "sys.exit(main(['broker', '--transport', 'server', '--bind', 'tcp://127.0.0.1:*']))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "draft" in result.stderr and "-m generaldomo.draft ensure" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.pure
def test_doctor_and_version() -> None:
    doctor = subprocess.run([*COMMAND, "doctor"], capture_output=True, text=True, timeout=60)
    assert doctor.returncode == 0 and "draft sockets (CLIENT/SERVER): yes" in doctor.stdout
    pure = os.environ.get("GENERALDOMO_PURE_PYTHON", "") not in ("", "0")
    assert ("broker links: pure Python" if pure else "broker links: C accelerator") in doctor.stdout
    # the sans-IO core: compiled when its build is there and current (generaldomo.compiled), never when pure
    core = next(line for line in doctor.stdout.splitlines() if line.startswith("sans-IO core: "))
    assert " was imported from " not in core  # the decision and the import agree
    # whether the command's own package has a build (run from the source tree, it is not the installed copy the
    # tests may import)
    probe = "from generaldomo import compiled; print(compiled.MANIFEST.is_file())"
    built = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60).stdout
    if pure:
        assert core == "sans-IO core: pure Python (GENERALDOMO_PURE_PYTHON is set)"
    elif built.strip() == "True":
        assert core.startswith(
            ("sans-IO core: compiled (mypyc: ", "sans-IO core: pure Python (the compiled core is stale")
        )
    else:
        assert core == "sans-IO core: pure Python (the compiled core is not built)"
    assert "SERVER links' inproc:// endpoints: real inproc" in doctor.stdout  # the project's libzmq has the patch
    assert "CURVE cryptography: libsodium" in doctor.stdout  # the project's libzmq links libsodium in
    version = subprocess.run([*COMMAND, "--version"], capture_output=True, text=True, timeout=60)
    assert "pyzmq" in version.stdout and "libzmq" in version.stdout


def test_demo_runs_both_transports() -> None:
    demo = subprocess.run([*COMMAND, "demo", "--requests", "200"], capture_output=True, text=True, timeout=120)
    assert demo.returncode == 0, demo.stderr
    for transport in ("router", "server"):
        assert f"[{transport}] echo replied b'hello, generaldomo'" in demo.stdout
        assert f"[{transport}] 200 pipelined requests, all answered correctly: True" in demo.stdout


def test_bad_resolver_is_a_clear_error() -> None:
    result = subprocess.run(
        [*COMMAND, "broker", "--bind", "tcp://127.0.0.1:*", "--resolver", "no_such_module:Thing"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "no_such_module" in result.stderr and "Traceback" not in result.stderr


def test_one_broker_both_transports(processes: list[subprocess.Popen]) -> None:
    broker = spawn(processes, "broker", "--router", "tcp://127.0.0.1:*", "--server", "tcp://127.0.0.1:*")
    endpoints = dict(broker.stdout.readline().split()[-2:] for _ in range(2))
    spawn(processes, "worker", "--transport", "router", "--connect", endpoints["router"], "--service", "echo")
    served_at(endpoints["router"], "echo")
    client = subprocess.run(
        [*COMMAND, "client", "--transport", "server", "--connect", endpoints["server"], "echo", "across"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert client.returncode == 0, client.stderr
    assert client.stdout.splitlines() == ["across"]


def _subparsers(top: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    [commands] = [a for a in top._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(commands.choices)


def test_help_is_plain_text_and_lists_every_command() -> None:
    result = subprocess.run([*COMMAND, "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    for name in ("broker", "worker", "client", "demo", "doctor", "status", "flow", "bridge"):
        assert f"    {name} " in result.stdout, name
    assert [command.name for command in COMMANDS] == list(_subparsers(parser()))
    for text in [result.stdout, *(sub.format_help() for sub in _subparsers(parser()).values())]:
        assert "``" not in text and ":mod:" not in text and ":func:" not in text and ":class:" not in text


def test_every_default_is_shown() -> None:
    for name, sub in _subparsers(parser()).items():
        text = " ".join(sub.format_help().split())  # unwrapped
        for action in sub._actions:
            default, flags = action.default, action.option_strings
            if action.nargs == 0 or not flags or action.required:  # switches, positionals, required options
                continue
            if default is None or default is argparse.SUPPRESS or default == []:  # leaving it out must be explained
                assert "default" in (action.help or ""), (name, flags)
            else:
                assert f"(default: {default})" in text or "default" in (action.help or ""), (name, flags)


def test_defaults_come_from_settings() -> None:
    settings, commands = Settings(), _subparsers(parser())
    broker = commands["broker"].parse_args([])
    assert (broker.heartbeat_interval, broker.liveness) == (settings.heartbeat_interval, settings.liveness)
    assert (broker.max_attempts, broker.max_message) == (settings.max_attempts, settings.max_message)
    assert broker.queue_timeout == settings.queue_timeout


def test_name_flags_have_one_meaning_each_and_the_old_spelling_still_works() -> None:
    top = parser()
    assert top.parse_args(["broker", "--beacon-name", "a"]).beacon_name == "a"
    assert top.parse_args(["broker", "--name", "b"]).beacon_name == "b"  # the documented older spelling
    assert top.parse_args(["worker", "--name", "c"]).name == "c"  # peers: only a broker announcing this name


def _client_logs(*args: str) -> str:
    """stderr of a client pointed (by $GENERALDOMO_BROKER) at a port where nothing listens."""
    env = {**os.environ, "GENERALDOMO_BROKER": "tcp://127.0.0.1:9"}
    env.pop("GENERALDOMO_BROKER_FILE", None)
    argv = [*COMMAND, *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env).stderr


@pytest.mark.parametrize(
    "argv, debug",
    [
        (["-vv", "client", "--timeout", "0.2", "echo"], True),
        (["client", "-vv", "--timeout", "0.2", "echo"], True),
        (["-v", "client", "--timeout", "0.2", "echo", "-v"], True),
        (["client", "-v", "--timeout", "0.2", "echo"], False),
    ],
)
def test_verbosity_anywhere_on_the_line(argv: list[str], debug: bool) -> None:
    logs = _client_logs(*argv)
    assert ("DEBUG" in logs and "from $GENERALDOMO_BROKER" in logs) is debug, logs


def _free_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    probe = zmq.Context.instance().socket(zmq.ROUTER)
    port = probe.bind_to_random_port("tcp://127.0.0.1")
    probe.close(linger=0)
    return port


def _client(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COMMAND, "client", *args], capture_output=True, text=True, timeout=120)


def test_client_says_when_no_broker_answers(transport: str) -> None:
    endpoint = f"tcp://127.0.0.1:{_free_port()}"
    result = _client("--transport", transport, "--connect", endpoint, "--timeout", "0.3", "--wait-for-broker", "echo")
    assert result.returncode == 3, result.stderr
    assert f"no broker answered at {endpoint} over {transport} within" in result.stderr
    assert "nothing accepts connections there" in result.stderr and "Traceback" not in result.stderr
    for command in (["status", endpoint], ["flow", "echo", "--connect", endpoint]):
        result = subprocess.run(
            [*COMMAND, *command, "--transport", transport, "--timeout", "0.3", "--wait-for-broker"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 3 and f"no broker answered at {endpoint} over {transport}" in result.stderr


def test_client_on_the_wrong_transport_is_told_the_right_one(transport: str, processes) -> None:
    other = "server" if transport == "router" else "router"
    broker = spawn(processes, "broker", "--transport", other, "--bind", "tcp://127.0.0.1:*")
    endpoint = broker.stdout.readline().split()[-1]
    result = _client("--transport", transport, "--connect", endpoint, "--timeout", "0.3", "echo")
    assert result.returncode == 3, result.stderr
    assert f"a broker answers there over {other}: use --transport {other}" in result.stderr


def test_client_with_a_mistyped_service_gets_the_services_and_the_nearest_name(transport: str, processes) -> None:
    broker = spawn(processes, "broker", "--transport", transport, "--bind", "tcp://127.0.0.1:*")
    endpoint = broker.stdout.readline().split()[-1]
    worker = spawn(processes, "worker", "--transport", transport, "--connect", endpoint, "--service", "echo")
    assert "serving 'echo'" in worker.stdout.readline()
    ok = _client("--transport", transport, "--connect", endpoint, "--timeout", "60", "echo", "up")
    assert ok.returncode == 0 and ok.stdout == "up\n", ok.stderr  # the worker is registered
    # queued (a broker past its start-up grace would say 404 at once): the diagnosis after the timeout says it
    result = _client("--transport", transport, "--connect", endpoint, "--timeout", "0.3", "--wait-for-service", "ecko")
    assert result.returncode == 1, result.stderr
    assert "no worker serves 'ecko'" in result.stderr and "mmi.service says 404" in result.stderr
    assert "services with workers: echo; did you mean 'echo'?" in result.stderr


def test_client_timing_out_in_a_live_broker_says_the_request_is_queued_or_running(processes) -> None:
    broker = spawn(processes, "broker", "--bind", "tcp://127.0.0.1:*")
    endpoint = broker.stdout.readline().split()[-1]
    worker = spawn(processes, "worker", "--connect", endpoint, "--service", "slow", "--sleep", "600")
    assert "serving 'slow'" in worker.stdout.readline()
    result = _client("--connect", endpoint, "--timeout", "1", "slow", "x")
    if "no worker serves" in result.stderr:  # the worker had not registered yet: now it must have
        result = _client("--connect", endpoint, "--timeout", "1", "slow", "x")
    assert result.returncode == 4, result.stderr
    assert "no reply to 'slow'" in result.stderr and "still queued or running" in result.stderr


def test_worker_warns_at_once_while_nothing_accepts_connections(tmp_path: Path, processes) -> None:
    endpoint = f"ipc://{tmp_path}/broker.sock"
    worker = spawn(processes, "worker", "--connect", endpoint, "--heartbeat", "0.2", "--service", "echo")
    line = expect(lines(worker.stderr), "WARNING")  # at once: libzmq's connection attempts are refused
    assert f"nothing accepts connections at {endpoint}" in line


@pytest.mark.parametrize("scheme", ["ipc", "tcp"])
def test_worker_registers_with_a_broker_that_starts_after_it(tmp_path: Path, processes, scheme: str) -> None:
    """The worker's warning, then its registration said once the broker is up: also when the warning came and
    went between two looks of the command's watch (its probes found the broker up and the worker served)."""
    endpoint = unbound_endpoint(scheme, tmp_path, "broker")
    worker = spawn(processes, "worker", "--connect", endpoint, "--heartbeat", "0.2", "--service", "echo")
    errors = lines(worker.stderr)
    assert f"nothing accepts connections at {endpoint}" in expect(errors, "WARNING")
    spawn(processes, "broker", "--bind", endpoint, "--heartbeat", "0.2")
    assert f"registered for 'echo' at {endpoint}" in expect(errors, "registered")


def test_the_installed_entry_point_runs_the_same_command_line() -> None:
    script = Path(sysconfig.get_path("scripts")) / "generaldomo"
    if not script.exists():
        pytest.skip("generaldomo is not installed in this environment (run the tests with tox)")
    result = subprocess.run([str(script), "doctor", "-v"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "draft sockets (CLIENT/SERVER): yes" in result.stdout, result.stderr


# What only the broker, the bridge, the worker pools, the dashboard and Ray need: the short commands load none.
HEAVY = (
    "generaldomo.io.broker", "generaldomo.io.bridge", "generaldomo.io.hub.state", "generaldomo.io.auth",
    "generaldomo.sansio.broker.core", "generaldomo.peers.pool", "generaldomo.peers.app", "generaldomo.dashboard",
    "generaldomo.ray", "multiprocessing", "asyncio", "ray",
)  # fmt: skip
LOADED = """\
import atexit, sys
atexit.register(lambda: print(" ".join(sorted(sys.modules))))
from generaldomo.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize(
    "argv", [[], ["--version"], ["client", "--help"], ["status", "--help"], ["flow", "--help"], ["-v", "status", "-h"]]
)
def test_the_short_commands_load_neither_the_broker_nor_the_dashboard(argv: list[str]) -> None:
    """``import generaldomo.cli`` and the commands of clients load none of :data:`HEAVY` (what makes start-up
    slow): each is imported where the command that needs it runs."""
    script = LOADED if argv else 'import sys, generaldomo.cli; print(" ".join(sorted(sys.modules)))'
    done = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True, timeout=60)
    loaded = set(done.stdout.split()[-1000:] if not argv else done.stdout.splitlines()[-1].split())
    assert "generaldomo.cli" in loaded, done.stderr
    heavy = sorted(name for name in loaded if name.split(".")[0] == "ray" or name.startswith(HEAVY))
    assert heavy == [], f"generaldomo {' '.join(argv)} loaded {heavy}"


def test_the_public_names_are_imported_when_first_used() -> None:
    script = (
        "import sys, generaldomo; assert 'generaldomo.io.broker' not in sys.modules; "
        "from generaldomo import Broker, Client; assert Broker.__module__ == 'generaldomo.io.broker'; "
        "assert generaldomo.Client is Client and 'Worker' in dir(generaldomo); print('ok')"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "ok", done.stderr


@pytest.mark.needs_draft
def test_a_refused_handshake_exits_3_from_every_client_command(processes: list[subprocess.Popen]) -> None:
    """The exit status table: the broker refusing the handshake (here: the other transport) is 3 for ``status``
    and ``flow`` as for ``client``, with the message naming the transport to use."""
    broker = spawn(processes, "broker", "--bind", "tcp://127.0.0.1:*")
    endpoint = broker.stdout.readline().split()[-1]
    for argv in (
        ["status", endpoint],
        ["flow", "echo", "--connect", endpoint],
        ["client", "--connect", endpoint, "echo", "x"],
    ):
        done = subprocess.run(
            [*COMMAND, *argv, "--transport", "server", "--timeout", "30"], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 3, (argv, done.returncode, done.stderr)
        assert "--transport router" in done.stderr, done.stderr


def test_doctor_on_a_router_only_install_warns_and_succeeds(tmp_path: Path) -> None:
    """With PyPI's pyzmq (no draft API) ``generaldomo doctor`` reports the missing server transport as a warning
    saying how to add it, and exits 0: the router transport works."""
    stock = tmp_path / "stock"
    got = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--only-binary", ":all:", "--target", str(stock),
         "pyzmq==27.2.0"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if got.returncode != 0:
        pytest.skip(f"no stock pyzmq wheel to install here: {got.stderr.strip()[-300:]}")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(stock), str(Path(__file__).resolve().parents[2])])}
    doctor = subprocess.run([*COMMAND, "doctor"], capture_output=True, text=True, timeout=60, env=env)
    assert "draft sockets (CLIENT/SERVER): no" in doctor.stdout, doctor.stdout + doctor.stderr
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "warning: the server transport (CLIENT/SERVER sockets) is not available" in doctor.stdout
    assert "generaldomo.draft ensure" in doctor.stdout.splitlines()[-1]

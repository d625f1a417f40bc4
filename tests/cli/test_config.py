"""Settings from a TOML file (--config) and GENERALDOMO_* variables, in real processes: the precedence flags >
environment > file > defaults, --print-config and its sources, errors naming their source (exit 2), the
guide's settings table made from the declarations, and every command with settings (status, flow, dashboard,
bridge too) run from a file and the environment alone."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import pytest
from cli_processes import expect, lines, run, spawn
from dashboard_harness import latest
from doc_blocks import named
from waiting import eventually, served

from generaldomo import Client
from generaldomo.cli import _SUBPARSERS, COMMANDS, config, parser, settings_table
from generaldomo.sansio.broker.flow import declaration
from generaldomo.sansio.broker.flow.flow import FLOW, LIMITS
from generaldomo.sansio.config import knobs

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs"


def environment(**variables: str) -> dict[str, str]:
    """This process's environment without any GENERALDOMO_* setting, plus ``variables``."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith("GENERALDOMO_") or k in _NOT_SETTINGS}
    return {**kept, **variables}


_NOT_SETTINGS = {"GENERALDOMO_CACHE", "GENERALDOMO_PURE_PYTHON", "GENERALDOMO_ALLOW_NO_DRAFT"}


def printed(*args: str, env: dict[str, str] | None = None) -> dict[str, tuple[object, str]]:
    """``generaldomo ARGS --print-config`` as key -> (value, source), checked to be a TOML file itself."""
    done = run(*args, "--print-config", env=env or environment())
    assert done.returncode == 0, done.stderr
    command = args[0]
    values = tomllib.loads(done.stdout)[command]
    sources = {}
    for line in done.stdout.splitlines():
        if " = " in line and not line.startswith("#"):
            key, _, rest = line.partition(" = ")
            sources[key] = (values[key], rest.rsplit("  # ", 1)[1])
    return sources


def test_the_guide_table_is_made_from_the_declarations() -> None:
    """The settings page shows the table the docs build makes from the commands' parsers (its directive), which
    has every knob; the flow limits are told on the flow-control page."""
    assert ".. generaldomo-settings::" in (GUIDE / "reference" / "settings.rst").read_text()
    table = settings_table()
    for knob in (*knobs.SETTINGS, *knobs.PEER):
        assert f'"``{knob.name}``", "``{knob.option}``", "``{knob.variable}``"' in table, knob.name
    flow = (GUIDE / "howto" / "flow-control.rst").read_text()
    for knob in FLOW:
        assert f"``{knob.option}" in flow or f"{knob.name}=" in flow, knob.name


def test_flags_win_over_the_environment_which_wins_over_the_file(tmp_path: Path) -> None:
    config = tmp_path / "generaldomo.toml"
    config.write_text(
        "heartbeat_interval = 1.5\ntimeout = 3\n\n[broker]\nmax_workers = 77\nqueue-timeout = 30\n"
        'flow = ["echo:rate=5"]\nbind = "tcp://127.0.0.1:*"\n'
    )
    given = environment(GENERALDOMO_MAX_WORKERS="88", GENERALDOMO_BEACON="yes")
    shown = printed("broker", "--config", str(config), "--max-workers", "99", env=given)
    assert shown["max_workers"] == (99, "flag --max-workers")
    assert shown["beacon"] == (True, "GENERALDOMO_BEACON")
    assert shown["queue_timeout"] == (30.0, f"{config}:[broker] queue-timeout")
    assert shown["heartbeat_interval"] == (1.5, f"{config}:heartbeat_interval")
    assert shown["bind"] == (["tcp://127.0.0.1:*"], f"{config}:[broker] bind")
    assert shown["flow"] == (["echo:rate=5"], f"{config}:[broker] flow")
    assert shown["max_frames"] == (1024, "default") and shown["service_idle"] == (60.0, "default")
    assert printed("broker", "--config", str(config), env=given)["max_workers"] == (88, "GENERALDOMO_MAX_WORKERS")
    unset = environment(GENERALDOMO_MAX_WORKERS="")
    assert printed("broker", "--config", str(config), env=unset)["max_workers"] == (
        77,
        f"{config}:[broker] max_workers",
    )
    assert printed("broker", env=environment(GENERALDOMO_CONFIG=str(config)))["max_workers"][0] == 77
    client = printed("client", "--config", str(config))
    assert client["heartbeat_interval"] == (1.5, f"{config}:heartbeat_interval") and client["timeout"][0] == 3.0
    assert "max_workers" not in client and "fetch" not in client  # not the client's; one run's, not a setting
    worker = printed("worker", "--concurrency", "4", env=environment(GENERALDOMO_CONFIG=str(config)))
    assert worker["concurrency"] == (4, "flag --concurrency") and worker["heartbeat_interval"][0] == 1.5
    older = environment(GENERALDOMO_BROKER="tcp://127.0.0.1:9", GENERALDOMO_CURVE_TRUST_ANNOUNCED="1")
    shown = printed("client", env=older)  # the older variables keep their names
    assert shown["connect"] == (["tcp://127.0.0.1:9"], "GENERALDOMO_BROKER")
    assert shown["trust_announced_key"] == (True, "GENERALDOMO_CURVE_TRUST_ANNOUNCED")


def test_print_config_is_a_file_that_config_reads(tmp_path: Path) -> None:
    flags = ("--max-workers", "5", "--flow", "a:rate=1", "--queue-bytes", "none", "--print-config")
    first = run("broker", *flags, env=environment())
    assert first.returncode == 0, first.stderr
    saved = tmp_path / "saved.toml"
    saved.write_text(first.stdout)
    again = printed("broker", "--config", str(saved))
    assert again["max_workers"] == (5, f"{saved}:[broker] max_workers")
    assert again["flow"][0] == ["a:rate=1"] and again["queue_bytes"][0] == "none"


def test_one_word_one_meaning_none_lifts_a_limit_auto_is_a_worked_out_default(tmp_path: Path) -> None:
    """``--print-config`` writes ``auto`` for a default worked out from other settings (client_expiry,
    recovery) and ``none`` only for a lifted limit (max_workers); files that say ``none`` for those still read."""
    shown = printed("broker", "--max-workers", "none")
    assert shown["max_workers"] == ("none", "flag --max-workers")
    assert shown["client_expiry"] == ("auto", "default") and shown["recovery"] == ("auto", "default")
    for knob in knobs.SETTINGS:
        if knob.nullable and shown[knob.name][0] in ("none", "auto"):
            assert shown[knob.name][0] == ("auto" if knob.derived else "none"), knob.name
    older = tmp_path / "older.toml"
    older.write_text('[broker]\nclient_expiry = "none"\nrecovery = "none"\n')
    again = printed("broker", "--config", str(older), "--client-expiry", "auto")
    assert again["client_expiry"] == ("auto", "flag --client-expiry")
    assert again["recovery"] == ("auto", f"{older}:[broker] recovery")
    refused = run("broker", "--max-workers", "auto", "--print-config", env=environment())
    assert refused.returncode == 2 and "or none (no limit)" in refused.stderr, refused.stderr
    assert declaration.text(LIMITS, {"rate": None, "backoff": None}) == "rate=none,backoff=auto"
    assert declaration.changes(LIMITS, "rate=none,backoff=auto") == {"rate": None, "backoff": None}


def test_a_broker_worker_and_client_run_from_one_file_and_the_environment(tmp_path: Path, processes) -> None:
    config = tmp_path / "generaldomo.toml"
    config.write_text(
        f'heartbeat_interval = 0.5\n\n[broker]\nbind = ["ipc://{tmp_path}/broker.sock"]\nmax_workers = 77\n'
        "[broker.flow.cfg-echo]\nrate = 50\nbackoff = {min = 1, max = 40}\ntenants = {alice = {weight = 3}}\n\n"
        f'[worker]\nconnect = ["ipc://{tmp_path}/broker.sock"]\nservice = ["cfg-echo"]\n\n'
        "[client]\nfail_unknown = false\n"  # --wait-for-service: the worker may still be starting
    )
    given = environment(GENERALDOMO_KEEP_ANSWERS="7.5", GENERALDOMO_CONFIG=str(config))
    broker = spawn(processes, "broker", "--max-frames", "99", env=given)
    endpoint = expect(lines(broker.stdout), "generaldomo broker: router").split()[-1]
    assert endpoint == f"ipc://{tmp_path}/broker.sock"
    spawn(processes, "worker", env=given)
    client_env = environment(GENERALDOMO_BROKER=endpoint, GENERALDOMO_TIMEOUT="30")
    answered = run("client", "--config", str(config), "cfg-echo", "from the file", env=client_env)
    assert answered.returncode == 0 and answered.stdout == "from the file\n", answered.stderr
    with Client(endpoint) as client:
        settings = client.status(timeout=30)["broker"]["settings"]
        flow = client.flow("cfg-echo", timeout=30)
    assert (settings["max_workers"], settings["keep_answers"], settings["max_frames"]) == (77, 7.5, 99)
    assert settings["heartbeat_interval"] == 0.5
    assert flow["rate"] == 50 and flow["backoff"] == {"min": 1, "max": 40} and flow["tenants"]["alice"]["weight"] == 3


@pytest.mark.parametrize(
    ("text", "variables", "message"),
    [
        ('[broker]\nmax_workers = "lots"\n', {}, "{file}:[broker] max_workers: max_workers must be a whole number"),
        ("[broker]\nmax_worker = 3\n", {}, "{file}: [broker] has no setting 'max_worker'; did you mean 'max_workers'?"),
        ("colour = 3\n", {}, "{file}: unknown setting 'colour'"),
        ('[broker]\ntransport = "tcp"\n', {}, "{file}:[broker] transport: 'tcp' is not one of router, server"),
        ("[broker\n", {}, "{file}: not a TOML file"),
        (
            "",
            {"GENERALDOMO_LIVENESS": "0"},
            "GENERALDOMO_LIVENESS: liveness must be a whole number (at least 1, at most 1000)",
        ),
        ("", {"GENERALDOMO_BEACON": "perhaps"}, "GENERALDOMO_BEACON: true or false expected"),
        ("", {"GENERALDOMO_CONNECTION_WORKER_SHARE": "0.9"}, "connection_worker_share must be a number"),
        ("[broker.flow.echo]\nrate = 0\n", {}, "{file}:[broker] flow: 'echo:rate=0': rate must be a number"),
        ('[broker]\nflow = "echo:colour=3"\n', {}, "{file}:[broker] flow: 'echo:colour=3': unknown flow limit"),
    ],
)
def test_a_bad_setting_names_its_source_and_exits_2(tmp_path: Path, text: str, variables: dict, message: str) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(text)
    done = run("broker", "--config", str(config), "--bind", "tcp://127.0.0.1:*", env=environment(**variables))
    assert done.returncode == 2 and message.format(file=config) in done.stderr, done.stderr
    assert done.stdout == ""  # it stopped before binding anything


def test_a_missing_file_exits_2(tmp_path: Path) -> None:
    done = run("worker", "--config", str(tmp_path / "absent.toml"), env=environment())
    assert done.returncode == 2 and f"cannot read the configuration file {tmp_path / 'absent.toml'}" in done.stderr


def test_help_names_config_and_print_config() -> None:
    for command in ("broker", "worker", "client", "status", "flow", "dashboard", "bridge"):
        shown = run(command, "--help").stdout
        assert "--config PATH" in shown and "--print-config" in shown, command


def test_the_guide_example_file_reads_as_the_guide_says(tmp_path: Path) -> None:
    config = tmp_path / "generaldomo.toml"
    config.write_text(named("config-file"))
    shown = printed("broker", "--config", str(config), "--queue-timeout", "10", env=environment())
    spec = "api:rate=20,backoff=1..50,tenants.batch.weight=1,retry=retries=3/backoff=0.5..30"
    assert shown["flow"] == ([spec], f"{config}:[broker] flow")
    assert shown["max_workers"][0] == 5000 and shown["service_idle"][0] == "none"
    assert shown["queue_timeout"] == (10.0, "flag --queue-timeout") and shown["heartbeat_interval"][0] == 1.0
    assert printed("client", "--config", str(config), env=environment())["timeout"][0] == 30.0


def test_every_command_with_settings_reads_them_the_same_way(tmp_path: Path) -> None:
    config = tmp_path / "peers.toml"
    config.write_text(
        'transport = "server"\ntimeout = 7\nheartbeat_interval = 0.75\nconnect = ["tcp://127.0.0.1:9"]\n\n'
        '[status]\nfind-timeout = 3\n\n[dashboard]\nhttp = "127.0.0.1:0"\nshown_workers = 12\n'
        'token = "0123456789abcdef-file"\n\n'
        '[bridge]\nserver = ["tcp://127.0.0.1:*"]\nmdp_broker = "tcp://127.0.0.1:7"\n'
    )
    given = environment(GENERALDOMO_CONFIG=str(config), GENERALDOMO_INTERVAL="2.5")
    status = printed("status", env=given)
    assert status["transport"] == ("server", f"{config}:transport") and status["timeout"][0] == 7.0
    assert status["find_timeout"] == (3.0, f"{config}:[status] find-timeout")
    assert status["connect"] == (["tcp://127.0.0.1:9"], f"{config}:connect")
    assert "json" not in status and "watch" not in status  # what one run shows, not a setting
    flow = printed("flow", "--timeout", "4", env=given)  # no service needed to print the settings
    assert flow["timeout"] == (4.0, "flag --timeout") and flow["transport"][0] == "server"
    assert "rate" not in flow and "create" not in flow  # the limits one run changes
    dashboard = run("dashboard", "--print-config", env=given)
    assert dashboard.returncode == 0 and "0123456789abcdef-file" not in dashboard.stdout, dashboard.stdout
    assert f"# token is set (not shown)  # {config}:[dashboard] token" in dashboard.stdout
    shown = printed("dashboard", env=given)
    assert shown["interval"] == (2.5, "GENERALDOMO_INTERVAL") and shown["shown_workers"][0] == 12
    assert shown["http"][0] == "127.0.0.1:0" and shown["timeout"][0] == 7.0
    secret = run("dashboard", "--print-config", env={**given, "GENERALDOMO_DASHBOARD_TOKEN": "fedcba9876543210-env"})
    assert (
        "fedcba9876543210-env" not in secret.stdout
        and "token is set (not shown)  # GENERALDOMO_DASHBOARD_TOKEN" in (secret.stdout)
    )
    bridge = printed("bridge", "--max-in-flight", "9", env={**given, "GENERALDOMO_IDLE_TIMEOUT": "5"})
    assert bridge["mdp_broker"] == ("tcp://127.0.0.1:7", f"{config}:[bridge] mdp_broker")
    assert bridge["server"][0] == ["tcp://127.0.0.1:*"] and bridge["heartbeat_interval"][0] == 0.75
    assert bridge["max_in_flight"] == (9, "flag --max-in-flight") and bridge["idle_timeout"] == (
        5.0,
        "GENERALDOMO_IDLE_TIMEOUT",
    )
    assert "transport" not in bridge  # the bridge has no such setting: the file's top-level key is not its


def test_the_bridge_needs_its_endpoints_from_somewhere(tmp_path: Path) -> None:
    done = run("bridge", "--server", "tcp://127.0.0.1:*", env=environment())
    assert done.returncode == 2 and "--broker (mdp_broker, GENERALDOMO_MDP_BROKER)" in done.stderr, done.stderr
    assert "--server" not in done.stderr.split("required:", 1)[1]
    config = tmp_path / "bad.toml"
    done = run("flow", "--rate", "3", env=environment())
    assert done.returncode == 2 and "flow needs the SERVICE" in done.stderr, done.stderr
    config.write_text("[status]\nwatch = 1\n")  # one run's option, not a setting
    done = run("status", "--config", str(config), env=environment())
    assert done.returncode == 2 and "[status] has no setting 'watch'" in done.stderr, done.stderr
    config.write_text('[dashboard]\ninterval = "often"\n')
    done = run("dashboard", "--config", str(config), env=environment())
    assert done.returncode == 2 and f"{config}:[dashboard] interval" in done.stderr, done.stderr


@pytest.mark.needs_draft  # the bridge binds a SERVER socket
def test_status_flow_dashboard_and_a_server_bridge_run_from_a_file(tmp_path: Path, processes) -> None:
    config = tmp_path / "generaldomo.toml"
    config.write_text(
        f'heartbeat_interval = 0.5\ntimeout = 30\nconnect = ["ipc://{tmp_path}/broker.sock"]\n\n'
        f'[broker]\nbind = ["ipc://{tmp_path}/broker.sock"]\n\n[worker]\nservice = ["cfg-peers"]\n\n'
        '[dashboard]\nhttp = "127.0.0.1:0"\ninterval = 0.5\n\n'
        f'[bridge]\nserver = ["ipc://{tmp_path}/bridge.sock"]\nmdp_broker = "ipc://{tmp_path}/broker.sock"\n'
    )
    given = environment(GENERALDOMO_CONFIG=str(config))
    broker = spawn(processes, "broker", env=given)
    expect(lines(broker.stdout), f"generaldomo broker: router ipc://{tmp_path}/broker.sock")
    spawn(processes, "worker", env=given)
    with Client(f"ipc://{tmp_path}/broker.sock") as client:  # the worker has registered
        served(client, "cfg-peers")
    status = run("status", "--json", env=given)
    assert status.returncode == 0, status.stderr
    assert any(s["name"] == "cfg-peers" for s in json.loads(status.stdout)["services"])
    changed = run("flow", "cfg-peers", "--rate", "40", env=given)
    assert changed.returncode == 0 and '"rate": 40' in changed.stdout, changed.stderr
    dashboard = spawn(processes, "dashboard", env=given)
    url = expect(lines(dashboard.stdout), "generaldomo dashboard: http://127.0.0.1:").split()[2]
    frame = eventually(lambda: latest(url), 60, "the dashboard's first frame")
    assert any(s["name"] == "cfg-peers" for s in frame["services"]), frame
    bridge = spawn(processes, "bridge", env=given)
    expect(lines(bridge.stdout), f"generaldomo bridge: server ipc://{tmp_path}/bridge.sock -> MDP/0.1 broker")
    with Client(f"ipc://{tmp_path}/bridge.sock", "server") as client:
        assert client.request("cfg-peers", b"through the bridge", timeout=30).payload == b"through the bridge"


def test_every_command_with_settings_is_configurable_and_requires_through_the_command() -> None:

    parser()
    assert {c.name for c in COMMANDS if not c.configurable} == {"demo", "doctor", "keygen"}  # one run's options only
    for command in COMMANDS:
        if command.configurable:  # argparse's required=True would refuse a value from the file or the environment
            assert not [a.dest for a in _SUBPARSERS[command.name]._actions if a.required and a.option_strings]
            keys = {o.key for o in config.options_of(_SUBPARSERS[command.name], command.per_run)}
            assert set(command.required) <= keys and set(command.hidden) <= keys, command.name

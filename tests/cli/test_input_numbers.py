"""Numbers and secrets from flags, GENERALDOMO_* variables and configuration files, in-process (the parsing a
command does before it runs): every number goes through its knob (typed, finite, bounded), a bad one ends in exit
2 with one line naming its source, and no error or --print-config shows a secret."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from generaldomo.cli import _SUBPARSERS, main, parser
from generaldomo.sansio.broker.flow.flow import FLOW
from generaldomo.sansio.config import knobs

Z85_SECRET = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"
TOKEN = "a-dashboard-token-of-some-length"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("GENERALDOMO_") and name not in ("GENERALDOMO_PURE_PYTHON", "GENERALDOMO_CACHE"):
            monkeypatch.delenv(name)


def outcome(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Exit status, stdout and stderr of ``generaldomo ARGV`` run in this process (argparse's exit included)."""
    try:
        status = main(list(argv))
    except SystemExit as exit:
        status = int(exit.code or 0)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def one_line_naming(err: str, source: str) -> bool:
    """The error is one line (after argparse's usage lines, for a flag) that names ``source``."""
    told = [line for line in err.splitlines() if "error" in line or line.startswith("generaldomo:")]
    return len(told) == 1 and source in told[0] and "Traceback" not in err


def test_every_number_of_every_command_is_read_by_a_knob() -> None:
    parser()
    loose = []
    for name, sub in _SUBPARSERS.items():
        for action in sub._actions:
            if action.type in (int, float) or (
                action.nargs != 0 and action.type is None and action.dest in knobs.COMMANDS
            ):
                loose.append(f"{name} {action.option_strings}")
    assert not loose, f"numbers read without their knob: {loose}"
    named = {knob.name for knob in (*knobs.SETTINGS, *knobs.PEER, *knobs.COMMAND)}
    for sub in _SUBPARSERS.values():
        for action in sub._actions:
            if getattr(action.type, "__name__", "") in named:
                assert action.type.__name__ == action.dest or action.dest == "tenants"


def test_every_number_knob_is_finite_and_bounded() -> None:
    for knob in (*knobs.SETTINGS, *knobs.PEER, *knobs.COMMAND, *FLOW, *knobs.TENANT):
        if knob.kind in (knobs.Kind.INT, knobs.Kind.FLOAT):
            assert knob.high is not None, knob.name
            for text in ("nan", "inf", "-inf", "1e400", "9" * 5000):
                with pytest.raises(ValueError):
                    knob.parse(text)


FLAGS = [
    ("broker", "--beacon-interval", "0"),
    ("broker", "--beacon-interval", "-1"),
    ("broker", "--beacon-interval", "nan"),
    ("dashboard", "--interval", "nan"),
    ("client", "--timeout", "inf"),
    ("status", "--timeout", "inf"),
    ("flow", "--timeout", "inf"),
    ("dashboard", "--timeout", "inf"),
    ("client", "--heartbeat", "inf"),
    ("worker", "--heartbeat", "inf"),
    ("client", "--find-timeout", "nan"),
    ("worker", "--find-timeout", "nan"),
    ("broker", "--metrics-port", "70000"),
    ("broker", "--beacon-port", "-1"),
    ("worker", "--concurrency", "0"),
    ("status", "--watch", "nan"),
]


@pytest.mark.parametrize(("command", "flag", "value"), FLAGS)
def test_a_bad_number_flag_exits_2_naming_it(capsys, command: str, flag: str, value: str) -> None:
    status, _, err = outcome(capsys, command, flag, value, *_positionals(command))
    assert status == 2 and one_line_naming(err, flag), err


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-1"])
def test_the_dashboard_interval_from_a_variable_or_a_file_exits_2_naming_it(
    capsys, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, value: str
) -> None:
    monkeypatch.setenv("GENERALDOMO_INTERVAL", value)
    status, _, err = outcome(capsys, "dashboard")
    assert status == 2 and one_line_naming(err, "GENERALDOMO_INTERVAL"), err
    monkeypatch.delenv("GENERALDOMO_INTERVAL")
    path = tmp_path / "dash.toml"
    path.write_text(f"[dashboard]\ninterval = {value}\n")
    status, _, err = outcome(capsys, "dashboard", "--config", str(path))
    assert status == 2 and one_line_naming(err, f"{path}:[dashboard] interval"), err


def test_a_file_nested_5000_deep_exits_2_in_one_line(capsys, tmp_path: Path) -> None:
    path = tmp_path / "deep.toml"
    path.write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    status, _, err = outcome(capsys, "broker", "--config", str(path))
    assert status == 2 and one_line_naming(err, str(path)) and len(err.splitlines()) == 1, err[-2000:]


@pytest.mark.parametrize("variable", ["GENERALDOMO_CURVE_KEY", "GENERALDOMO_CURVE_SECRET"])
def test_a_secret_key_in_a_variable_is_never_echoed(capsys, monkeypatch: pytest.MonkeyPatch, variable: str) -> None:
    monkeypatch.setenv(variable, Z85_SECRET)
    command = "client" if variable.endswith("KEY") else "broker"
    extra = ["--curve-server-key", "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"[::-1]] if command == "client" else []
    status, out, err = outcome(capsys, command, "--print-config", *extra)
    assert status == 0 and Z85_SECRET not in out and "is set (not shown)" in out
    args = ["--workers", "."] if command == "broker" else ["--connect", "tcp://127.0.0.1:9", "echo", "x"]
    status, out, err = outcome(capsys, command, *args)
    assert status == 2 and Z85_SECRET not in out + err and "not shown" in err, err


def test_a_token_in_a_file_is_never_echoed_in_its_error(capsys, tmp_path: Path) -> None:
    path = tmp_path / "dash.toml"
    path.write_text(f'[dashboard]\ntoken = ["{TOKEN}"]\n')
    status, out, err = outcome(capsys, "dashboard", "--config", str(path))
    assert status == 2 and TOKEN not in out + err and one_line_naming(err, f"{path}:[dashboard] token"), err
    status, out, _ = outcome(capsys, "dashboard", "--token", TOKEN, "--print-config")
    assert status == 0 and TOKEN not in out


def test_the_token_flag_says_it_is_seen_by_other_users(capsys) -> None:
    status, out, _ = outcome(capsys, "dashboard", "--help")
    assert status == 0 and "/proc/PID/cmdline" in out and "GENERALDOMO_DASHBOARD_TOKEN" in out


def _positionals(command: str) -> list[str]:
    return {"client": ["echo", "x"], "worker": ["tests.apps:echo"], "flow": ["echo"]}.get(command, [])


def test_print_config_writes_a_file_config_reads_whatever_the_text(capsys) -> None:
    """A control character TOML refuses bare (DEL, which JSON's escapes leave as it is) is written escaped."""
    import tomllib

    status, out, _ = outcome(capsys, "worker", "--tag", "a\x7fb\x1bc", "--print-config")
    assert status == 0 and tomllib.loads(out)["worker"]["tag"] == "a\x7fb\x1bc"


@pytest.mark.parametrize("value", ["-1", "0", "70000", "nan", "port"])
def test_a_bad_beacon_port_variable_exits_2_naming_it(capsys, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("GENERALDOMO_BEACON_PORT", value)
    status, _, err = outcome(capsys, "client", "--discover", "--find-timeout", "1", "echo", "x")
    assert status == 2 and one_line_naming(err, "GENERALDOMO_BEACON_PORT"), err

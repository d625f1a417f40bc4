"""A fuzzer over what surrounds the wire: flag values, GENERALDOMO_* variables and configuration files of every
command (types, ranges, NaN, infinities, huge and nested values), each ending in exit 0 or in exit 2 with one line
naming its source, never a traceback; and beacons and address files, decoded to usable endpoints only, and fed to
a listening worker that must survive them and find its broker afterwards.

The commands are parsed in this process with ``--print-config`` (everything a command reads before it runs, and
nothing run), so that the CI profile stays short on a loaded machine; one live worker takes the beacons."""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import socket
import tempfile
import time
import tomllib
import uuid
from pathlib import Path
from typing import Any

import pytest
from following import FAST, PEER, beacon_port, serve, silence
from fuzz_profiles import fuzz_settings
from hypothesis import given
from hypothesis import strategies as st
from restart_harness import WAIT
from waiting import eventually

from generaldomo import Broker, Worker
from generaldomo.cli import _SUBPARSERS, COMMANDS, main, parser
from generaldomo.io import address_file, endpoints, files
from generaldomo.io.beacon import MAGIC, VERSION, decode
from generaldomo.io.peer.locator import Where, _Beacons
from generaldomo.sansio.config import knobs

parser()
CONFIGURABLE = [command.name for command in COMMANDS if command.configurable]
OTHERS = [command.name for command in COMMANDS if not command.configurable]
NUMBERS = knobs.by_name((*knobs.SETTINGS, *knobs.PEER, *knobs.COMMAND))
_SKIPPED = {"help", "version", "config", "print_config", "more_verbose", "log_file", "log_format"}


def _valued(name: str) -> list[tuple[str, str]]:
    """``(flag, destination)`` of each option of command ``name`` that takes a value."""
    found = []
    for action in _SUBPARSERS[name]._actions:
        longs = [s for s in action.option_strings if s.startswith("--")]
        if longs and action.nargs != 0 and action.dest not in _SKIPPED:
            found.append((longs[0], action.dest))
    return found


FLAGS = {name: _valued(name) for name in CONFIGURABLE + OTHERS}
NUMBER_TEXT = st.one_of(
    st.sampled_from(["nan", "NaN", "inf", "-inf", "+inf", "1e400", "-1e400", "0", "-0", "-1", "1e-400", "none", ""]),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(alphabet="0123456789.eE+-_x ", max_size=30),
)
TEXT = st.one_of(NUMBER_TEXT, st.text(max_size=40), st.text(min_size=500, max_size=2000))
TOML_SCALAR = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.text(max_size=30),
)
TOML_VALUE = st.recursive(
    TOML_SCALAR,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text("abc_", min_size=1, max_size=5), inner, max_size=3)
    ),
    max_leaves=12,
)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("GENERALDOMO_") and name not in (
            "GENERALDOMO_PURE_PYTHON",
            "GENERALDOMO_CACHE",
            "GENERALDOMO_FUZZ",
        ):
            monkeypatch.delenv(name)


def outcome(argv: list[str]) -> tuple[int, str]:
    """Exit status and stderr of ``generaldomo ARGV --print-config`` in this process; at exit 0, the settings it
    prints are checked: a TOML file again, every number within its knob's bounds."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(argv)
        except SystemExit as exit:
            status = exit.code if isinstance(exit.code, int) else 2
    if status == 0 and "--print-config" in argv:
        printed = tomllib.loads(out.getvalue())[argv[0]]
        for key, value in printed.items():
            knob = NUMBERS.get(key)
            if knob is not None:  # ValueError: a number out of its bounds was taken
                knob.parse(value) if isinstance(value, str) else knob.check(value)  # (text: none, auto)
    return status, err.getvalue()


def assert_ends_well(status: int, err: str, source: str) -> None:
    """Exit 0, or exit 2 with one line of error that names ``source`` (argparse's usage lines aside)."""
    assert "Traceback" not in err, err
    if status == 0:
        return
    told = [line for line in err.splitlines() if not line.startswith(("usage:", " "))]
    assert status == 2 and len(told) == 1 and source in told[0], (status, err)


@fuzz_settings(40)
@given(data=st.data())
def test_any_flag_value_of_any_command_exits_0_or_2_naming_the_flag(data: st.DataObject) -> None:
    command = data.draw(st.sampled_from(CONFIGURABLE), label="command")
    flag, _ = data.draw(st.sampled_from(FLAGS[command]), label="flag")
    value = data.draw(TEXT, label="value")
    status, err = outcome([command, f"{flag}={value}", "--print-config"])
    assert_ends_well(status, err, flag)


@fuzz_settings(25)
@given(data=st.data())
def test_any_variable_of_any_command_exits_0_or_2_naming_the_variable(data: st.DataObject) -> None:
    command = data.draw(st.sampled_from(CONFIGURABLE), label="command")
    _, key = data.draw(st.sampled_from(FLAGS[command]), label="setting")
    from generaldomo.cli.options import VARIABLES

    variable = VARIABLES.get(key, "GENERALDOMO_" + key.upper())
    value = data.draw(TEXT.filter(lambda text: "\x00" not in text), label="value")
    os.environ[variable] = value
    try:
        status, err = outcome([command, "--print-config"])
    finally:
        del os.environ[variable]
    assert_ends_well(status, err, variable)


@fuzz_settings(30)
@given(data=st.data())
def test_any_configuration_file_exits_0_or_2_naming_the_file(data: st.DataObject) -> None:
    command = data.draw(st.sampled_from(CONFIGURABLE), label="command")
    keys = st.one_of(
        st.sampled_from([key for _, key in FLAGS[command]]),
        st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12),
    )
    table = data.draw(st.dictionaries(keys, TOML_VALUE, max_size=4), label="table")
    top = data.draw(st.booleans(), label="top level")
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "generaldomo.toml"
        path.write_text(_toml(table if top else {command: table}))
        status, err = outcome([command, "--config", str(path), "--print-config"])
    assert_ends_well(status, err, str(path))


@pytest.mark.parametrize("shape", ["array", "table"])
def test_a_deeply_nested_configuration_file_exits_2_naming_the_file(tmp_path: Path, shape: str) -> None:
    path = tmp_path / "deep.toml"
    opened, closed = ("[", "]") if shape == "array" else ("{a = ", "}")
    path.write_text("colour = " + opened * 5000 + "1" + closed * 5000 + "\n")
    status, err = outcome(["worker", "--config", str(path), "--print-config"])
    assert_ends_well(status, err, str(path))
    assert status == 2


@fuzz_settings(40)
@given(command=st.sampled_from(OTHERS), data=st.data())
def test_the_flags_of_commands_without_settings_exit_0_or_2(command: str, data: st.DataObject) -> None:
    if not FLAGS[command]:
        return
    flag, _ = data.draw(st.sampled_from(FLAGS[command]), label="flag")
    value = data.draw(TEXT, label="value")
    try:
        parser().parse_args([command, f"{flag}={value}"])
    except SystemExit as exit:
        assert exit.code == 2


ENDPOINT = st.one_of(
    st.sampled_from(["bogus://x", "tcp://127.0.0.1:notaport", "tcp://*:1", "inproc://x", "ipc://", "tcp://:1", "tcp://h:0",
                     "tcp://127.0.0.1:65536", "tcp://[::1]:5", "tcp://127.0.0.1:1"]),
    st.text(max_size=40),
    st.integers(),
    st.none(),
    st.lists(st.text(max_size=5), max_size=2),
)  # fmt: skip
ANNOUNCEMENT = st.fixed_dictionaries(
    {
        "name": st.one_of(st.text(max_size=20), st.integers(), st.none()),
        "instance": st.one_of(st.text(max_size=10), st.integers()),
        "endpoints": st.one_of(
            st.lists(
                st.one_of(
                    st.fixed_dictionaries(
                        {"transport": st.sampled_from(["router", "server", 3]), "endpoint": ENDPOINT}
                    ),
                    ENDPOINT,
                ),
                max_size=4,
            ),
            ENDPOINT,
        ),
        "public_key": st.one_of(st.none(), st.text(max_size=45), st.integers(), st.just("#" * 40), st.just("k" * 40)),
    }
)


def _datagram(body: dict[str, Any]) -> bytes:
    return MAGIC + bytes([VERSION]) + json.dumps(body).encode()


@fuzz_settings(200)
@given(body=ANNOUNCEMENT)
def test_announcements_decode_to_usable_endpoints_only(body: dict[str, Any]) -> None:
    heard = decode(_datagram(body), "127.0.0.1")
    address = None
    try:
        address = address_file.decode(json.dumps({"version": 1, **body}).encode())
    except ValueError:
        pass
    for found in (heard, address):
        if found is None:
            continue
        for _, endpoint in found.endpoints:
            assert endpoints.announced_problem(endpoint) is None
            endpoints.check(endpoint, bind=False)
        assert found.public_key is None or len(found.public_key) == 40


def test_a_listening_worker_survives_any_beacons_and_finds_its_broker_after(monkeypatch: pytest.MonkeyPatch) -> None:
    port = beacon_port(monkeypatch)
    name = f"fuzz-{uuid.uuid4().hex[:8]}"
    first = Broker("router", ["tcp://127.0.0.1:*"], settings=FAST).start()
    first.announce(name, destination="127.0.0.1", port=port, interval=0.1)
    worker = Worker(Where(beacon=True, name=name, timeout=WAIT), "echo", lambda p: p, "router", **PEER)
    serving = serve(worker)
    second = None
    try:
        eventually(lambda: bool(first.core.workers), WAIT)
        silence(first)  # the worker listens for beacons once it notices
        eventually(lambda: _Beacons._shared, WAIT, "the worker listening for beacons again")

        @fuzz_settings(10, live=True)
        @given(bodies=st.lists(ANNOUNCEMENT, min_size=1, max_size=15), named=st.booleans())
        def feed(bodies: list[dict[str, Any]], named: bool) -> None:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
                for body in bodies:
                    sender.sendto(_datagram({**body, "name": name} if named else body), ("127.0.0.1", port))
                sender.sendto(MAGIC + bytes([VERSION]) + os.urandom(64), ("127.0.0.1", port))
            assert serving.is_alive()

        feed()
        second = Broker("router", ["tcp://127.0.0.1:*"], settings=FAST).start()
        second.announce(name, destination="127.0.0.1", port=port, interval=0.1)
        eventually(lambda: bool(second.core.workers), WAIT, "the worker registering with the real broker")
        assert serving.is_alive()
    finally:
        worker.stop()
        serving.join(WAIT)
        if second is not None:
            second.stop()


def test_a_worker_following_an_address_file_survives_any_content_and_finds_its_broker_after(tmp_path: Path) -> None:
    path = tmp_path / "broker.json"
    first = Broker("router", ["tcp://127.0.0.1:*"], settings=FAST).start()
    address_file.write(path, address_file.BrokerAddress("b", "1", (("router", first.endpoint("router", "tcp")),)))
    where = Where(broker_file=str(path), timeout=WAIT)
    worker = Worker(where, "echo", lambda p: p, "router", **PEER)
    serving = serve(worker)
    second = None
    try:
        eventually(lambda: bool(first.core.workers), WAIT)
        silence(first)  # the worker reads the file again

        @fuzz_settings(10, live=True)
        @given(
            content=st.one_of(
                ANNOUNCEMENT.map(lambda body: json.dumps({"version": 1, **body}).encode()), st.binary(max_size=200)
            )
        )
        def feed(content: bytes) -> None:
            files.write(path, content)
            time.sleep(0.3)  # the worker looks at the file every second, and when the broker is silent
            assert serving.is_alive()

        feed()
        second = Broker("router", ["tcp://127.0.0.1:*"], settings=FAST).start()
        address_file.write(path, address_file.BrokerAddress("b", "2", (("router", second.endpoint("router", "tcp")),)))
        eventually(lambda: bool(second.core.workers), WAIT, "the worker registering with the real broker")
        assert serving.is_alive()
    finally:
        worker.stop()
        serving.join(WAIT)
        if second is not None:
            second.stop()


def _address_text(body: dict[str, Any]) -> bytes:
    return json.dumps({"version": 1, **body}).encode()


def _toml(data: dict[str, Any]) -> str:
    """``data`` as TOML: a top-level table's scalar and inline values, then its sub-tables."""
    lines, tables = [], []
    for key, value in data.items():
        if isinstance(value, dict) and value and all(not isinstance(v, dict) for v in value.values()):
            tables.append(
                f"[{json.dumps(key)}]\n" + "".join(f"{json.dumps(k)} = {_value(v)}\n" for k, v in value.items())
            )
        else:
            lines.append(f"{json.dumps(key)} = {_value(value)}\n")
    return "".join(lines) + "\n".join(tables)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{json.dumps(k)} = {_value(v)}" for k, v in value.items()) + "}"

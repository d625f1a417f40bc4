"""The one declaration per setting and limit (generaldomo.sansio.config.knobs) against everything made from it or
checked by it: Settings, FlowLimits, TenantLimits, the settings and flow reports, the CLI's help, the flow
specs, docs/status.schema.json and the metrics."""

from __future__ import annotations

import ast
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import attrs
import jsonschema
import pytest
from cli_processes import expect, lines, spawn

from generaldomo import Client
from generaldomo.cli.broker import parse_flow
from generaldomo.sansio.broker.core import BrokerCore
from generaldomo.sansio.broker.flow import declaration
from generaldomo.sansio.broker.flow.fair import TenantLimits
from generaldomo.sansio.broker.flow.flow import FLOW, LIMIT_NAMES, LIMITS, FlowLimits
from generaldomo.sansio.broker.report import FlowReport, SettingsReport, StatusReport
from generaldomo.sansio.config import knobs
from generaldomo.sansio.config.settings import PeerSettings, Settings

ROOT = Path(__file__).resolve().parents[3]
SCHEMA = json.loads((ROOT / "docs" / "status.schema.json").read_text())
SETTINGS_SCHEMA = SCHEMA["properties"]["broker"]["properties"]["settings"]["properties"]


def help_of(*command: str) -> str:
    run = subprocess.run([sys.executable, "-m", "generaldomo", *command, "--help"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return run.stdout


def _class_docstring(source: Path, name: str) -> str:
    """A class's docstring as its source has it (a compiled class's ``__doc__`` is its signature)."""
    tree = ast.parse(source.read_text())
    found = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == name)
    return ast.get_docstring(found) or ""


def test_every_settings_field_is_one_knob_with_its_default() -> None:
    fields = dataclasses.fields(Settings)
    assert [knob.name for knob in knobs.SETTINGS] == [field.name for field in fields]
    assert all(knob.default == field.default for knob, field in zip(knobs.SETTINGS, fields, strict=True))
    documented = _class_docstring(ROOT / "generaldomo" / "sansio" / "config" / "settings.py", "Settings")
    assert all(f"{field.name}:" in documented for field in fields), "each field has its Args line"
    peer = PeerSettings()
    assert {knob.name: knob.default for knob in knobs.PEER} == {"heartbeat_interval": 2.5, "liveness": peer.liveness}


def test_every_flow_limit_and_tenant_limit_is_one_knob() -> None:
    assert tuple(knob.name for knob in FLOW) == LIMIT_NAMES
    assert {field.name for field in dataclasses.fields(FlowLimits)} == set(LIMIT_NAMES)
    assert [knob.name for knob in knobs.TENANT] == [field.name for field in dataclasses.fields(TenantLimits)]
    assert [knob.default for knob in knobs.TENANT] == [field.default for field in dataclasses.fields(TenantLimits)]
    reported = {field.name for field in attrs.fields(FlowReport)}
    assert {knob.field for knob in FLOW} <= reported


def test_names_are_unique_and_follow_the_rules() -> None:
    for table in (knobs.SETTINGS, FLOW):
        for attribute in ("name", "option", "variable", "gauge"):
            names = [getattr(knob, attribute) for knob in table if getattr(knob, attribute) is not None]
            assert len(names) == len(set(names)), (attribute, names)
    for knob in knobs.SETTINGS:
        assert knob.variable == "GENERALDOMO_" + knob.name.upper() and knob.key == knob.name
        assert knob.help and knob.metavar and knob.check(knob.default) == knob.default


def test_the_report_shows_every_setting_with_its_value() -> None:
    floats = knobs.Kind.FLOAT
    changed = Settings(**{k.name: 0.125 if k.kind is floats else (k.default or 1) * 2 for k in knobs.SETTINGS})
    report = StatusReport.from_json(BrokerCore(settings=changed, random=bytes).report(0.0).to_json())
    shown = report.broker.settings
    assert isinstance(shown, SettingsReport)
    for knob in knobs.SETTINGS:
        assert knob.field is not None and getattr(shown, knob.field) == getattr(changed, knob.name), knob.name
    jsonschema.Draft202012Validator(SCHEMA).validate(json.loads(report.to_json()))


def test_the_schema_has_every_setting_with_its_type_and_bounds() -> None:
    for knob in knobs.SETTINGS:
        assert knob.field in SETTINGS_SCHEMA, knob.name
        declared = {key: value for key, value in SETTINGS_SCHEMA[knob.field].items() if key != "description"}
        assert declared == knob.json_schema(), knob.name
        assert SETTINGS_SCHEMA[knob.field].get("description"), knob.name


def test_the_cli_help_has_every_flag() -> None:
    broker = help_of("broker")
    for knob in knobs.SETTINGS:
        assert f"{knob.option} {knob.metavar}" in broker, knob.name
    assert all(name in broker for name in (knob.name for knob in FLOW if knob.name != "tenants"))
    for command in ("worker", "client", "bridge"):
        text = help_of(command)
        assert all(f"{knob.option} {knob.metavar}" in text for knob in knobs.PEER), command
    flow = help_of("flow", "")
    assert all(f"{knob.option} {knob.metavar}" in flow for knob in FLOW)


def test_text_is_read_within_the_bounds() -> None:
    by_name = knobs.by_name(knobs.SETTINGS)
    assert by_name["queue_bytes"].parse("none") is None and by_name["queue_bytes"].parse("12") == 12
    assert by_name["connection_worker_share"].parse("0.5") == 0.5
    for name, text in (("liveness", "0"), ("connection_worker_share", "0.6"), ("max_frames", "none"),
                       ("keep_answers", "nan"), ("max_workers", "1.5"), ("heartbeat_interval", "0")):  # fmt: skip
        with pytest.raises(ValueError, match=name):
            by_name[name].parse(text)


def test_a_flow_spec_takes_every_limit_that_mmi_flow_takes() -> None:
    spec = parse_flow(
        "shared:rate=20,burst=2,concurrency=8,bytes_in_flight=4096,adaptive=1..8,backoff=1..50,"
        "tenants.alice.weight=3,tenants.alice.concurrency=2,tenants.*.weight=1"
    )
    assert spec.limits == FlowLimits().merged(
        {
            "rate": 20, "burst": 2, "concurrency": 8, "bytes_in_flight": 4096, "adaptive": {"min": 1, "max": 8},
            "backoff": {"min": 1, "max": 50}, "tenants": {"alice": {"weight": 3, "concurrency": 2}, "*": {"weight": 1}},
        }
    )  # fmt: skip
    assert parse_flow("shared:backoff=2..").backoff.max is None
    changes = {"rate": 5.0, "backoff": {"min": 1.0, "max": None}, "adaptive": {"min": 1, "max": 64},
               "tenants": {"alice": {"weight": 3, "concurrency": 8}, "bob": None}}  # fmt: skip
    assert declaration.changes(LIMITS, declaration.text(LIMITS, changes)) == changes
    for bad in ("shared:tenants.alice.colour=3", "shared:tenants.alice.weight=0", "shared:backoff=5..1",
                "shared:tenants=3", "shared:rate=0"):  # fmt: skip
        with pytest.raises(ValueError, match="--flow"):
            parse_flow(bad)


def test_a_broker_flow_flag_sets_backoff_and_tenants(processes) -> None:
    spec = "shared:rate=20,backoff=1..50,tenants.alice.weight=3,tenants.bob.rate=2"
    broker = spawn(processes, "broker", "--bind", "tcp://127.0.0.1:*", "--flow", spec)
    endpoint = expect(lines(broker.stdout), "generaldomo broker: router").split()[-1]
    with Client(endpoint) as client:
        flow = client.flow("shared", timeout=30)
    assert flow["rate"] == 20 and flow["backoff"] == {"min": 1, "max": 50}
    assert flow["tenants"]["alice"]["weight"] == 3 and flow["tenants"]["bob"]["rate"] == 2


def test_the_metrics_name_each_setting_by_its_knob() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from generaldomo.io.hub.metrics import StatusCollector

    report = BrokerCore(settings=Settings(queue_timeout=None, max_workers=77), random=bytes).report(0.0)
    registry = CollectorRegistry()
    registry.register(StatusCollector(lambda: report))
    text = generate_latest(registry).decode()
    assert "generaldomo_setting_max_workers 77.0" in text
    assert "generaldomo_setting_queue_timeout_seconds" not in text  # None: no limit, no sample
    for knob in knobs.SETTINGS:
        if getattr(report.broker.settings, knob.name) is not None:
            assert f"# HELP {knob.gauge} " in text, knob.name

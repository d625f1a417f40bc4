"""A flow limit is declared once (generaldomo.sansio.broker.flow.flow.LIMITS) and every surface is made from it.

The dummy-limit test adds a limit the way a contributor would, by editing only ``flow.py`` (its declaration and
its field of ``FlowLimits``) in a copy of the package, and checks that it appears everywhere an operator or a
reader sees a limit: ``generaldomo flow`` and ``broker`` (flags, ``--flow`` text, help's example), ``mmi.flow``,
the status report and its schema, ``generaldomo status``, the dashboard's page (through HTTP), the metrics and
the guide's table. A surface written by hand would miss it and fail the test.
"""

from __future__ import annotations

import dataclasses
import html
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import attrs
import jsonschema
import pytest
from cli_processes import COMMAND, expect, lines
from dashboard_harness import request

import generaldomo
from generaldomo.sansio.broker.flow import declaration
from generaldomo.sansio.broker.flow.flow import LIMIT_NAMES, LIMITS, FlowLimits
from generaldomo.sansio.broker.report import FlowReport

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "docs" / "status.schema.json"
FLOW_PAGE = ROOT / "docs" / "howto" / "flow-control.rst"
sys.path.insert(0, str(ROOT / "tools"))
import flow_schema  # noqa: E402  (tools/ is no package)

# What a contributor writes in flow.py to add a limit: its bounds, its declaration and its field of FlowLimits.
DUMMY_BOUNDS = 'DUMMY_CAP = Field("dummy_cap", "dummy cap", 1, 100, Measure.VALUE, "400")\n'
DUMMY_DECLARATION = """    Limit(
        knob=knob(
            DUMMY_CAP, Kind.INT, "a dummy limit a test adds; 'none' lifts it",
            none_means="no limit", metavar="N", metric="service_dummy_cap_limit",
        ),
        field=DUMMY_CAP, example="3", description="A dummy limit a test adds.",
        control=Control(label="dummy cap", summary="dummy {value}"),
    ),
"""
DUMMY_FIELD = '    dummy_cap: int | None = LIMIT["dummy_cap"].record_field\n'


def test_the_records_have_a_field_per_declaration_in_its_order() -> None:
    assert LIMIT_NAMES == tuple(limit.name for limit in LIMITS)
    assert [field.name for field in dataclasses.fields(FlowLimits)] == [limit.name for limit in LIMITS]
    reported = [field.name for field in declaration.report_fields(LIMITS)]
    assert [field.name for field in attrs.fields(FlowReport)] == reported
    assert [name for name in reported if name in LIMIT_NAMES] == list(LIMIT_NAMES)


def test_the_schema_file_holds_the_schema_made_from_the_declarations() -> None:
    text = SCHEMA.read_text()
    assert json.loads(text)["$defs"]["service"]["properties"]["flow"] == declaration.schema(LIMITS)
    assert flow_schema.written(text) == text, "run python tools/flow_schema.py"


def test_the_guide_shows_the_table_made_from_the_declarations() -> None:
    assert ".. generaldomo-flow-limits::" in FLOW_PAGE.read_text()
    table = declaration.rst_table(LIMITS)
    for limit in LIMITS:
        assert f"``{limit.name}``" in table and f"``{limit.knob.option} {limit.knob.metavar}``" in table


@pytest.fixture(scope="module")
def dummy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The environment of a copy of the package whose flow.py alone declares one more limit, ``dummy_cap``."""
    root = tmp_path_factory.mktemp("dummy")
    package = Path(generaldomo.__file__).parent
    shutil.copytree(package, root / "generaldomo", ignore=shutil.ignore_patterns("__pycache__"))
    flow = root / "generaldomo" / "sansio" / "broker" / "flow" / "flow.py"
    text = flow.read_text()
    for anchor in ("LIMITS: Final[tuple[Limit, ...]] = (\n", ")  # fmt: skip\nLIMIT = {", "\n\n    def merged("):
        assert text.count(anchor) == 1, f"flow.py changed its shape: fix where this test adds its limit ({anchor!r})"
    start = "LIMITS: Final[tuple[Limit, ...]] = (\n"
    text = text.replace(start, DUMMY_BOUNDS + start)
    text = text.replace(")  # fmt: skip\nLIMIT = {", DUMMY_DECLARATION + ")  # fmt: skip\nLIMIT = {")
    text = text.replace("\n\n    def merged(", "\n" + DUMMY_FIELD + "\n    def merged(")
    text = "from generaldomo.sansio.wire.limits import Field, Measure\n" + text.replace(
        "from __future__ import annotations\n", ""
    )
    flow.write_text("from __future__ import annotations\n\n" + text)
    yield {**os.environ, "PYTHONPATH": str(root)}


def python(env: dict[str, str], code: str) -> str:
    """What ``code`` prints, run by this Python on the dummy's copy of the package (from its folder: Python
    puts the working directory first on the path)."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, cwd=env["PYTHONPATH"]
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``generaldomo ARGS`` of the dummy's copy, to its end."""
    folder = env["PYTHONPATH"]
    return subprocess.run([*COMMAND, *args], capture_output=True, text=True, env=env, timeout=120, cwd=folder)


def spawn(processes: list[subprocess.Popen[str]], *args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    """``generaldomo ARGS`` of the dummy's copy, started (the ``processes`` fixture ends it)."""
    process = subprocess.Popen(
        [*COMMAND, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=env["PYTHONPATH"]
    )
    processes.append(process)
    return process


def test_a_dummy_limit_declared_once_shows_in_the_made_surfaces(dummy: dict[str, str]) -> None:
    made = json.loads(
        python(
            dummy,
            "import json, attrs, dataclasses, generaldomo\n"
            "from generaldomo.sansio.broker.flow import declaration\n"
            "from generaldomo.sansio.broker.flow.flow import LIMITS, FlowLimits\n"
            "from generaldomo.sansio.broker.report import FlowReport\n"
            "from generaldomo.io.hub.metrics import _LIMITS\n"
            "limits = [f.name for f in dataclasses.fields(FlowLimits)]\n"
            "print(json.dumps({'package': generaldomo.__file__, 'limits': limits,"
            " 'report': [f.name for f in attrs.fields(FlowReport)], 'schema': declaration.schema(LIMITS),"
            " 'table': declaration.rst_table(LIMITS), 'gauges': sorted(_LIMITS)}))",
        )
    )
    assert made["package"].startswith(dummy["PYTHONPATH"])
    assert made["limits"][-1] == "dummy_cap" and "dummy_cap" in made["report"]
    assert made["schema"]["properties"]["dummy_cap"] == {
        "description": "A dummy limit a test adds.", "type": ["integer", "null"], "minimum": 1, "maximum": 100
    }  # fmt: skip
    assert "``dummy_cap``" in made["table"] and "``--dummy-cap N``" in made["table"]
    assert "generaldomo_service_dummy_cap_limit" in made["gauges"]
    flow_help = run("flow", "--help", env=dummy).stdout
    assert "--dummy-cap N" in flow_help and "a dummy limit a test adds" in flow_help
    broker_help = " ".join(run("broker", "--help", env=dummy).stdout.split())
    assert "dummy_cap=3" in broker_help and "dummy_cap" in broker_help.split("keys:")[1]
    refused = run("broker", "--flow", "echo:dummy_cap=101", "--print-config", env=dummy)
    assert refused.returncode == 2 and "dummy_cap" in refused.stderr, refused.stderr


def test_a_dummy_limit_is_set_reported_shown_and_served(dummy: dict[str, str], processes) -> None:
    broker = spawn(processes, "broker", "--bind", "tcp://127.0.0.1:*", "--flow", "echo:dummy_cap=3", env=dummy)
    endpoint = expect(lines(broker.stdout), "generaldomo broker: router").split()[-1]
    spawn(processes, "worker", "--connect", endpoint, "--service", "echo", env=dummy)
    changed = run("flow", "--connect", endpoint, "echo", "--dummy-cap", "7", "--create", "--timeout", "30", env=dummy)
    assert changed.returncode == 0, changed.stderr
    assert json.loads(changed.stdout)["dummy_cap"] == 7
    report = None
    for _ in range(60):  # the worker registers within seconds; each status waits up to 30 s
        shown = run("status", "--connect", endpoint, "--json", "--timeout", "30", env=dummy)
        assert shown.returncode == 0, shown.stderr
        report = json.loads(shown.stdout)
        if any(s["name"] == "echo" and s["workers"] for s in report["services"]):
            break
    assert report is not None
    (echo,) = [s for s in report["services"] if s["name"] == "echo"]
    assert echo["flow"]["dummy_cap"] == 7
    schema = json.loads(SCHEMA.read_text())
    schema["$defs"]["service"]["properties"]["flow"] = json.loads(
        python(
            dummy,
            "import json\nfrom generaldomo.sansio.broker.flow import declaration\n"
            "from generaldomo.sansio.broker.flow.flow import LIMITS\nprint(json.dumps(declaration.schema(LIMITS)))",
        )
    )
    jsonschema.Draft202012Validator(schema).validate(report)
    text = run("status", "--connect", endpoint, "--timeout", "30", env=dummy).stdout
    assert "echo: dummy cap 7" in text.splitlines(), text
    dashboard = spawn(processes, "dashboard", "--connect", endpoint, "--http", "127.0.0.1:0", env=dummy)
    url = expect(lines(dashboard.stdout), "generaldomo dashboard: http://").split()[2]
    status, _, body = request(url, "/")
    assert status == 200
    (served,) = re.findall(r'<meta name="flow-limits" content="([^"]*)">', body.decode())
    controls = json.loads(html.unescape(served))
    assert [c["name"] for c in controls][-1] == "dummy_cap"
    assert controls[-1] | {"help": ""} == {
        "name": "dummy_cap", "label": "dummy cap", "fields": ["dummy_cap"], "whole": True, "placeholder": "none",
        "size": 6, "summary": "dummy {value}", "format": "count", "help": "",
    }  # fmt: skip

"""A trace across the hop, through the user's interfaces, checked with the OpenTelemetry SDK's in-memory exporter: the
client sends its current span's context, the broker carries it, the worker's handler runs in a child span and reads
it as ``TaskContext.trace``; on both transports, with ``Client``, ``AsyncClient`` and ``generaldomo worker`` (the
how-to page's example, thread and process pools), and without OpenTelemetry the field is still carried. A broker
asked for its spans (``trace_spans``, ``--trace-spans``) records them in the same trace."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from app_harness import start_pool, wait_for_workers
from doc_blocks import named
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from generaldomo import AsyncClient, Client, Reject, RequestFailed, TraceContext
from generaldomo.cli import parser
from generaldomo.cli.broker import make_broker
from generaldomo.peers.task import TaskContext

ROOT = Path(__file__).resolve().parents[2]
WAIT = 60.0
PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture(scope="module")
def exporter() -> Iterator[InMemorySpanExporter]:
    """The process's SDK tracer provider (set once: OpenTelemetry allows one), exporting to memory for this module."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    yield memory
    memory.shutdown()


def traced(payload: bytes, task: TaskContext) -> bytes:
    """What the handler knows of its trace: the context it got, and its own span (current while it runs)."""
    if payload == b"fail":
        raise Reject(503, "not now")
    span = trace.get_current_span()
    context = span.get_span_context()
    parent = getattr(span, "parent", None)
    return json.dumps({
        "trace": None if task.trace is None else [task.trace.traceparent, task.trace.tracestate],
        "span": [f"{context.trace_id:032x}", f"{context.span_id:016x}"],
        "parent": None if parent is None else f"{parent.span_id:016x}",
    }).encode()  # fmt: skip


def test_a_trace_spans_client_and_worker_on_both_transports(
    transport: str, brokers, workers, exporter: InMemorySpanExporter
) -> None:
    broker = brokers(transport, ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint(transport, "tcp")
    workers(endpoint, transport, "traced", traced)
    tracer = trace.get_tracer("tests")
    with Client(endpoint, transport) as client:
        with tracer.start_as_current_span("caller") as caller:
            answer = json.loads(client.request("traced", b"x", timeout=WAIT).payload)
            with pytest.raises(RequestFailed) as failed:
                client.request("traced", b"fail", timeout=WAIT)
    ours = caller.get_span_context()
    trace_id, span_id = f"{ours.trace_id:032x}", f"{ours.span_id:016x}"
    assert answer["trace"][0].startswith(f"00-{trace_id}-{span_id}-")
    assert answer["span"][0] == trace_id and answer["parent"] == span_id  # the handler's span: a child of ours
    spans = {
        span.context.span_id: span for span in exporter.get_finished_spans() if span.context.trace_id == ours.trace_id
    }
    handler_span = spans[int(answer["span"][1], 16)]
    assert handler_span.name == "traced" and handler_span.kind is SpanKind.CONSUMER
    assert handler_span.parent is not None and handler_span.parent.span_id == ours.span_id
    assert handler_span.attributes is not None and handler_span.attributes["generaldomo.status"] == "200"
    assert failed.value.status == 503
    [failing] = [s for s in spans.values() if s.attributes and s.attributes.get("generaldomo.status") == "503"]
    assert failing.status.status_code is StatusCode.ERROR and failing.parent is not None
    assert failing.parent.span_id == ours.span_id


def test_a_trace_context_given_or_none_and_no_span_without_one(transport: str, brokers, workers) -> None:
    broker = brokers(transport, ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint(transport, "tcp")
    workers(endpoint, transport, "traced", traced)
    with Client(endpoint, transport) as client:
        given = json.loads(client.request("traced", b"x", timeout=WAIT, trace=TraceContext(PARENT, "rojo=1")).payload)
        text = json.loads(client.submit("traced", b"x", trace=PARENT).result(WAIT).payload)
        with trace.get_tracer("tests").start_as_current_span("caller"):
            off = json.loads(client.request("traced", b"x", timeout=WAIT, trace=False).payload)
        outside = json.loads(client.request("traced", b"x", timeout=WAIT).payload)
        with pytest.raises(ValueError, match="lowercase hex"):
            client.submit("traced", b"x", trace=PARENT.upper())
    assert given["trace"] == [PARENT, "rojo=1"] and given["parent"] == "00f067aa0ba902b7"
    assert text["trace"] == [PARENT, ""] and text["span"][0] == PARENT[3:35]
    assert off["trace"] is None and outside["trace"] is None and outside["parent"] is None  # no span made for them


def test_the_async_client_sends_the_current_span_of_its_task(brokers, workers, exporter: InMemorySpanExporter) -> None:
    broker = brokers("router", ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint("router", "tcp")
    workers(endpoint, "router", "traced", traced)
    tracer = trace.get_tracer("tests")

    async def ask(client: AsyncClient, n: int) -> tuple[str, str]:
        with tracer.start_as_current_span(f"caller-{n}") as caller:
            answer = json.loads((await client.request("traced", b"x", timeout=WAIT)).payload)
        return f"{caller.get_span_context().span_id:016x}", answer["parent"]

    async def main() -> list[tuple[str, str]]:
        async with AsyncClient(endpoint, "router") as client:
            return list(await asyncio.gather(*(ask(client, n) for n in range(3))))

    pairs = asyncio.run(main())
    assert all(ours == parent for ours, parent in pairs) and len({ours for ours, _ in pairs}) == 3


@pytest.mark.parametrize("pool_kind", ["thread", "process"])
def test_the_how_to_example_traces_through_generaldomo_worker(
    pool_kind: str, brokers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/howto/tracing.rst: its app under ``generaldomo worker`` (thread and process pools), its client in a
    process of its own (its own tracer provider, an in-memory exporter), checking the worker's span."""
    broker = brokers("router", ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint("router", "tcp")
    (tmp_path / "traced_tasks.py").write_text(named("tracing-app"))
    log = tmp_path / "pool.log"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    pool = start_pool("traced_tasks:app", endpoint, "router", log, "--pool", pool_kind)
    try:
        with Client(endpoint, "router") as client:
            wait_for_workers(client, {"lookup": 1})
        program = named("tracing-client").replace("tcp://127.0.0.1:5555", endpoint)
        done = subprocess.run(
            [sys.executable, "-c", program], capture_output=True, text=True, timeout=2 * WAIT, cwd=tmp_path
        )
        assert done.returncode == 0, done.stderr + log.read_text()
        assert "the worker's span is a child of ours" in done.stdout
    finally:
        pool.send_signal(signal.SIGTERM)
        assert pool.wait(WAIT) == 0, log.read_text()


def broker_spans(exporter: InMemorySpanExporter, trace_id: int, count: int) -> dict[str, list[ReadableSpan]]:
    """The broker's spans of trace ``trace_id`` by name, once ``count`` of them are finished (the broker records them
    after the turn that sent the answer: the client may have it first)."""
    names = ("queued", "served")
    give_up = time.monotonic() + WAIT
    for _ in range(int(WAIT * 20)):
        found = [
            span for span in exporter.get_finished_spans() if span.context.trace_id == trace_id and
            (span.name.startswith("generaldomo.broker ") or span.name in names)
        ]  # fmt: skip
        if len(found) >= count or time.monotonic() > give_up:
            break
        time.sleep(0.05)
    by_name: dict[str, list[ReadableSpan]] = {}
    for span in found:
        by_name.setdefault(span.name, []).append(span)
    return by_name


def check_one_trace(endpoint: str, transport: str, exporter: InMemorySpanExporter) -> None:
    """A traced request and a failing one through ``endpoint``: the broker's spans, the worker's and ours, one trace."""
    tracer = trace.get_tracer("tests")
    with Client(endpoint, transport) as client:
        client.request("traced", b"x", timeout=WAIT, trace=False)  # no trace context: no broker span
        with tracer.start_as_current_span("caller") as caller:
            answer = json.loads(client.request("traced", b"x", timeout=WAIT).payload)
            with pytest.raises(RequestFailed):
                client.request("traced", b"fail", timeout=WAIT)
    ours = caller.get_span_context()
    spans = broker_spans(exporter, ours.trace_id, 6)
    counts = sorted((name, len(found)) for name, found in spans.items())
    assert counts == [("generaldomo.broker traced", 2), ("queued", 2), ("served", 2)]
    brokers_spans = {span.context.span_id: span for span in spans["generaldomo.broker traced"]}
    for broker_span in brokers_spans.values():  # children of our span: siblings of the worker's
        assert broker_span.parent is not None and broker_span.parent.span_id == ours.span_id
        assert broker_span.kind is SpanKind.SERVER and broker_span.attributes is not None
    for child in spans["queued"] + spans["served"]:
        assert child.parent is not None and child.parent.span_id in brokers_spans
        parent = brokers_spans[child.parent.span_id]
        assert child.start_time is not None and parent.start_time is not None and child.end_time is not None
        assert parent.end_time is not None and parent.start_time <= child.start_time <= child.end_time
        assert child.end_time <= parent.end_time
    statuses = {span.attributes["generaldomo.status"]: span for span in brokers_spans.values() if span.attributes}
    assert sorted(statuses) == ["200", "503"] and statuses["503"].status.status_code is StatusCode.ERROR
    assert answer["span"][0] == f"{ours.trace_id:032x}" and answer["parent"] == f"{ours.span_id:016x}"
    others = [span for span in exporter.get_finished_spans() if span.name.startswith("generaldomo.broker ")]
    assert all(span.context.trace_id == ours.trace_id for span in others)  # none for the untraced request


def test_a_broker_with_trace_spans_records_its_spans_in_the_trace_on_both_transports(
    transport: str, brokers, workers, exporter: InMemorySpanExporter
) -> None:
    exporter.clear()
    broker = brokers(transport, ["tcp://127.0.0.1:*"], trace_spans=True)
    endpoint = broker.endpoint(transport, "tcp")
    workers(endpoint, transport, "traced", traced)
    check_one_trace(endpoint, transport, exporter)


def test_the_trace_spans_flag_turns_the_broker_spans_on(workers, exporter: InMemorySpanExporter) -> None:
    exporter.clear()
    broker = make_broker(parser().parse_args(["broker", "--trace-spans", "--bind", "tcp://127.0.0.1:*"])).start()
    try:
        endpoint = broker.endpoint("router", "tcp")
        workers(endpoint, "router", "traced", traced)
        check_one_trace(endpoint, "router", exporter)
    finally:
        broker.stop()


def test_a_broker_without_trace_spans_records_none(brokers, workers, exporter: InMemorySpanExporter) -> None:
    exporter.clear()
    broker = brokers("router", ["tcp://127.0.0.1:*"])
    endpoint = broker.endpoint("router", "tcp")
    workers(endpoint, "router", "traced", traced)
    with Client(endpoint, "router") as client, trace.get_tracer("tests").start_as_current_span("caller"):
        client.request("traced", b"x", timeout=WAIT)
    assert not broker.core.spans.on and not broker.core.spans  # nothing made, so nothing to record
    assert not [span for span in exporter.get_finished_spans() if span.name.startswith("generaldomo.broker ")]


def test_broker_spans_without_opentelemetry_refuse_to_start_and_say_what_to_install() -> None:
    """Without the OpenTelemetry API (hidden from a process of its own) a broker without spans imports none of it, and
    ``--trace-spans`` exits with status 2, saying what to install."""
    program = (
        "import sys\n"
        "sys.modules['opentelemetry'] = None  # as if not installed\n"
        "from generaldomo import Broker\n"
        "Broker('router', ['tcp://127.0.0.1:*']).start().stop()\n"
        "from generaldomo.cli import main\n"
        "sys.exit(main(['broker', '--trace-spans', '--bind', 'tcp://127.0.0.1:*']))\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=2 * WAIT)
    assert done.returncode == 2, done.stderr
    assert "broker spans need the OpenTelemetry API: pip install 'generaldomo[otel]'" in done.stderr

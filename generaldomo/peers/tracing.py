"""Trace context across the hop: what the client sends from the caller's OpenTelemetry context, and the span the
worker runs a handler in.

Rules: OpenTelemetry is optional (the ``generaldomo[otel]`` extra): this module imports ``opentelemetry`` at its
first use, once, and without it :func:`current_trace` gives None and :func:`handler_span` does nothing, while a
trace context given explicitly is still carried. What travels is W3C ``traceparent``/``tracestate``, through the
process's configured propagator (``opentelemetry.propagate``; the W3C trace context one by default), so an
application's own propagator setup is honoured. A handler runs in a span only when its request carries a trace
context: a request without one costs nothing. It knows nothing of sockets or of the protocol's frames.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Final

from generaldomo.sansio.wire.tracecontext import TraceContext, traceparent_error, tracestate_error

__all__ = ["INSTRUMENTATION", "as_trace", "current_trace", "handler_span", "mark_status", "otel_available"]

INSTRUMENTATION: Final = "generaldomo"  # the tracer's name (the instrumentation scope of generaldomo's spans)
_otel: Any = None  # the opentelemetry modules (a tuple) once looked for; False: not installed


def _modules() -> Any:
    """``(propagate, trace)`` of opentelemetry, or None when it is not installed (looked for once)."""
    global _otel
    if _otel is None:
        try:
            from opentelemetry import propagate, trace
        except ImportError:
            _otel = False
        else:
            _otel = (propagate, trace)
    return _otel or None


def otel_available() -> bool:
    """True when the OpenTelemetry API is installed (``pip install 'generaldomo[otel]'``)."""
    return _modules() is not None


def current_trace() -> TraceContext | None:
    """The trace context of the caller's current OpenTelemetry span, as the configured propagator writes it;
    None without OpenTelemetry, outside any span, or when the propagator writes no valid ``traceparent``."""
    modules = _modules()
    if modules is None:
        return None
    propagate, api = modules
    if not api.get_current_span().get_span_context().is_valid:
        return None  # outside any span: no traceparent to write (the propagators' calls cost a dozen per request)
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    parent = carrier.get("traceparent")
    if parent is None or traceparent_error(parent) is not None:
        return None
    state = carrier.get("tracestate", "")
    return TraceContext(parent, state if tracestate_error(state) is None else "")


def as_trace(trace: TraceContext | str | bool | None) -> TraceContext | None:
    """A request's trace context from what a caller gave: a :class:`TraceContext`, a ``traceparent`` text
    (ValueError when malformed), False (none), or None/True (the current OpenTelemetry span's, if any)."""
    if trace is None or trace is True:
        return current_trace()
    if trace is False:
        return None
    if isinstance(trace, str):
        return TraceContext.of(trace)
    if isinstance(trace, TraceContext):
        return trace
    raise TypeError(f"a trace context is a TraceContext, a traceparent text or a bool, not {type(trace).__name__}")


@contextlib.contextmanager
def handler_span(trace: TraceContext | None, description: bytes) -> Iterator[Any]:
    """Run the block in a span named for the request's description, child of its trace context (a consumer
    span), made current, and give the span (for :func:`mark_status`); None, and no span, without a trace
    context or without OpenTelemetry. An exception escaping the block is recorded on the span, and goes on."""
    modules = None if trace is None else _modules()
    if modules is None or trace is None:
        yield None
        return
    propagate, api = modules
    carrier = {"traceparent": trace.traceparent}
    if trace.tracestate:
        carrier["tracestate"] = trace.tracestate
    parent = propagate.extract(carrier)
    name = description[:64].decode("utf-8", "replace")
    tracer = api.get_tracer(INSTRUMENTATION)
    with tracer.start_as_current_span(
        name, context=parent, kind=api.SpanKind.CONSUMER, attributes={"messaging.system": "generaldomo"}
    ) as span:
        yield span


def mark_status(span: Any, status: bytes) -> None:
    """Put the answer's ``status`` on a handler's span (from :func:`handler_span`; None: nothing), an error for a
    ``5xx``."""
    if span is None:
        return
    span.set_attribute("generaldomo.status", status.decode("ascii", "replace"))
    if status[:1] == b"5":
        from opentelemetry.trace import Status, StatusCode

        span.set_status(Status(StatusCode.ERROR, f"answered {status.decode('ascii', 'replace')}"))

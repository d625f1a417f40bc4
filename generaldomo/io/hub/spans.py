"""The broker's spans (``--trace-spans``): a traced request's time in the broker, recorded in its trace.

This module turns the core's traced answers (:class:`~generaldomo.sansio.broker.core.spans.Answered`) into
OpenTelemetry spans, after the turn that made them: a span ``generaldomo.broker SERVICE`` from the request's
acceptance to its answer, a child of the request's ``traceparent`` (so a sibling of the worker's span), and in it
``queued`` (until its worker took it, or until its answer if none did) and ``served`` (from its dispatch to its
answer). Spans are made with the times the core gave (its monotonic clock, turned into the wall clock's
nanoseconds with one offset read when the recorder is made), through the tracer provider current when each is
recorded, so an application that sets its provider after making the broker is served. OpenTelemetry is optional:
this module imports it only when a recorder is made (:func:`recorder`), which a broker does only when asked to.
It knows nothing of sockets or of the protocol's frames.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, Final

from generaldomo.sansio.broker.core.spans import Answered

__all__ = ["BROKER_SPAN", "INSTRUMENTATION", "Recorder", "recorder"]

INSTRUMENTATION: Final = "generaldomo"  # the tracer's name (the instrumentation scope of generaldomo's spans)
BROKER_SPAN: Final = "generaldomo.broker"  # the broker span's name, before its service's


class Recorder:
    """Records the broker spans of traced answers (see the module docstring); ``offset`` is the wall clock minus
    the core's clock, in seconds."""

    __slots__ = ("_offset", "_propagate", "_trace")

    def __init__(self, propagate: Any, trace: Any, offset: float) -> None:
        self._propagate = propagate
        self._trace = trace
        self._offset = offset

    def record(self, answered: Iterable[Answered]) -> None:
        """Record the spans of each of ``answered``."""
        api = self._trace
        tracer = api.get_tracer(INSTRUMENTATION)
        for one in answered:
            carrier = {"traceparent": one.trace.traceparent}
            if one.trace.tracestate:
                carrier["tracestate"] = one.trace.tracestate
            status = one.status.decode("ascii", "replace")
            attributes = {"messaging.system": "generaldomo", "generaldomo.status": status}
            start, end = self._ns(one.queued), self._ns(one.answered)
            taken = one.dispatched if one.dispatched is not None and one.dispatched >= one.queued else None
            span = tracer.start_span(
                f"{BROKER_SPAN} {one.service}", context=self._propagate.extract(carrier), kind=api.SpanKind.SERVER,
                attributes={**attributes, "messaging.destination.name": one.service}, start_time=start,
            )  # fmt: skip
            if status[:1] == "5":
                span.set_status(api.Status(api.StatusCode.ERROR, f"answered {status}"))
            inside = api.set_span_in_context(span)
            queued_end = end if taken is None else self._ns(taken)
            tracer.start_span("queued", context=inside, start_time=start).end(end_time=queued_end)
            if taken is not None:
                served = tracer.start_span("served", context=inside, start_time=queued_end, attributes=attributes)
                served.end(end_time=end)
            span.end(end_time=end)

    def _ns(self, now: float) -> int:
        """The core's time ``now`` as the wall clock's nanoseconds since the epoch."""
        return int((now + self._offset) * 1e9)


def recorder() -> Recorder:
    """A recorder of broker spans; ImportError, saying what to install, without the OpenTelemetry API."""
    try:
        from opentelemetry import propagate, trace
    except ImportError as error:
        raise ImportError(
            "broker spans need the OpenTelemetry API: pip install 'generaldomo[otel]' opentelemetry-sdk"
        ) from error
    return Recorder(propagate, trace, time.time() - time.monotonic())

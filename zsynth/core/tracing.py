"""OpenTelemetry traces, optional: spans exported over OTLP/HTTP when ``ZSYNTH_OTLP_ENDPOINT`` is set and the ``otel``
extra is installed (``pip install 'zsynth[otel]'``).

Without the endpoint nothing of OpenTelemetry is imported: :meth:`Tracing.from_settings` returns None and every call
site goes through :func:`span`, which is then a no-op. The fronts and the workers each build one :class:`Tracing`
(never the global tracer provider), and the trace context crosses Redis in the job record (``Job.trace``: the W3C
``traceparent``), so one trace holds a request's spans on its front and on the worker that spoke it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from typing import Any, Final
from urllib.parse import urlsplit

from zsynth.core.config import Settings

logger = logging.getLogger(__name__)

#: OTLP/HTTP's path for traces, added to an endpoint given without a path (as OTEL_EXPORTER_OTLP_ENDPOINT does).
TRACES_PATH: Final = "/v1/traces"


class Tracing:
    """One process's tracer and what it needs from OpenTelemetry, imported only when traces are on."""

    def __init__(self, provider: Any, modules: dict[str, Any]) -> None:
        self._provider = provider
        self._tracer = provider.get_tracer("zsynth")
        self._trace = modules["trace"]
        self._context = modules["context"]
        self._propagator = modules["propagator"]

    @classmethod
    def from_settings(cls, settings: Settings, service: str) -> Tracing | None:
        """The process's tracing, or None when ZSYNTH_OTLP_ENDPOINT is unset (or the ``otel`` extra is missing)."""
        if not settings.telemetry.otlp_endpoint:
            return None
        try:
            from opentelemetry import context, trace
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
            from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
        except ImportError as err:
            logger.error("ZSYNTH_OTLP_ENDPOINT is set but the otel extra is not installed (%s): no traces", err)
            return None
        endpoint = settings.telemetry.otlp_endpoint
        if urlsplit(endpoint).path in ("", "/"):
            endpoint = endpoint.rstrip("/") + TRACES_PATH
        resource = Resource.create({"service.name": service, "service.instance.id": settings.worker.id})
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, timeout=5)))
        logger.info("%s: traces to %s", service, endpoint)
        return cls(provider, {"trace": trace, "context": context, "propagator": TraceContextTextMapPropagator()})

    @contextlib.contextmanager
    def span(
        self,
        name: str,
        attributes: Mapping[str, Any] | None = None,
        *,
        carrier: Mapping[str, str] | None = None,
        kind: str = "internal",
    ) -> Iterator[Any]:
        """A span around the block, current inside it: the child of ``carrier``'s context when given (a caller's
        ``traceparent``), else of the current span. An exception leaving the block marks the span as an error."""
        parent = self._propagator.extract(carrier) if carrier is not None else None
        span_kind = getattr(self._trace.SpanKind, kind.upper())
        with self._tracer.start_as_current_span(name, context=parent, kind=span_kind, attributes=attributes) as found:
            yield found

    def start(
        self,
        name: str,
        attributes: Mapping[str, Any] | None = None,
        *,
        parent: Any = None,
        carrier: Mapping[str, str] | None = None,
        start_time: int | None = None,
    ) -> Any:
        """A span that is not made current (for another thread, or one that outlives a block): the child of
        ``parent`` (a span), else of ``carrier``'s context, else a new trace; ``start_time`` in Unix nanoseconds
        when it began earlier. End it with :meth:`end`."""
        if parent is not None:
            context = self._trace.set_span_in_context(parent)
        elif carrier is not None:
            context = self._propagator.extract(carrier)
        else:
            context = None
        return self._tracer.start_span(name, context=context, attributes=attributes, start_time=start_time)

    def end(self, span: Any, error: str | None = None, message: str = "") -> None:
        """End ``span``; with ``error`` (a code) its status is an error and the code an attribute."""
        if error is not None:
            span.set_attribute("zsynth.error_code", error)
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, message or error))
        span.end()

    def carrier(self, span: Any = None) -> dict[str, str]:
        """The W3C trace context of ``span`` (default: the current span), for a job record or an outgoing call."""
        context = self._trace.set_span_in_context(span) if span is not None else None
        found: dict[str, str] = {}
        self._propagator.inject(found, context=context)
        return found

    @staticmethod
    def trace_id(span: Any) -> str:
        """The 32-hex-digit trace id of ``span``."""
        return f"{span.get_span_context().trace_id:032x}"

    def shutdown(self) -> None:
        """Export what is buffered and stop (at the process's end)."""
        self._provider.shutdown()


@contextlib.contextmanager
def span(tracing: Tracing | None, name: str, attributes: Mapping[str, Any] | None = None) -> Iterator[Any]:
    """:meth:`Tracing.span` when traces are on, else nothing (the call sites stay one line either way)."""
    if tracing is None:
        yield None
        return
    with tracing.span(name, attributes) as found:
        yield found

"""OpenTelemetry traces across services: W3C trace context rides in NATS message headers, so one task is one trace
from the executor through the planner, worker-adapter and verifier (a span per step and per worker call).

Off unless enabled: with tracing off every helper here is a bool check and a ``nullcontext`` — the hot request path
pays nothing for headers or spans (measured cost per span on, see bench/). ``configure`` turns on OTLP export when
``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._TRACES_ENDPOINT``) is set; it needs the ``otel`` extra (OpenTelemetry
SDK + OTLP/HTTP exporter). The API package is a core dependency (light, pure Python); the SDK is not.
``enable(provider)`` lets tests record spans in memory. structlog lines carry ``trace_id``/``span_id`` while a
span is current (``add_trace_ids``, installed by conductor/logging.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import msgspec
import structlog
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

log = structlog.get_logger("conductor.tracing")

_PROPAGATOR = TraceContextTextMapPropagator()
_tracer: trace.Tracer | None = None  # None: tracing off
_provider: trace.TracerProvider | None = None


class TracingError(RuntimeError):
    """OTLP export was asked for but cannot be set up (the `otel` extra is missing)."""


class TracingSettings(msgspec.Struct, frozen=True, kw_only=True):
    """The standard OpenTelemetry variables; the exporter reads the rest (headers, protocol, timeouts) itself."""

    endpoint: str | None = None  # the full traces URL (…/v1/traces)
    service_name: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> TracingSettings:
        """``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is used as is; the generic ``OTEL_EXPORTER_OTLP_ENDPOINT`` gets
        the signal path appended, as the OTLP exporter specification says."""
        endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        if not endpoint and env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
            endpoint = env["OTEL_EXPORTER_OTLP_ENDPOINT"].rstrip("/") + "/v1/traces"
        disabled = (
            env.get("OTEL_SDK_DISABLED", "").lower() == "true" or env.get("OTEL_TRACES_EXPORTER") == "none"
        )
        return cls(
            endpoint=None if disabled else (endpoint or None), service_name=env.get("OTEL_SERVICE_NAME")
        )


def configure(settings: TracingSettings, *, service: str) -> bool:
    """Export spans over OTLP/HTTP when an endpoint is configured. Returns whether tracing is on."""
    if not settings.endpoint:
        return False
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise TracingError(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set but the OpenTelemetry SDK is not installed: pip install 'conductor[otel]'"
        ) from exc
    name = settings.service_name or f"conductor-{service}"
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    # Headers, timeouts and compression still come from the exporter's own OTEL_EXPORTER_OTLP_* variables.
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=settings.endpoint)))
    trace.set_tracer_provider(provider)  # other instrumentation in the process reports to the same place
    enable(provider)
    log.info("tracing on: OTLP export", endpoint=settings.endpoint, service=name)
    return True


def enable(provider: trace.TracerProvider) -> None:
    global _tracer, _provider
    _provider = provider
    _tracer = provider.get_tracer("conductor")


def disable() -> None:
    global _tracer, _provider
    _tracer = _provider = None


def flush(timeout_ms: int = 10_000) -> bool:
    """Export what is buffered now (the SDK also flushes at exit); True when there was nothing to wait for."""
    force = getattr(_provider, "force_flush", None)
    return bool(force(timeout_ms)) if force is not None else True


def enabled() -> bool:
    return _tracer is not None


_OFF: contextlib.nullcontext[None] = contextlib.nullcontext()
NO_SPAN = _OFF  # what ``span`` returns with tracing off, for a caller that builds a span's name only when on


def span(
    name: str,
    *,
    kind: SpanKind = SpanKind.INTERNAL,
    attributes: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
) -> contextlib.AbstractContextManager[trace.Span | None]:
    """A current span named ``name``; with ``headers``, a child of the trace context they carry (a message from
    another service). Tracing off: a shared no-op context yielding None (no allocation on the hot path)."""
    if _tracer is None:
        return _OFF
    parent = _PROPAGATOR.extract(headers) if headers else None
    return _tracer.start_as_current_span(name, context=parent, kind=kind, attributes=attributes)


def headers(base: dict[str, str] | None = None) -> dict[str, str] | None:
    """Message headers carrying the current trace context (plus ``base``); ``base`` itself, not a copy, when tracing
    is off or no span is current (callers build it per message), so untraced messages stay header-free."""
    if _tracer is None or not trace.get_current_span().get_span_context().is_valid:
        return base
    carrier = dict(base or {})
    _PROPAGATOR.inject(carrier, context=otel_context.get_current())
    return carrier


def add_trace_ids(_logger: Any, _method: str, event: dict[str, Any]) -> dict[str, Any]:
    """structlog processor: the current span's ids on every line logged inside it (join logs to traces)."""
    ctx = trace.get_current_span().get_span_context()
    if ctx.is_valid:
        event.setdefault("trace_id", format(ctx.trace_id, "032x"))
        event.setdefault("span_id", format(ctx.span_id, "016x"))
    return event

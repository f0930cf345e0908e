"""One task is one trace across executor, planner, worker-adapter and verifier, on a real nats-server: each
service on its own connection, trace context in the NATS headers, spans recorded by an in-memory exporter. Logs
carry the trace id; OTLP export posts real OTLP/HTTP to a collector stand-in."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import structlog
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from conductor import tracing
from conductor.app.runtime import create_services, running
from conductor.client import ConductorClient
from conductor.logging import configure_logging
from conductor.settings import CommonSettings
from schemas.solve import SolveRequest

QUESTION = "What is the remainder when 2^100 is divided by 7?"  # in the bundled sim dataset (answer 2)
SERVICES = ["executor", "planner", "worker-adapter", "verifier"]


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.enable(provider)
    yield exporter
    tracing.disable()


@pytest.fixture
async def system(nats_url, subject_prefix):
    env = {"NATS_URL": nats_url, "CONDUCTOR_SUBJECT_PREFIX": subject_prefix, "CONDUCTOR_LOG_LEVEL": "WARNING"}
    async with contextlib.AsyncExitStack() as stack:
        for name in SERVICES:  # one connection per service, as in separate pods
            await stack.enter_async_context(
                running(create_services([name], env), CommonSettings.from_env(env), name=name)
            )
        yield CommonSettings.from_env(env)


def _by_id(found: list[ReadableSpan]) -> dict[int, ReadableSpan]:
    return {s.context.span_id: s for s in found}


def _chain(span: ReadableSpan, index: dict[int, ReadableSpan]) -> list[str]:
    names = []
    while span is not None:
        names.append(span.name)
        span = index.get(span.parent.span_id) if span.parent else None
    return names


def _trace_of(exporter: InMemorySpanExporter, root: ReadableSpan) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.context.trace_id == root.context.trace_id]


@pytest.mark.nats
async def test_a_solve_is_one_trace_across_the_services(spans, system):
    p = system.subject_prefix
    async with ConductorClient(system) as client:
        with tracing.span("client solve"):
            result = await client.solve(
                SolveRequest(question=QUESTION, domain="math", reference="2"), timeout=60
            )
    assert result.error is None and result.verdict is not None
    (root,) = [s for s in spans.get_finished_spans() if s.name == "client solve"]
    mine = _trace_of(spans, root)
    assert {s.context.trace_id for s in spans.get_finished_spans()} == {root.context.trace_id}, (
        "one trace only"
    )
    index = _by_id(mine)
    names = [s.name for s in mine]
    steps = [st for rnd in result.workflows for st in rnd.steps]
    assert (
        names.count(f"process {p}conductor.work") == len(steps) == names.count(f"request {p}conductor.work")
    )
    assert len([n for n in names if n.startswith("step ")]) == len(steps)
    for name in (
        f"process {p}conductor.plan",
        f"process {p}conductor.verify",
        f"process {p}conductor.solve.{{tenant}}",
        "task",
    ):
        assert names.count(name) == 1, (name, names)
    for s in mine:
        if s.name == f"process {p}conductor.work":  # a worker call, inside its step, inside the task
            chain = _chain(s, index)
            assert chain[1] == f"request {p}conductor.work" and chain[2].startswith("step ")
            assert chain[3:] == ["task", f"process {p}conductor.solve.{{tenant}}", "client solve"]
            assert s.kind is SpanKind.SERVER and index[s.parent.span_id].kind is SpanKind.CLIENT
    step = next(s for s in mine if s.name.startswith("step "))
    assert step.attributes["conductor.worker"] in {st.worker for st in steps}
    verify = next(s for s in mine if s.name == f"process {p}conductor.verify")
    assert _chain(verify, index)[-3:] == ["task", f"process {p}conductor.solve.{{tenant}}", "client solve"]


@pytest.mark.nats
async def test_a_durable_task_joins_the_submitters_trace(spans, system):
    async with ConductorClient(system) as client:
        with tracing.span("client submit"):
            task_id = await client.submit(SolveRequest(question=QUESTION, domain="math", reference="2"))
        stored = await client.result(task_id, wait=60)
    assert stored.error is None
    # The result is stored before the delivery's span ends (ack after store): wait for the consumer span.
    consumer = f"process {system.subject_prefix}conductor.tasks.submit.client"  # the tenant's subject
    for _ in range(200):
        if any(s.name == consumer for s in spans.get_finished_spans()):
            break
        await asyncio.sleep(0.05)
    (root,) = [s for s in spans.get_finished_spans() if s.name == "client submit"]
    index = _by_id(spans.get_finished_spans())
    (task,) = [s for s in spans.get_finished_spans() if s.name == "task"]
    assert _chain(task, index)[1:] == [consumer, "client submit"]
    assert index[task.parent.span_id].kind is SpanKind.CONSUMER
    assert len({s.context.trace_id for s in _trace_of(spans, root)}) == 1
    assert any(s.name.startswith("process ") and "conductor.work" in s.name for s in _trace_of(spans, root))


def test_untraced_messages_carry_no_headers():
    assert not tracing.enabled()
    assert tracing.headers() is None and tracing.headers({"Nats-Msg-Id": "t"}) == {"Nats-Msg-Id": "t"}
    with tracing.span("nothing") as span:
        assert span is None


def test_log_lines_carry_the_trace_id(spans):
    configure_logging("INFO", json=True)  # idempotent: the process's configuration, whichever test made it
    saved = structlog.get_config()
    assert tracing.add_trace_ids in saved["processors"]
    out = io.StringIO()
    structlog.configure(  # the same chain, rendered as JSON into a buffer, every level
        processors=[*saved["processors"][:-1], structlog.processors.JSONRenderer()],
        wrapper_class=structlog.make_filtering_bound_logger(0),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )
    try:
        with tracing.span("logged") as span:
            structlog.get_logger("t").info("inside")
        structlog.get_logger("t").info("outside")
    finally:
        structlog.configure(**saved)
    inside, outside = (json.loads(line) for line in out.getvalue().splitlines())
    assert inside["trace_id"] == format(span.get_span_context().trace_id, "032x")
    assert inside["span_id"] == format(span.get_span_context().span_id, "016x")
    assert "trace_id" not in outside


def test_settings_follow_the_otel_variables():
    s = tracing.TracingSettings.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"})
    assert s.endpoint == "http://collector:4318/v1/traces"
    s = tracing.TracingSettings.from_env({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/custom"})
    assert s.endpoint == "http://c:4318/custom"
    assert (
        tracing.TracingSettings.from_env(
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c", "OTEL_SDK_DISABLED": "true"}
        ).endpoint
        is None
    )
    assert tracing.configure(tracing.TracingSettings(), service="x") is False


def test_otlp_export_when_configured():
    received: list[bytes] = []

    class Collector(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            received.append(self.rfile.read(int(self.headers["Content-Length"])))
            assert self.path == "/v1/traces" and self.headers["Content-Type"] == "application/x-protobuf"
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{server.server_address[1]}"}
        assert tracing.configure(tracing.TracingSettings.from_env(env), service="executor")
        with tracing.span("exported", attributes={"conductor.task_id": "t1"}):
            pass
        assert tracing.flush()
    finally:
        tracing.disable()
        server.shutdown()
    request = ExportTraceServiceRequest()
    request.ParseFromString(b"".join(received))
    (resource_spans,) = request.resource_spans
    service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}["service.name"]
    assert service == "conductor-executor"
    assert [s.name for ss in resource_spans.scope_spans for s in ss.spans] == ["exported"]

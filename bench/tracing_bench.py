"""What tracing costs on one request/reply hop: Requester -> EndpointServer on a real nats-server, tracing off vs
on (client and server span, trace context in headers, spans batched to an exporter that drops them), alternated in
the same run. Prints one JSON object as its last line: p50 latency and process CPU per request, and the ratios."""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import nats
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind

from bench._harness import pct
from conductor import tracing
from conductor.endpoints import Endpoint, EndpointServer, Requester
from conductor.natsserver import NatsServer

N, ROUNDS = 3000, 3


class Drop(SpanExporter):
    def export(self, spans):  # the exporter's own cost is the collector's business, not ours
        return SpanExportResult.SUCCESS


async def echo(body: bytes) -> bytes:
    return body


async def run_round(req: Requester, traced: bool) -> tuple[float, float]:
    lat: list[float] = []
    cpu0 = time.process_time()
    for _ in range(N):
        t0 = time.perf_counter()
        with tracing.span("request bench.echo", kind=SpanKind.CLIENT):
            await req.request("bench.echo", b"x" * 200, timeout=5)
        lat.append(time.perf_counter() - t0)
    return pct(lat, 0.5) * 1e3, (time.process_time() - cpu0) / N * 1e6


async def main() -> dict:
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Drop()))
    with NatsServer() as server:
        nc = await nats.connect(server.url)
        ep = Endpoint("bench.echo", queue="bench", title="echo", handler=echo, on_error=lambda info: b"")
        srv = EndpointServer(nc, [ep], concurrency=64, drain_timeout_s=1)
        await srv.start()
        req = Requester(nc)
        await run_round(req, False)  # warm-up
        results: dict[str, list[tuple[float, float]]] = {"off": [], "on": []}
        for _ in range(ROUNDS):
            tracing.disable()
            results["off"].append(await run_round(req, False))
            tracing.enable(provider)
            results["on"].append(await run_round(req, True))
        tracing.disable()
        await srv.stop()
        await nc.close()
    provider.shutdown()
    med = {
        k: (statistics.median(v[0] for v in r), statistics.median(v[1] for v in r))
        for k, r in results.items()
    }
    return {
        "bench": "tracing",
        "requests_per_round": N,
        "rounds": ROUNDS,
        "p50_ms_off": round(med["off"][0], 4),
        "p50_ms_on": round(med["on"][0], 4),
        "cpu_us_per_request_off": round(med["off"][1], 1),
        "cpu_us_per_request_on": round(med["on"][1], 1),
        "p50_ratio_on_off": round(med["on"][0] / med["off"][0], 3),
        "cpu_ratio_on_off": round(med["on"][1] / med["off"][1], 3),
    }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main())))

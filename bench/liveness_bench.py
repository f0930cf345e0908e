"""What liveness costs on the executor's hot path: a request that asks for beats and carries a deadline (two
headers, a wall-clock read, a rescheduled timeout) against a plain request, same process, same server.

Runs both kinds alternately, 64 in flight, against an ``EndpointServer`` echo on its own connection (fast calls:
no beat is ever sent, which is the common case). Prints one JSON object as its last line: requests/s and CPU µs
per request of each kind, and their ratio.
"""

from __future__ import annotations

import asyncio
import json
import time

import nats

from conductor.endpoints import Endpoint, EndpointServer, Requester
from conductor.natsserver import NatsServer

N = 20_000
IN_FLIGHT = 64
ROUNDS = 3


async def _echo(body: bytes) -> bytes:
    return body


async def _run(req: Requester, *, live: bool) -> tuple[float, float]:
    sem = asyncio.Semaphore(IN_FLIGHT)

    async def one() -> None:
        async with sem:
            if live:
                await req.request(
                    "bench.echo", b"x" * 200, timeout=30, beat_s=2.0, misses=3, deadline=time.time() + 30
                )
            else:
                await req.request("bench.echo", b"x" * 200, timeout=30)

    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(one() for _ in range(N)))
    return N / (time.perf_counter() - wall), (time.process_time() - cpu) / N * 1e6


async def main() -> None:
    with NatsServer() as server:
        serving = await nats.connect(server.url)
        ep = Endpoint("bench.echo", queue="echo", title="echo", handler=_echo, on_error=lambda info: b"")
        endpoints = EndpointServer(serving, [ep], concurrency=1024, drain_timeout_s=1)
        await endpoints.start()
        nc = await nats.connect(server.url)
        req = Requester(nc)
        await _run(req, live=False)  # warm-up
        results: dict[str, list[tuple[float, float]]] = {"plain": [], "live": []}
        for _ in range(ROUNDS):
            for kind in ("plain", "live"):
                results[kind].append(await _run(req, live=kind == "live"))
        await endpoints.stop()
        await nc.close()
        await serving.close()
    best = {k: (max(r for r, _ in v), min(c for _, c in v)) for k, v in results.items()}
    print(
        json.dumps(
            {
                "plain_req_per_s": round(best["plain"][0]),
                "live_req_per_s": round(best["live"][0]),
                "plain_cpu_us": round(best["plain"][1], 1),
                "live_cpu_us": round(best["live"][1], 1),
                "throughput_ratio": round(best["live"][0] / best["plain"][0], 3),
                "cpu_ratio": round(best["live"][1] / best["plain"][1], 3),
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main())

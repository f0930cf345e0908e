"""Gateway overhead and streaming throughput (issue: OpenAI-compatible door). Printed, not asserted.

Services run as real processes on a private nats-server: `serve planner,worker-adapter,verifier`, `serve executor`
and `serve gateway` (anonymous, so no quota round trip: the door itself is measured). Workers are zero-latency sim
workers. The same one-step task (`refine:1`) is timed sequentially from a client straight over NATS and through
the gateway over HTTP (a kept-alive aiohttp session), in interleaved blocks; added p50 = gateway p50 - NATS p50.
Target: <= 1 ms added at p50. Then 256 concurrent streaming clients loop for a fixed window: requests/s, and the
gateway's CPU per request. The last line printed is one JSON object.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp
import nats

from bench._harness import NatsServer, Processes, cpu_s, pct, report, tempdir, zero_latency_pool
from conductor.natsserver import free_port

N = 800
BLOCKS = 4
STREAMERS = 256
WINDOW_S = 15.0
QUESTION = "What is the capital city of Australia?"


async def nats_latencies(url: str, n: int) -> list[float]:
    nc = await nats.connect(url)
    body = json.dumps({"question": QUESTION, "policy": "refine:1", "progress": False}).encode()
    lat = []
    for _ in range(n):
        t = time.perf_counter()
        reply = await nc.request("conductor.solve.client", body, timeout=30)
        lat.append(time.perf_counter() - t)
        if json.loads(reply.data)["error"] is not None:
            raise RuntimeError(reply.data)
    await nc.close()
    return lat


async def http_latencies(http: aiohttp.ClientSession, base: str, n: int) -> list[float]:
    body = {"model": "refine:1", "messages": [{"role": "user", "content": QUESTION}]}
    lat = []
    for _ in range(n):
        t = time.perf_counter()
        async with http.post(base + "/v1/chat/completions", json=body) as resp:
            payload = await resp.read()
            if resp.status != 200:
                raise RuntimeError(payload)
        lat.append(time.perf_counter() - t)
    return lat


async def streamer(http: aiohttp.ClientSession, base: str, until: float, done: list[int]) -> None:
    body = {"model": "refine:1", "messages": [{"role": "user", "content": QUESTION}], "stream": True}
    while time.perf_counter() < until:
        async with http.post(base + "/v1/chat/completions", json=body) as resp:
            async for line in resp.content:
                if line.startswith(b"data: [DONE]"):
                    done[0] += 1
                    break


async def main() -> dict[str, object]:
    pool = zero_latency_pool(tempdir())
    out: dict[str, object] = {"bench": "gateway"}
    with NatsServer() as server:
        port = free_port()
        env = {
            "NATS_URL": server.url,
            "CONDUCTOR_POOL": str(pool),
            "CONDUCTOR_GATEWAY_PORT": str(port),
            "CONDUCTOR_GATEWAY_ALLOW_ANONYMOUS": "true",
        }
        procs = Processes()
        try:
            procs.serve("planner,worker-adapter,verifier", env)
            procs.serve("executor", env)
            gateway = procs.serve("gateway", env)
            base = f"http://127.0.0.1:{port}"
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=STREAMERS)) as http:
                await nats_latencies(server.url, 50)
                await http_latencies(http, base, 50)  # warm-up
                direct: list[float] = []
                door: list[float] = []
                for _ in range(BLOCKS):
                    direct += await nats_latencies(server.url, N // BLOCKS)
                    door += await http_latencies(http, base, N // BLOCKS)
                out["nats_solve_p50_ms"] = round(pct(direct, 0.5) * 1e3, 3)
                out["gateway_solve_p50_ms"] = round(pct(door, 0.5) * 1e3, 3)
                out["added_p50_ms"] = round((pct(door, 0.5) - pct(direct, 0.5)) * 1e3, 3)
                out["added_p90_ms"] = round((pct(door, 0.9) - pct(direct, 0.9)) * 1e3, 3)
                out["gateway_over_nats_p50"] = round(pct(door, 0.5) / pct(direct, 0.5), 3)
                done = [0]
                cpu0, t0 = cpu_s(gateway.pid), time.perf_counter()
                until = t0 + WINDOW_S
                await asyncio.gather(*(streamer(http, base, until, done) for _ in range(STREAMERS)))
                elapsed, cpu = time.perf_counter() - t0, cpu_s(gateway.pid) - cpu0
            out["streaming_clients"] = STREAMERS
            out["streaming_requests_per_s"] = round(done[0] / elapsed, 1)
            out["gateway_cpu_ms_per_streamed_request"] = round(cpu / max(done[0], 1) * 1e3, 3)
        finally:
            procs.stop()
    out["target_added_p50_ms"] = 1.0
    return out


if __name__ == "__main__":
    report(asyncio.run(main()))

"""Throughput of 3-step solves and behaviour under 5,000 concurrent tasks (issue: durable execution).

Services run as real processes on a private nats-server: `conductor serve executor` and
`conductor serve planner,worker-adapter,verifier`. Every task is a 3-step sequential workflow (`refine:3`).

1. Zero-latency sim workers, 256 tasks in flight: solves per second, beside the raw nats-py round trip measured
   in the same run (round trips per second with 64 in flight, and p50 latency).
2. 1-second sim workers, 5,000 tasks in flight: throughput as a fraction of the ideal (in-flight / 3 s) and the
   executor's peak RSS. Targets: >= 90% of ideal, executor RSS <= 1 GiB.
The last line printed is one JSON object.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import nats

from bench._harness import NatsServer, Processes, raw_round_trip, report, rss_mib, tempdir, zero_latency_pool


async def solve_many(url: str, total: int, in_flight: int, timeout: float) -> tuple[float, int]:
    """Keep ``in_flight`` requests outstanding until ``total`` are answered; returns (wall s, errors)."""
    nc = await nats.connect(url, pending_size=512 * 1024 * 1024)
    body = json.dumps({"question": "What is the capital city of Australia?", "policy": "refine:3"}).encode()
    errors = 0
    sent = 0

    async def lane() -> None:
        nonlocal errors, sent
        while sent < total:
            sent += 1
            reply = await nc.request("conductor.solve", body, timeout=timeout)
            if json.loads(reply.data)["error"] is not None:
                errors += 1

    t = time.perf_counter()
    await asyncio.gather(*(lane() for _ in range(in_flight)))
    wall = time.perf_counter() - t
    await nc.close()
    return wall, errors


async def raw_throughput(url: str, total: int = 20000, in_flight: int = 64) -> float:
    nc = await nats.connect(url)
    sent = 0

    async def lane() -> None:
        nonlocal sent
        while sent < total:
            sent += 1
            await nc.request("bench.raw", b"x" * 64, timeout=10)

    t = time.perf_counter()
    await asyncio.gather(*(lane() for _ in range(in_flight)))
    wall = time.perf_counter() - t
    await nc.close()
    return total / wall


async def main() -> dict[str, object]:
    tmp = tempdir()
    out: dict[str, object] = {"bench": "throughput"}
    with NatsServer() as server:
        procs = Processes()
        try:
            procs.raw_responder(server.url)
            raw = await raw_round_trip(server.url, n=2000)
            out["raw_rtt_p50_ms"] = round(raw["p50_ms"], 4)
            out["raw_req_per_s_64_in_flight"] = round(await raw_throughput(server.url))

            env = {"NATS_URL": server.url, "CONDUCTOR_POOL": str(zero_latency_pool(tmp)), "CONDUCTOR_DURABLE": "0"}
            procs.serve("planner,worker-adapter,verifier", env)
            procs.serve("executor", env)
            await solve_many(server.url, 300, 64, 60)  # warm-up
            wall, errors = await solve_many(server.url, 3000, 256, 120)
            out["zero_latency.solves_per_s_256_in_flight"] = round(3000 / wall, 1)
            out["zero_latency.worker_calls_per_s"] = round(3 * 3000 / wall, 1)
            out["zero_latency.errors"] = errors
            out["zero_latency.raw_round_trips_per_solve"] = round(
                float(out["raw_req_per_s_64_in_flight"]) / (3000 / wall), 1  # type: ignore[arg-type]
            )
            procs.stop()

            slow = tmp / "slow"
            slow.mkdir()
            env = {
                "NATS_URL": server.url,
                "CONDUCTOR_POOL": str(zero_latency_pool(slow, latency_s=1.0)),
                "CONDUCTOR_DURABLE": "0",
                "CONDUCTOR_HANDLER_CONCURRENCY": "20000",
            }
            procs.serve("planner,worker-adapter,verifier", env)
            executor = procs.serve("executor", env)
            in_flight, total = 5000, 15000
            wall, errors = await solve_many(server.url, total, in_flight, 600)
            ideal = in_flight / 3.0
            out["slow.in_flight"] = in_flight
            out["slow.tasks"] = total
            out["slow.solves_per_s"] = round(total / wall, 1)
            out["slow.ideal_solves_per_s"] = round(ideal, 1)
            out["slow.fraction_of_ideal"] = round(total / wall / ideal, 3)
            out["slow.errors"] = errors
            out["slow.executor_peak_rss_mib"] = round(rss_mib(executor.pid, "VmHWM"), 1)
            out["slow.executor_kib_per_task_in_flight"] = round(out["slow.executor_peak_rss_mib"] * 1024 / in_flight, 1)  # type: ignore[operator]
        finally:
            procs.stop()
    out["targets"] = {"fraction_of_ideal": 0.9, "executor_rss_mib": 1024}
    return out


if __name__ == "__main__":
    report(asyncio.run(main()))

"""Per-step orchestration overhead against a raw nats-py round trip measured in the same run (issue: spine).

Services run as real processes (`conductor serve executor` and `conductor serve planner,worker-adapter,verifier`)
on a private nats-server; workers are zero-latency sim workers, so only the system is measured. A task with a
5-step sequential workflow (`refine:5`) and one with a single step (`refine:1`) are timed end to end from a client;
per-step overhead = (p50(5 steps) - p50(1 step)) / 4, which cancels the per-task costs (client hop, plan).
Run with checkpointing off and on to show the cost of durability per step. Targets (issue 37): p50 per step <= 1.3x
raw RTT without the checkpoint, <= 1.5x with it.
Where the time goes: each service process's CPU per added step (from /proc, the 5-step blocks' less the 1-step
ones') beside the CPU the raw requester and the raw responder spend per round trip: one task in flight, so the
step's latency is close to the CPU on its path.
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

from bench._harness import (
    NatsServer,
    Processes,
    cpu_s,
    pct,
    raw_round_trip,
    report,
    tempdir,
    zero_latency_pool,
)

N_TASKS = 600
BLOCKS = 4


async def task_latencies(url: str, policy: str, n: int) -> list[float]:
    nc = await nats.connect(url)
    body = {"question": "What is the capital city of Australia?", "policy": policy}
    for _ in range(20):  # warm-up
        await nc.request("conductor.solve.client", json.dumps(body).encode(), timeout=30)
    lat = []
    for _ in range(n):
        t = time.perf_counter()
        reply = await nc.request("conductor.solve.client", json.dumps(body).encode(), timeout=30)
        lat.append(time.perf_counter() - t)
        result = json.loads(reply.data)
        if result["error"] is not None:
            raise RuntimeError(f"solve failed: {result['error']}")
    await nc.close()
    return lat


async def measure(url: str, env: dict[str, str], procs: Processes) -> dict[str, float]:
    workers = procs.serve("planner,worker-adapter,verifier", env)
    executor = procs.serve("executor", env)
    lat: dict[str, list[float]] = {"refine:1": [], "refine:5": []}
    cpu = {(policy, p.pid): 0.0 for policy in lat for p in (workers, executor)}
    for _ in range(BLOCKS):  # interleaved blocks, so drift in machine load hits both alike
        for policy, times in lat.items():
            before = {p.pid: cpu_s(p.pid) for p in (workers, executor)}
            times += await task_latencies(url, policy, N_TASKS // BLOCKS)
            for pid, was in before.items():
                cpu[(policy, pid)] += cpu_s(pid) - was
    one, five = lat["refine:1"], lat["refine:5"]

    def per_step_cpu_us(pid: int) -> float:  # the 5-step task's CPU less the 1-step one's, per added step
        return (cpu[("refine:5", pid)] - cpu[("refine:1", pid)]) / N_TASKS / 4 * 1e6

    return {
        "task_1_step_p50_ms": pct(one, 0.5) * 1e3,
        "task_5_steps_p50_ms": pct(five, 0.5) * 1e3,
        "per_step_p50_ms": (pct(five, 0.5) - pct(one, 0.5)) / 4 * 1e3,
        "per_step_p90_ms": (pct(five, 0.9) - pct(one, 0.9)) / 4 * 1e3,
        "executor_cpu_us_per_step": per_step_cpu_us(executor.pid),
        "worker_adapter_cpu_us_per_step": per_step_cpu_us(workers.pid),
    }


async def main() -> dict[str, object]:
    tmp = tempdir()
    pool = zero_latency_pool(tmp)
    out: dict[str, object] = {"bench": "step_overhead"}
    with NatsServer() as server:
        procs = Processes()
        try:
            raw = await raw_round_trip(server.url, responder=procs.raw_responder(server.url))
            out["raw_rtt_p50_ms"] = raw["p50_ms"]
            out["raw_requester_cpu_us"] = round(raw["requester_cpu_us"], 1)
            out["raw_responder_cpu_us"] = round(raw["responder_cpu_us"], 1)
            for label, checkpoint in (("no_checkpoint", "0"), ("checkpoint", "1")):
                env = {
                    "NATS_URL": server.url,
                    "CONDUCTOR_POOL": str(pool),
                    "CONDUCTOR_CHECKPOINT_REQUEST_REPLY": checkpoint,
                }
                figures = await measure(server.url, env, procs)
                procs.stop()
                procs.raw_responder(server.url)
                for k, v in figures.items():
                    out[f"{label}.{k}"] = round(v, 4)
                out[f"{label}.per_step_p50_over_raw_rtt"] = round(
                    figures["per_step_p50_ms"] / raw["p50_ms"], 2
                )
        finally:
            procs.stop()
    out["raw_rtt_p50_ms"] = round(float(out["raw_rtt_p50_ms"]), 4)
    out["target_per_step_over_raw_rtt"] = {"checkpoint": 1.5, "no_checkpoint": 1.3}  # issue 37
    return out


if __name__ == "__main__":
    report(asyncio.run(main()))

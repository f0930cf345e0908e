"""Throughput of 3-step solves and behaviour under 5,000 concurrent tasks (issue: durable execution).

Services run as real processes on a private nats-server, one `conductor serve <service>` each, as they are
deployed (one pod per service). Every task is a 3-step sequential workflow (`refine:3`).

1. Zero-latency sim workers, 256 tasks in flight: solves per second, beside the raw nats-py round trip measured
   in the same run (round trips per second with 64 in flight, and p50 latency).
2. 1-second sim workers, 5,000 tasks in flight (``--in-flight 5000,20000`` for more runs): throughput as a fraction
   of the ideal (in-flight / 3 s) and the executor's peak RSS per task in flight. Issue 37's targets: <= 10 raw
   round trips of CPU per zero-latency solve; >= 0.95 of ideal at 5,000 and >= 0.90 at 20,000; <= 32 KiB per task
   (bench/memory_bench.py separates the idle process from the per-task cost).
   Throughput is a steady-state figure: 5,000 client lanes each keep one task in flight; completions are counted
   over a 20 s window that starts 12 s in (four task lifetimes), and CPU seconds per solve are taken over the
   same window. Two ways of reaching 5,000 in flight are measured:
   - ``ramped``: lanes start evenly over one task lifetime (3 s), the usual load-test ramp; arrivals are spread;
   - ``burst``: all 5,000 start at once; with a fixed 1 s latency the tasks then move in lock-step waves, and
     every wave queues behind the previous one in each process, which costs throughput for as long as it lasts.
   The overall rate (ramp and drain included) is printed beside each.
The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import msgspec
import nats

from bench._harness import (
    NatsServer,
    Processes,
    cpu_s,
    raw_round_trip,
    report,
    rss_mib,
    tempdir,
    zero_latency_pool,
)


class _Outcome(msgspec.Struct):
    """The one field of a SolveResult the client looks at; msgspec skips the rest without building it."""

    error: dict[str, object] | None = None


_outcome = msgspec.json.Decoder(_Outcome)


def serve_each(procs: Processes, env: dict[str, str]) -> dict[str, subprocess.Popen[str]]:
    """Every service in its own process, as deployed (one pod each); the executor last, once it can be answered."""
    return {name: procs.serve(name, env) for name in ("verifier", "planner", "worker-adapter", "executor")}


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
            reply = await nc.request("conductor.solve.client", body, timeout=timeout)
            if _outcome.decode(reply.data).error is not None:
                errors += 1

    t = time.perf_counter()
    await asyncio.gather(*(lane() for _ in range(in_flight)))
    wall = time.perf_counter() - t
    await nc.close()
    return wall, errors


class SteadyState(msgspec.Struct, kw_only=True):
    rate: float  # solves/s inside the window
    overall: float  # solves/s from the first request to the last reply
    errors: int
    cpu_ms_per_solve: dict[str, float]


async def steady_state(
    url: str,
    in_flight: int,
    *,
    ramp_s: float,
    pids: dict[str, int],
    warm_s: float = 12.0,
    window_s: float = 20.0,
) -> SteadyState:
    """``in_flight`` lanes, each one task at a time until ``warm_s + window_s``; completions and the processes' CPU
    seconds are counted inside the window only."""
    nc = await nats.connect(url, pending_size=512 * 1024 * 1024)
    body = json.dumps({"question": "What is the capital city of Australia?", "policy": "refine:3"}).encode()
    started = time.monotonic()
    stop_at = started + warm_s + window_s
    done: list[float] = []
    errors = 0

    async def lane() -> None:
        nonlocal errors
        while time.monotonic() < stop_at:
            reply = await nc.request("conductor.solve.client", body, timeout=600)
            if _outcome.decode(reply.data).error is not None:
                errors += 1
            done.append(time.monotonic())

    lanes = []
    for i in range(in_flight):
        lanes.append(asyncio.create_task(lane()))
        if ramp_s and i % 50 == 49:
            await asyncio.sleep(ramp_s * 50 / in_flight)
    await asyncio.sleep(max(started + warm_s - time.monotonic(), 0))
    cpu0, n0, t0 = {k: cpu_s(p) for k, p in pids.items()}, len(done), time.monotonic()
    await asyncio.sleep(window_s)
    cpu1, n1, t1 = {k: cpu_s(p) for k, p in pids.items()}, len(done), time.monotonic()
    await asyncio.gather(*lanes)
    overall = len(done) / (time.monotonic() - started)
    await nc.close()
    solved = max(n1 - n0, 1)
    return SteadyState(
        rate=(n1 - n0) / (t1 - t0),
        overall=overall,
        errors=errors,
        cpu_ms_per_solve={k: (cpu1[k] - cpu0[k]) * 1e3 / solved for k in pids},
    )


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


async def main(in_flights: list[int], starts: list[str]) -> dict[str, object]:
    tmp = tempdir()
    out: dict[str, object] = {"bench": "throughput"}
    with NatsServer() as server:
        procs = Processes()
        try:
            procs.raw_responder(server.url)
            raw = await raw_round_trip(server.url, n=2000)
            out["raw_rtt_p50_ms"] = round(raw["p50_ms"], 4)
            out["raw_req_per_s_64_in_flight"] = round(await raw_throughput(server.url))

            env = {
                "NATS_URL": server.url,
                "CONDUCTOR_POOL": str(zero_latency_pool(tmp)),
                "CONDUCTOR_DURABLE": "0",
            }
            serve_each(procs, env)
            await solve_many(server.url, 300, 64, 60)  # warm-up
            wall, errors = await solve_many(server.url, 3000, 256, 120)
            out["zero_latency.solves_per_s_256_in_flight"] = round(3000 / wall, 1)
            out["zero_latency.worker_calls_per_s"] = round(3 * 3000 / wall, 1)
            out["zero_latency.errors"] = errors
            out["zero_latency.raw_round_trips_per_solve"] = round(
                float(out["raw_req_per_s_64_in_flight"]) / (3000 / wall),
                1,  # type: ignore[arg-type]
            )
            procs.stop()

            for in_flight in in_flights:
                await wide(server.url, tmp / f"slow{in_flight}", in_flight, starts, procs, out)
        finally:
            procs.stop()
    out["targets"] = {
        "raw_round_trips_per_solve": 10,
        "fraction_of_ideal": {"5000": 0.95, "20000": 0.9},
        "executor_kib_per_task_in_flight": 32,
    }
    return out


async def wide(
    url: str, tmp: Path, in_flight: int, starts: list[str], procs: Processes, out: dict[str, object]
) -> None:
    """``in_flight`` 3-step solves on 1 s sim workers, reached by each way of ``starts``; figures under
    ``slow.<in_flight>.<start>.``."""
    await asyncio.to_thread(tmp.mkdir)
    env = {
        "NATS_URL": url,
        "CONDUCTOR_POOL": str(zero_latency_pool(tmp, latency_s=1.0)),
        "CONDUCTOR_DURABLE": "0",
        "CONDUCTOR_HANDLER_CONCURRENCY": str(max(20000, in_flight)),
    }
    ideal = in_flight / 3.0
    key = f"slow.{in_flight}"
    out[f"{key}.ideal_solves_per_s"] = round(ideal, 1)
    for start in starts:
        served = serve_each(procs, env)
        executor = served["executor"]
        run = await steady_state(
            url,
            in_flight,
            ramp_s=3.0 if start == "ramped" else 0.0,
            pids={name: p.pid for name, p in served.items() if name != "verifier"},
        )
        out[f"{key}.{start}.solves_per_s"] = round(run.rate, 1)
        out[f"{key}.{start}.fraction_of_ideal"] = round(run.rate / ideal, 3)
        out[f"{key}.{start}.overall_solves_per_s"] = round(run.overall, 1)
        out[f"{key}.{start}.errors"] = run.errors
        for name, ms in run.cpu_ms_per_solve.items():
            out[f"{key}.{start}.{name}_cpu_ms_per_solve"] = round(ms, 3)
        peak = rss_mib(executor.pid, "VmHWM")
        out[f"{key}.{start}.executor_peak_rss_mib"] = round(peak, 1)
        out[f"{key}.{start}.executor_kib_per_task_in_flight"] = round(peak * 1024 / in_flight, 1)
        procs.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--in-flight", default="5000", help="comma-separated wide runs, e.g. 5000,20000")
    parser.add_argument("--starts", default="ramped,burst", help="ramped, burst or both")
    args = parser.parse_args()
    starts = [s for s in args.starts.split(",") if s]
    if not set(starts) <= {"ramped", "burst"}:
        raise SystemExit(f"--starts: ramped or burst, not {args.starts!r}")
    report(asyncio.run(main([int(n) for n in args.in_flight.split(",") if n], starts)))

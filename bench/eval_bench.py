"""Eval throughput on `sim` with 1 s workers: items/s against the ideal set by concurrency, and the harness's own CPU
per item against a bare client's (issue 11). Printed, not asserted.

Services run as one `conductor serve all` process on a private nats-server, over a pool override: the sim pool's
workers with ``latency_s = 1`` and no jitter. Strategy ``single:sim-frontier`` makes one 1 s worker call per item,
so with C items in flight the ideal is C items/s; the rest of an item (plan, verify — the code items run in the
sandbox — and the hops) is the system's overhead. The harness (evaluation.runner: request building, one
``items.jsonl`` line per item, the progress callback) runs in this process; its CPU per item (process time) is set
against bare ``ConductorClient.solve`` calls on the same items in the same run, i.e. what any client pays anyway.
The last line printed is one JSON object.
"""

from __future__ import annotations

import asyncio
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._harness import NatsServer, Processes, report, tempdir
from conductor.client import ConductorClient
from conductor.settings import CommonSettings
from evaluation.runner import Options, Runner, plan, request, run_id
from evaluation.strategies import parse_strategies
from tasks import registry, sim

CONCURRENCY = (32, 128)
ROUNDS = 3  # items per run = ROUNDS * concurrency: three waves of 1 s calls
LATENCY_S = 1.0


def slow_pool(tmp: Path) -> Path:
    """The sim pool with 1 s workers and no jitter (dataset by absolute path)."""
    text = sim.pool_path().read_text(encoding="utf-8")
    text = re.sub(r"(?m)^latency_s = .*$", f"latency_s = {LATENCY_S}", text)
    text = re.sub(r"(?m)^latency_jitter_s = .*$", "latency_jitter_s = 0.0", text)
    text = re.sub(r"(?m)^dataset = .*$", f'dataset = "{sim.dataset_path()}"', text)
    text = re.sub(r"(?m)^concurrency = .*$", "concurrency = 1024", text)
    path = tmp / "pool.toml"
    path.write_text(text)
    return path


def fresh(path: Path) -> Path:
    path.mkdir(parents=True)
    return path


async def harness(client: ConductorClient, jobs: list, concurrency: int, out: Path) -> tuple[float, float]:
    """(wall s, CPU s) of the eval runner on ``jobs``."""
    runner = Runner(client, fresh(out), Options(concurrency=concurrency))
    wall, cpu = time.perf_counter(), time.process_time()
    items = await runner.run(jobs, lambda _item: None)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if any(it.outcome == "failed" for it in items):
        raise RuntimeError(f"failed items: {[it.reason for it in items if it.outcome == 'failed'][:3]}")
    return wall, cpu


async def bare(client: ConductorClient, jobs: list, concurrency: int, out: Path) -> tuple[float, float]:
    """(wall s, CPU s) of plain ``client.solve`` calls on the same requests: the baseline."""
    rid, sem, options = run_id(fresh(out)), asyncio.Semaphore(concurrency), Options(concurrency=concurrency)

    async def one(job) -> None:
        async with sem:
            await client.solve(request(job, rid, options), timeout=120)

    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(one(j) for j in jobs))
    return time.perf_counter() - wall, time.process_time() - cpu


async def measure(url: str, tmp: Path) -> dict[str, float]:
    problems = registry.load_benchmark("sim:train")
    strategy = parse_strategies("single:sim-frontier", ["sim-frontier"])
    out: dict[str, float] = {}
    async with ConductorClient(CommonSettings(nats_url=url)) as client:
        await harness(client, plan({"sim": problems}, strategy, 1, 16), 16, tmp / "warm")
        for c in CONCURRENCY:
            jobs = plan({"sim": problems[c:]}, strategy, 1, ROUNDS * c)  # distinct items per level
            b_wall, b_cpu = await bare(client, jobs, c, tmp / f"bare-{c}")
            h_wall, h_cpu = await harness(client, jobs, c, tmp / f"harness-{c}")
            n = len(jobs)
            out[f"c{c}.items"] = n
            out[f"c{c}.ideal_items_per_s"] = c / LATENCY_S
            out[f"c{c}.items_per_s"] = round(n / h_wall, 2)
            out[f"c{c}.items_per_s_over_ideal"] = round(n / h_wall / (c / LATENCY_S), 3)
            out[f"c{c}.bare_items_per_s"] = round(n / b_wall, 2)
            out[f"c{c}.harness_cpu_ms_per_item"] = round(h_cpu / n * 1e3, 3)
            out[f"c{c}.bare_client_cpu_ms_per_item"] = round(b_cpu / n * 1e3, 3)
            out[f"c{c}.harness_cpu_over_bare_client"] = round(h_cpu / b_cpu, 2)
    return out


async def main() -> dict[str, object]:
    tmp = tempdir()
    pool = slow_pool(tmp)
    result: dict[str, object] = {
        "bench": "eval",
        "worker_latency_s": LATENCY_S,
        "strategy": "single:sim-frontier",
    }
    with NatsServer() as server:
        procs = Processes()
        try:
            procs.serve("all", {"NATS_URL": server.url, "CONDUCTOR_POOL": str(pool)})
            result.update(await measure(server.url, tmp))
        finally:
            procs.stop()
    return result


if __name__ == "__main__":
    report(asyncio.run(main()))

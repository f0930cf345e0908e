"""Chaos and load harness: a restartable nats-server, the services as real processes, a fault-injecting provider,
durable submissions, and an audit of what came out.

``run_chaos`` submits tasks to the JetStream queue, SIGKILLs the executor and restarts nats-server at fixed points
of progress, then checks that every task has exactly one final result, that no result event was published twice,
and how many worker calls the provider answered twice. With ``cpu_hogs`` it does all that beside busy loops on
that many cores (cpu_hog.py) and records the highest 1-minute load average it saw.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import msgspec
import nats
import nats.js.errors

from bench.processes import Service, scrape
from conductor.client import ConductorClient, DuplicateTaskError
from conductor.natsserver import NatsServer, free_port
from conductor.settings import CommonSettings
from schemas.solve import SolveRequest, SolveResult
from schemas.tasks import Names, task_key
from tests.chaos.cpu_hog import cpu_hog

ROOT = Path(__file__).resolve().parents[2]


class ChaosReport(msgspec.Struct, kw_only=True):
    tasks: int
    duplicate_submissions: int
    results: int = 0
    results_with_error: int = 0
    error_codes: dict[str, int] = {}
    result_events_published: int = 0
    executor_kills: int = 0
    nats_restarts: int = 0
    provider: dict[str, object] = {}
    reexecuted_calls: int = 0
    metrics: dict[str, float] = {}  # sums scraped from the services' /metrics at the end, some also per label
    wall_s: float = 0.0
    tasks_per_s: float = 0.0
    cpu_hogs: int = 0  # busy-loop processes beside the run
    events: list[
        tuple[float, str]
    ] = []  # (unix time, "kill" or "restart"): to match re-executed calls' trails
    load_avg_max: float = 0.0  # the highest 1-minute load average seen while tasks ran


def pool_file(
    tmp: Path, port: int, *, concurrency: int = 512, timeout_s: float = 2.5, name: str = "chaos_pool.toml"
) -> Path:
    """Three workers on the fault server. The default timeout sits above a loaded machine's answer time: a late
    answer would be paid twice."""
    lines = ["reveal_names = false"]
    for i in range(3):
        lines += [
            "[[workers]]",
            f'name = "w{i}"',
            'provider = "openai_compatible"',
            'model = "fault"',
            f'base_url = "http://127.0.0.1:{port}/v1"',
            f'description = "worker {i}"',
            f"timeout_s = {timeout_s}",
            "max_retries = 10",
            f"concurrency = {concurrency}",
            "price_in_per_mtok = 1.0",
            "price_out_per_mtok = 2.0",
        ]
    path = tmp / name
    path.write_text("\n".join(lines) + "\n")
    return path


async def _count_results(js, names: Names, keys: list[str]) -> dict[str, SolveResult]:
    """The stored results of these task keys, by task id. Each key is read directly: counted from a KV key listing
    (an ordered consumer over the bucket, after a nats-server restart) a CI rehearsal once found no results where
    all 150 tasks had published their result events."""
    try:
        kv = await js.key_value(names.results_bucket)
    except nats.js.errors.BucketNotFoundError:
        return {}
    out = {}
    for k in keys:  # <tenant>.<task_id> (schemas.tasks.task_key)
        try:
            entry = await kv.get(k)
        except nats.js.errors.KeyNotFoundError:
            continue
        if entry.value:
            out[k.partition(".")[2]] = msgspec.json.decode(entry.value, type=SolveResult)
    return out


async def _results_so_far(url: str, names: Names, **options: object) -> int:
    """``options`` go to ``nats.connect`` (a secured server's user connects with its own ``inbox_prefix``)."""
    try:
        nc = await nats.connect(url, connect_timeout=1, max_reconnect_attempts=0, **options)  # type: ignore[arg-type]
    except Exception:  # the server may be restarting; progress is polled again
        return -1
    try:
        kv = await nc.jetstream().key_value(names.results_bucket)
        status = await kv.status()
        return int(status.values)
    except nats.js.errors.BucketNotFoundError:
        return 0
    finally:
        await nc.close()


async def run_chaos(
    tmp: Path,
    *,
    tasks: int,
    executor_kills: int,
    nats_restarts: int,
    fault_rate: float,
    timeout_s: float,
    cpu_hogs: int = 0,
) -> ChaosReport:
    with cpu_hog(cpu_hogs) if cpu_hogs else contextlib.nullcontext():
        report = await _run_chaos(
            tmp,
            tasks=tasks,
            executor_kills=executor_kills,
            nats_restarts=nats_restarts,
            fault_rate=fault_rate,
            timeout_s=timeout_s,
        )
    report.cpu_hogs = cpu_hogs
    return report


async def _run_chaos(
    tmp: Path, *, tasks: int, executor_kills: int, nats_restarts: int, fault_rate: float, timeout_s: float
) -> ChaosReport:
    nats_server = NatsServer(port=free_port(), store_dir=tmp / "jetstream")
    nats_server.start()
    fault_port = free_port()
    faults = subprocess.Popen(
        [sys.executable, "-m", "tests.chaos.fault_server", str(fault_port), str(fault_rate), "7"],
        stdout=subprocess.PIPE,
        cwd=ROOT,
    )
    assert faults.stdout is not None and faults.stdout.readline().strip() == b"ready"
    env = {
        "NATS_URL": nats_server.url,
        "CONDUCTOR_POOL": str(pool_file(tmp, fault_port)),
        # CONDUCTOR_CHAOS_LOG_LEVEL=INFO logs every worker call and retry: the trail of a re-executed call
        "CONDUCTOR_LOG_LEVEL": os.environ.get("CONDUCTOR_CHAOS_LOG_LEVEL", "WARNING"),
        "CONDUCTOR_ACK_WAIT_S": "3",
        "CONDUCTOR_REDELIVERY_BACKOFF_BASE_S": "0.2",
        "CONDUCTOR_RETRY_BACKOFF_BASE_S": "0.2",
        "CONDUCTOR_MAX_DELIVER": "20",
        "CONDUCTOR_DRAIN_TIMEOUT_S": "5",
        "CONDUCTOR_WORK_TIMEOUT_S": "20",  # a request lost in the NATS restart is retried soon, not after 900 s
    }
    helpers_port, executor_port = free_port(), free_port()
    helpers = Service(
        "planner,worker-adapter,verifier",
        {**env, "CONDUCTOR_METRICS_PORT": str(helpers_port)},
        tmp / "helpers.log",
    )
    executor = Service(
        "executor", {**env, "CONDUCTOR_METRICS_PORT": str(executor_port)}, tmp / "executor.log"
    )
    report = ChaosReport(tasks=tasks, duplicate_submissions=tasks // 20)
    names = Names.for_prefix("")
    started = time.monotonic()
    try:
        helpers.start()
        executor.start()
        settings = CommonSettings(nats_url=nats_server.url)
        async with ConductorClient(settings) as client:
            tenant = client.tenant
            for i in range(tasks):
                req = SolveRequest(
                    question=f"Task {i}: what is {i} + {i}?", task_id=f"task-{i}", policy="refine:3"
                )
                await client.submit(req)
                if i % 20 == 0:
                    with contextlib.suppress(DuplicateTaskError):  # dropped by JetStream's dedup window
                        await client.submit(req)
        plan = _schedule(tasks, executor_kills, nats_restarts)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            done = await _results_so_far(nats_server.url, names)
            report.load_avg_max = max(report.load_avg_max, os.getloadavg()[0])
            if done >= tasks:
                break
            while plan and done >= plan[0][0]:
                _, action = plan.pop(0)
                report.events.append((time.time(), action))
                if action == "kill":
                    executor.kill()
                    report.executor_kills += 1
                    executor.start()
                else:
                    nats_server.stop()
                    time.sleep(1.0)
                    nats_server.start()
                    report.nats_restarts += 1
            await asyncio.sleep(0.2)
        report.wall_s = time.monotonic() - started
        nc = await nats.connect(nats_server.url)
        js = nc.jetstream()
        results = await _count_results(js, names, [task_key(tenant, f"task-{i}") for i in range(tasks)])
        info = await js.stream_info(names.result_events_stream)
        report.result_events_published = int(info.state.last_seq)
        await nc.close()
        report.results = sum(1 for tid, r in results.items() if r.task_id == tid and tid.startswith("task-"))
        errors = [r.error.code for r in results.values() if r.error is not None]
        report.results_with_error = len(errors)
        report.error_codes = {str(c): errors.count(c) for c in set(errors)}
        with urllib.request.urlopen(f"http://127.0.0.1:{fault_port}/stats", timeout=5) as resp:
            report.provider = json.loads(resp.read())
        report.reexecuted_calls = int(report.provider["reexecuted"])  # type: ignore[call-overload]
        report.tasks_per_s = report.results / report.wall_s if report.wall_s else 0.0
        report.metrics = {
            **scrape(
                helpers_port,
                [
                    "conductor_worker_retries_total",
                    "conductor_worker_calls_total",
                    "conductor_worker_faults_total",
                ],
                split={"conductor_worker_faults_total": "reason"},
            ),
            **scrape(executor_port, ["conductor_redeliveries_total", "conductor_tasks_total"]),
        }
        return report
    finally:
        executor.stop()
        helpers.stop()
        faults.kill()
        faults.wait()
        nats_server.stop()


def _schedule(tasks: int, kills: int, restarts: int) -> list[tuple[int, str]]:
    """Chaos at evenly spread points of progress (results stored so far): kill, restart nats, kill, kill, ..."""
    order = ["kill"] * kills
    for _ in range(restarts):
        order.insert(min(1, len(order)), "restart")
    return [(int(tasks * (i + 1) / (len(order) + 1)), a) for i, a in enumerate(order)]

"""The reward over NATS against the same reward computed in process (issue 18, benchmarks): what the rollout API costs.

The same ``ROLLOUTS`` rollouts (sim train questions, math and mcq, parseable completions of 1-3 chained steps, sim
workers answering at once so that the workers cost nothing) are scored three ways, each ``ROUNDS`` times, in one
process on an embedded nats-server:

- **in process**: the executor core (``Rollouts`` over ``Executor``: parse, steps, verification, reward by
  conductor/reward.py) with the worker-adapter and the verifier called as functions — no NATS, no serialization;
- **NATS, pulled**: the learner's client (``RolloutClient`` over ``rollout_transport``, the default placement) and
  the executor, worker-adapter and verifier services as `conductor train --local` starts them: each rollout a work
  item, each step a request to the worker-adapter, each verification a request to the verifier;
- **NATS, placed**: the same with ``rollout.placement = "queue"`` (a batch per request).

Batches of the learner's default 16, all sent at once. Printed: the median wall time per round and per rollout,
and each NATS path's ratio to in process (the overhead). Printed, not asserted; the last line is one JSON object.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

import msgspec
import nats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._harness import tempdir
from bench.rollout_fleet import sim_rollouts, slow_sim_pool
from conductor.app.runtime import create_services, running
from conductor.logging import configure_logging
from conductor.natsserver import NatsServer
from conductor.pool import load_pool
from conductor.settings import CommonSettings
from schemas.plan import PlanReply, PlanRequest
from schemas.rollout import RolloutBatch, RolloutResult
from schemas.solve import ProgressEvent
from schemas.verify import VerifyBatch, VerifyBatchResult
from schemas.work import WorkReply, WorkRequest
from services.executor.config import ExecutorSettings
from services.executor.core import Executor
from services.executor.rollouts import Rollouts
from services.learner.config import RolloutSection
from services.learner.rollouts import RolloutClient, rollout_transport, split
from services.verifier.app import VerifierService
from services.verifier.config import Settings as VerifierSettings
from services.worker_adapter.app import WorkerAdapterService
from services.worker_adapter.config import WorkerAdapterSettings

ROLLOUTS = 256  # one step of the paper's (4 questions x 64)
ROUNDS = 15  # a round is a fraction of a second: the median of many
BATCH = RolloutSection().batch_size
SERVICES = ("executor", "worker-adapter", "verifier")


class InProcess:
    """The executor's ``Transport`` with its downstream services called as functions."""

    def __init__(self, workers: WorkerAdapterService, verifier: VerifierService) -> None:
        self.workers, self.verifier = workers, verifier

    async def plan(self, req: PlanRequest, timeout: float) -> PlanReply:
        raise AssertionError("a rollout never asks the planner")

    async def work(self, req: WorkRequest, timeout: float) -> WorkReply:
        return await self.workers.handle_work(req)

    async def verify(self, batch: VerifyBatch, timeout: float) -> VerifyBatchResult:
        return await self.verifier.handle_verify(batch)

    async def progress(self, event: ProgressEvent) -> None:
        pass


async def timed(score, rollouts) -> tuple[float, list[RolloutResult]]:
    started = time.perf_counter()
    results = await score(rollouts)
    return time.perf_counter() - started, results


async def in_process(env: dict[str, str], rounds: list[list]) -> list[float]:
    workers = WorkerAdapterService(
        WorkerAdapterSettings.from_env({**env, "CONDUCTOR_WORKER_SHARED": "false"})
    )
    verifier = VerifierService(VerifierSettings.from_env(env))
    await workers.start(None)  # type: ignore[arg-type]  # not shared: no connection needed
    await verifier.start(None)  # type: ignore[arg-type]
    settings = ExecutorSettings.from_env({**env, "CONDUCTOR_DURABLE": "false"})
    rollouts = Rollouts(
        Executor(load_pool(Path(env["CONDUCTOR_POOL"])), settings, InProcess(workers, verifier)),
        concurrency=ROLLOUTS,
    )

    async def score(batch):
        replies = await asyncio.gather(*(rollouts.run(RolloutBatch(rollouts=b)) for b in split(batch, BATCH)))
        return [r for reply in replies for r in reply.results]

    try:
        walls = []
        for rs in rounds:
            wall, results = await timed(score, rs)
            assert all(r.reward is not None for r in results), "a rollout went unscored in process"
            walls.append(wall)
        return walls
    finally:
        await verifier.stop()
        await workers.stop()


async def over_nats(env: dict[str, str], rounds: list[list], placement: str) -> list[float]:
    settings = CommonSettings.from_env(env)
    section = RolloutSection(placement=placement, concurrency=-(-ROLLOUTS // BATCH), timeout_s=300.0)
    async with running(create_services(SERVICES, env), settings, name="reward-bench"):
        nc = await nats.connect(env["NATS_URL"])
        client = RolloutClient(rollout_transport(nc, settings.subject_prefix, section), section)
        try:
            walls = []
            for rs in rounds:
                wall, results = await timed(client.score, rs)
                assert all(r.reward is not None for r in results), (
                    f"a rollout went unscored over NATS ({placement})"
                )
                walls.append(wall)
            return walls
        finally:
            await nc.close()


async def main() -> dict[str, object]:
    configure_logging("WARNING", json=False)  # the in-process services log as they would in a service process
    tmp = tempdir()
    pool = slow_sim_pool(tmp, latency_s=0.0, concurrency=10_000)
    warm = sim_rollouts(32, tag="warm-")
    rounds = [warm] + [sim_rollouts(ROLLOUTS, tag=f"r{k}-", seed=k) for k in range(ROUNDS)]
    figures: dict[str, list[float]] = {}
    with NatsServer() as server:
        env = {
            "NATS_URL": server.url,
            "CONDUCTOR_POOL": str(pool),
            "CONDUCTOR_LOG_LEVEL": "WARNING",
            "CONDUCTOR_METRICS_PORT": "off",
            "CONDUCTOR_DURABLE": "0",
        }
        figures["in process"] = (await in_process(env, rounds))[1:]  # the first round warms up
        for placement in ("pull", "queue"):
            prefixed = {**env, "CONDUCTOR_SUBJECT_PREFIX": f"bench{placement}."}
            figures[f"NATS, {placement}"] = (await over_nats(prefixed, rounds, placement))[1:]
    base = statistics.median(figures["in process"])
    print(
        f"{ROLLOUTS} rollouts a round (1-3 chained steps, instant sim workers, real verification), batches of "
        f"{BATCH} sent at once; median of {ROUNDS} rounds after a warm-up"
    )
    print("path              s/round   ms/rollout   vs in process")
    out: dict[str, object] = {
        "bench": "reward_overhead",
        "rollouts": ROLLOUTS,
        "rounds": ROUNDS,
        "batch_size": BATCH,
    }
    for name, walls in figures.items():
        median = statistics.median(walls)
        print(f"{name:<16} {median:>8.3f} {median * 1e3 / ROLLOUTS:>12.2f} {median / base:>15.2f}")
        out[name] = {
            "wall_s": [round(w, 3) for w in walls],
            "median_s": round(median, 3),
            "ms_per_rollout": round(median * 1e3 / ROLLOUTS, 3),
            "ratio_vs_in_process": round(median / base, 2),
        }
    return out


if __name__ == "__main__":
    print(json.dumps(msgspec.to_builtins(asyncio.run(main()))))

"""Rollout services as separate processes: bench/rollout_scaling_bench.py and tests/learner/test_rollout_kill.py.

A secured nats-server (each process connects as its own NATS user, as deployed), one process serving the
worker-adapter and the verifier, executor replicas added as wanted (``add_executors``), each with its own
metrics port, and the learner's own client path: ``RolloutClient`` over ``rollout_transport`` (rollouts pulled by
the executors from the work queue, or batches by request/reply, as ``rollout.placement`` says), connected as the
``learner`` user. The workers are the sim family's five (tasks/data/sim_pool.toml) with a fixed latency per
call, so a rollout of k chained steps takes about k times that; the rollouts are sim train questions (math and
mcq: code would run programs in the sandbox) with parseable completions of chained steps.
"""

from __future__ import annotations

import contextlib
import random
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nats

from bench.processes import Service, scrape
from conductor.credentials import connection
from conductor.natsserver import NatsServer, free_port
from conductor.pool import load_pool
from conductor.settings import CommonSettings
from conductor.workflow import render_completion
from schemas.plan import Workflow
from schemas.rollout import Rollout
from schemas.solve import SolveRequest
from services.learner.config import RolloutSection
from services.learner.rollouts import RolloutClient, rollout_transport
from tasks import sim

SUBTASKS = (
    "Solve the question step by step.",
    "Check the answer above and correct it if it is wrong.",
    "Give the final answer above in the format the question asks for.",
)


def slow_sim_pool(tmp: Path, *, latency_s: float, concurrency: int) -> Path:
    """The sim family's pool with every call taking ``latency_s`` (no jitter) and ``concurrency`` calls of each
    worker allowed at once across the deployment."""
    text = sim.pool_path().read_text()
    for key, value in (("latency_s", latency_s), ("latency_jitter_s", 0.0), ("concurrency", concurrency)):
        text = re.sub(rf"(?m)^{key} = .*$", f"{key} = {value}", text)
    text = text.replace('dataset = "sim_tasks.jsonl"', f'dataset = "{sim.dataset_path()}"')
    path = tmp / "slow_sim_pool.toml"
    path.write_text(text)
    pool = load_pool(path)
    assert all(w.sim and w.sim.latency_s == latency_s for w in pool.workers), "sim_pool.toml changed shape"
    return path


def chain(k: int, first: int, n_workers: int) -> Workflow:
    """k steps, each seeing the one before (so they run one after another), routed round the view from ``first``."""
    return Workflow(
        model_id=[(first + j) % n_workers for j in range(k)],
        subtasks=list(SUBTASKS[:k]),
        access_list=[[j - 1] if j else [] for j in range(k)],
    )


def sim_rollouts(n: int, *, steps: Sequence[int] = (1, 2, 3), tag: str = "r", seed: int = 0) -> list[Rollout]:
    """``n`` parseable rollouts over the whole sim pool: the i-th has ``steps[i % len(steps)]`` chained steps."""
    names = [w.name for w in load_pool(sim.pool_path()).workers]
    problems = [p for p in sim.tasks("train") if p.domain in ("math", "mcq")]
    picked = random.Random(seed).sample(problems, min(n, len(problems)))
    out = []
    for i in range(n):
        p, k = picked[i % len(picked)], steps[i % len(steps)]
        completion = render_completion(f"A {k}-step chain.", chain(k, i, len(names)))
        out.append(
            Rollout(
                id=f"{tag}{i}",
                completion=completion,
                request=SolveRequest(
                    question=p.question, pool=names, reference=p.reference, domain=p.domain, progress=False
                ),
                policy_version="fleet@0",
            )
        )
    return out


class RolloutFleet:
    """The processes, started by ``start`` and ``add_executors``, all stopped by ``stop``."""

    def __init__(
        self,
        tmp: Path,
        *,
        latency_s: float,
        worker_concurrency: int = 10_000,
        executor_env: Mapping[str, str] | None = None,
    ) -> None:
        self.tmp = tmp
        self.nats = NatsServer.secured(port=free_port(), store_dir=tmp / "jetstream")
        self.latency_s = latency_s
        self.worker_concurrency = worker_concurrency
        self.executor_env = dict(executor_env or {})
        self.env: dict[str, str] = {}
        self.helpers: Service | None = None
        self.executors: list[Service] = []
        self.metrics_ports: list[int] = []

    def start(self) -> None:
        self.nats.start()
        pool = slow_sim_pool(self.tmp, latency_s=self.latency_s, concurrency=self.worker_concurrency)
        self.env = {
            **self.nats.env(),  # NATS_URL and the credentials file: each process connects as its own kind
            "CONDUCTOR_POOL": str(pool),
            "CONDUCTOR_LOG_LEVEL": "WARNING",
            "CONDUCTOR_METRICS_PORT": "off",
            "CONDUCTOR_DRAIN_TIMEOUT_S": "5",
            "CONDUCTOR_DURABLE": "0",  # rollouts are request/reply; no JetStream intake to declare
        }
        self.helpers = Service("worker-adapter,verifier", self.env, self.tmp / "helpers.log")
        self.helpers.start()

    def add_executors(self, n: int = 1) -> list[Service]:
        """``n`` more executor replicas, started side by side; each serves its metrics on a port of its own."""
        added = []
        for _ in range(n):
            port = free_port()
            env = {**self.env, **self.executor_env, "CONDUCTOR_METRICS_PORT": str(port)}
            added.append(Service("executor", env, self.tmp / f"executor-{len(self.executors)}.log"))
            self.executors.append(added[-1])
            self.metrics_ports.append(port)
        if not added:
            return added
        with ThreadPoolExecutor(n) as pool:
            list(pool.map(Service.start, added))
        return added

    def steps_done(self, i: int) -> float:
        """Workflow steps executor ``i`` has finished (``conductor_steps_total``, every worker and outcome)."""
        return scrape(self.metrics_ports[i], ["conductor_steps_total"])["conductor_steps_total"]

    @contextlib.asynccontextmanager
    async def learner(self, section: RolloutSection) -> AsyncIterator[RolloutClient]:
        """The learner's rollout client, as ``services.learner.connect.remote`` builds it, on the event loop."""
        conn = connection(CommonSettings.from_env(self.nats.env()), "learner")
        nc = await nats.connect(conn.url, inbox_prefix=conn.inbox_prefix, name="fleet-learner")
        try:
            yield RolloutClient(rollout_transport(nc, "", section), section)
        finally:
            await nc.close()

    def stop(self) -> None:
        for svc in self.executors:
            svc.stop()
        if self.helpers is not None:
            self.helpers.stop()
        self.nats.stop()

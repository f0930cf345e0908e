"""The eval loop: every (benchmark, strategy, repeat, item) sent through the running services, concurrently,
each result appended to ``items.jsonl`` as it finishes.

Nothing is scored here: each item is a ``SolveRequest`` carrying the reference, and the executor asks the verifier
(the same path as any user's solve). ``--durable`` submits to the JetStream task queue and waits on the results
bucket instead of request/reply. Task ids are a digest of the run id and the item's key, so a rerun of a durable
run finds tasks that finished while it was away. A service that is not there stops the run with
``ServiceUnreachableError``; finished items stay on disk. Each item records its benchmark's task version
(tasks/registry.py), and a `conductor` item the policy that planned it (``Options.policy``); an item finished under
another version or policy is not "done" and runs again.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import nats.errors
import nats.js.errors

from conductor.client import ConductorClient, NoExecutorError, ResultNotReadyError, SolveTimeoutError
from conductor.policies import PolicyRecord
from evaluation import records
from evaluation.errors import ServiceUnreachableError
from evaluation.records import ItemResult, Key
from evaluation.strategies import Strategy
from schemas.errors import ErrorCode, ErrorInfo
from schemas.solve import SolveRequest, SolveResult
from tasks.problem import Problem

ITEMS_FILE = "items.jsonl"


@dataclass(frozen=True)
class Job:
    benchmark: str
    strategy: Strategy
    repeat: int
    problem: Problem
    version: str = ""  # the benchmark's task version

    @property
    def key(self) -> Key:
        return (self.benchmark, self.strategy.label, self.repeat, self.problem.id)


@dataclass(frozen=True)
class Options:
    concurrency: int = 8
    cache: bool = False
    durable: bool = False
    pool_subset: list[str] | None = None
    timeout_s: float = 600.0
    hide_domain: bool = False  # requests name no answer type (the verifier still judges by the reference)
    policy: PolicyRecord | None = (
        None  # the planner's resolved policy (services started here); None: not known
    )


def ran_by(job: Job, options: Options) -> PolicyRecord | None:
    """The configured policy a job's result depends on: a strategy without its own (``conductor``) runs it."""
    return options.policy if job.strategy.policy is None else None


def sample(problems: Sequence[Problem], limit: int | None, seed: int = 0) -> list[Problem]:
    """The first ``limit`` problems in a seeded order, so a limit spans every domain (the sim family is stored
    domain by domain) and the same limit picks the same items on a rerun."""
    if limit is None or limit >= len(problems):
        return list(problems)

    def digest(p: Problem) -> str:
        return hashlib.sha256(f"{seed}:{p.id}".encode()).hexdigest()

    return sorted(problems, key=digest)[:limit]


def plan(
    problems: Mapping[str, Sequence[Problem]],
    strategies: Sequence[Strategy],
    repeats: int,
    limit: int | None,
    versions: Mapping[str, str] | None = None,
) -> list[Job]:
    """Repeat by repeat, item by item, every strategy on each item: running figures stay comparable mid-run."""
    chosen = {name: sample(items, limit) for name, items in problems.items()}
    versions = versions or {}
    return [
        Job(name, strategy, repeat, problem, versions.get(name, ""))
        for repeat in range(repeats)
        for name, items in chosen.items()
        for problem in items
        for strategy in strategies
    ]


def run_id(out_dir: Path) -> str:
    """The run's id, kept in ``run.json`` so a rerun into the same directory reuses its task ids."""
    meta = out_dir / "run.json"
    if meta.is_file():
        return str(json.loads(meta.read_text())["run_id"])
    rid = uuid.uuid4().hex[:12]
    meta.write_text(json.dumps({"run_id": rid}) + "\n")
    return rid


def task_id(rid: str, key: Key) -> str:
    return f"eval-{rid}-" + hashlib.sha256("\x1f".join(map(str, key)).encode()).hexdigest()[:24]


def request(job: Job, rid: str, options: Options) -> SolveRequest:
    p, s = job.problem, job.strategy
    return SolveRequest(
        question=p.question,
        task_id=task_id(rid, job.key),
        pool=options.pool_subset,
        max_steps=s.max_steps,
        max_rounds=s.max_rounds,
        domain=None if options.hide_domain else p.domain,
        reference=p.reference,
        policy=s.policy,
        cache=options.cache,
        progress=False,
    )


def item(job: Job, result: SolveResult, options: Options = Options()) -> ItemResult:
    p = job.problem
    return records.finished(
        result,
        benchmark=job.benchmark,
        strategy=job.strategy.label,
        repeat=job.repeat,
        item=p.id,
        domain=p.domain,
        subject=p.subject,
        question=p.question,
        version=job.version,
        policy=ran_by(job, options),
    )


class Runner:
    """Runs jobs on a connected ``ConductorClient``; ``on_item`` sees each finished item (the progress bar)."""

    def __init__(self, client: ConductorClient, out_dir: Path, options: Options) -> None:
        self.client = client
        self.out_dir = out_dir
        self.options = options
        self.items_path = out_dir / ITEMS_FILE

    def pending(self, jobs: Sequence[Job]) -> tuple[list[Job], dict[Key, ItemResult]]:
        """The jobs still to run and the finished items (by key) of this run's jobs: an item is done when it did
        not fail transiently and ran under the job's task version and policy."""
        expected = {j.key: (j.version, ran_by(j, self.options)) for j in jobs}
        done = {
            k: v
            for k, v in records.load(self.items_path).items()
            if not v.retryable and k in expected and (v.version, v.policy) == expected[k]
        }
        return [j for j in jobs if j.key not in done], done

    async def run(self, jobs: Sequence[Job], on_item: Callable[[ItemResult], None]) -> list[ItemResult]:
        rid = run_id(self.out_dir)
        records.repair(self.items_path)
        sem = asyncio.Semaphore(self.options.concurrency)
        finished: list[ItemResult] = []

        async def one(job: Job) -> None:
            async with sem:
                result = await self.solve(request(job, rid, self.options))
            done = item(job, result, self.options)
            records.append(self.items_path, done)
            finished.append(done)
            on_item(done)

        try:
            async with asyncio.TaskGroup() as group:
                for job in jobs:
                    group.create_task(one(job))
        except* ServiceUnreachableError as failed:
            raise failed.exceptions[0] from None
        return finished

    async def solve(self, req: SolveRequest) -> SolveResult:
        """One request through the services; a missing service is ``ServiceUnreachableError``, a timeout an error
        result (retryable)."""
        timeout = self.options.timeout_s
        try:
            if not self.options.durable:
                return await self.client.solve(req, timeout=timeout)
            task = await self.client.submit(req)
            return await self.client.result(task, wait=timeout)
        except (nats.errors.NoRespondersError, NoExecutorError) as exc:
            raise ServiceUnreachableError(
                f"nothing serves {self.client.settings.subject('conductor.solve')} on {self.client.settings.nats_url}:"
                " start them (`conductor serve all`), or pass --embedded to run NATS and the services in this process"
            ) from exc
        except (nats.js.errors.NoStreamResponseError, nats.js.errors.NotFoundError) as exc:
            raise ServiceUnreachableError(
                f"no durable task queue on {self.client.settings.nats_url}: is an executor running with "
                f"CONDUCTOR_DURABLE=1? ({type(exc).__name__})"
            ) from exc
        except (nats.errors.ConnectionClosedError, nats.errors.NoServersError) as exc:
            raise ServiceUnreachableError(
                f"lost the NATS connection to {self.client.settings.nats_url}"
            ) from exc
        except (SolveTimeoutError, ResultNotReadyError) as exc:
            info = ErrorInfo(code=ErrorCode.TIMEOUT, message=str(exc), retryable=True)
            return SolveResult(task_id=req.task_id or "", error=info)

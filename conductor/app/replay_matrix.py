"""The cascade search's answer matrix on a replay pool, in this process: the same calls the rollout API makes, without
the bus (services/learner/cascade.py).

On a replay pool a single worker's answer is a table lookup, so the rollout API's cost is all overhead: NATS hops,
the executor's task machinery and the worker adapter's limits around a lookup of milliseconds — about two rollouts a
second on a loaded 2-core machine, two hours for the 18,000 of a 12-worker pool on 1,500 questions. Here each cell
runs the same pieces in the same order: the executor's message builder with the pool's answer-format instruction
(``build_messages``, ``AnswerFormat.for_step``), the replay provider (``ReplayProvider.complete``: the recorded
text and its token counts), the pool's prices (``WorkerSpec.cost``) and the verifier (``Verifier.verify``, its warm
math and sandbox processes) judged by the reward rule (``conductor.reward.judge``). A pool with any worker that is
not a replay worker is refused: only a lookup is exact without the services.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import msgspec

from conductor.pool import Pool, WorkerSpec
from conductor.reward import judge
from services.executor.core import as_reference
from services.executor.messages import build_messages
from services.learner.cascade import Cell, Matrix
from services.learner.search import SOLVE
from services.verifier.config import Settings as VerifierSettings
from services.verifier.core import Verifier
from services.worker_adapter.config import WorkerAdapterSettings
from services.worker_adapter.provider import CallParams
from services.worker_adapter.providers.replay import ReplayProvider
from tasks.finals import step_answer
from tasks.problem import Problem

CONCURRENCY = 16
"""Cells in flight: the verifier's processes are the bound."""


class NotReplayError(ValueError):
    """A pool with a worker that is not a replay worker: its answers are not lookups."""


def replay_only(pool: Pool, workers: Sequence[str]) -> list[WorkerSpec]:
    specs = pool.subset(list(workers))
    if others := [w.name for w in specs if w.provider != "replay"]:
        raise NotReplayError(f"the answer matrix is computed offline on replay workers only; not: {others}")
    return specs


async def offline_matrix(
    problems: Sequence[Problem], pool: Pool, workers: Sequence[str]
) -> tuple[Matrix, int]:
    """Each worker alone on each question, as ``cascade.answer_matrix`` through the rollout API; (matrix, questions
    left out because a cell could not be judged)."""
    specs = replay_only(pool, workers)
    provider = ReplayProvider(
        pool, WorkerAdapterSettings.from_env().replay_path
    )  # as the worker adapter reads it
    cells: dict[str, dict[str, Cell]] = {p.id: {} for p in problems}
    masked: set[str] = set()
    gate = asyncio.Semaphore(CONCURRENCY)
    async with Verifier(VerifierSettings.from_env()) as verifier:

        async def one(p: Problem, spec: WorkerSpec) -> None:
            async with gate:
                fmt = pool.answer_format.for_step(p.domain, p.question, SOLVE, final=True)
                messages = build_messages(p.question, SOLVE, [], answer_format=fmt)
                params = CallParams(
                    max_tokens=spec.max_tokens, temperature=spec.temperature, timeout_s=spec.timeout_s
                )
                done = await provider.complete(spec, messages, params)
                req = p.request(done.text)
                verdict = await verifier.verify(
                    msgspec.structs.replace(req, reference=as_reference(p.reference, p.domain))
                )
            reward = judge(True, verdict).value
            if reward is None:
                masked.add(p.id)
                return
            cells[p.id][spec.name] = Cell(
                reward=reward,
                cost=spec.cost(done.input_tokens, done.output_tokens),
                response=done.text,
                answer=step_answer(done.text, p.domain),
            )

        await asyncio.gather(*(one(p, s) for p in problems for s in specs))
        await provider.aclose()
    return {pid: row for pid, row in cells.items() if pid not in masked and len(row) == len(specs)}, len(
        masked
    )

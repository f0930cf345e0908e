"""Scripted stand-ins for the executor's rollout subject: tiny and honest about what they model.

``SkillScorer`` scores a completion as the sim pool would on average: unparseable → 0; otherwise the workflow's
last worker answers correctly with its skill for the question's domain → 1, else 0.5. In process, no NATS: the
in-process baseline of bench/learner_bench.py and the fake reward path for tests.
"""

from __future__ import annotations

import random

from conductor.pool import Pool
from conductor.workflow import WorkflowFormatError, parse_completion
from schemas.errors import ErrorCode, ErrorInfo
from schemas.rollout import Rollout, RolloutBatch, RolloutBatchResult, RolloutResult
from schemas.solve import StepRecord
from schemas.usage import Usage


class SkillScorer:
    def __init__(self, pool: Pool, seed: int = 0) -> None:
        self.pool = pool
        self.rng = random.Random(seed)
        self.seen: list[Rollout] = []

    def __call__(self, rollouts: list[Rollout]) -> list[RolloutResult]:
        self.seen.extend(rollouts)
        return [self.one(r) for r in rollouts]

    def one(self, r: Rollout) -> RolloutResult:
        view = r.solve.pool or []
        try:
            parsed = parse_completion(r.completion, n_workers=len(view), allow_empty=r.round > 0)
        except WorkflowFormatError as exc:
            info = ErrorInfo(code=ErrorCode.FORMAT_ERROR, message=str(exc))
            return RolloutResult(id=r.id, reward=0.0, parse_error=info)
        wf = parsed.workflow
        if not len(wf):
            return RolloutResult(id=r.id, reward=0.75, parsed=True, handback=True, answer="kept")
        steps = [
            StepRecord(index=i, model_id=m, worker=view[m], subtask=t, access=a, usage=Usage(cost_usd=0.001))
            for i, (m, t, a) in enumerate(zip(wf.model_id, wf.subtasks, wf.access_list, strict=True))
        ]
        spec = self.pool.get(steps[-1].worker).sim
        skill = spec.skill.get(r.solve.domain or "", spec.default_skill) if spec else 0.5
        correct = self.rng.random() < skill
        return RolloutResult(
            id=r.id,
            reward=1.0 if correct else 0.5,
            parsed=True,
            answer="right" if correct else "wrong",
            steps=steps,
            usage=Usage(cost_usd=0.001 * len(steps), calls=len(steps)),
        )

    async def batch(self, batch: RolloutBatch) -> RolloutBatchResult:
        """The same, as the rollout subject's handler (for a fake responder on a real nats-server)."""
        return RolloutBatchResult(results=self(batch.rollouts))

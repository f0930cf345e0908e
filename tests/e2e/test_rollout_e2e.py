"""The rollout API end to end on a real nats-server: two executor replicas, the worker-adapter with the sim pool and
the real verifier; the learner's side is ``ConductorClient.rollout_all`` (issue 12, item 1)."""

from __future__ import annotations

import contextlib

import nats
import pytest

from conductor.app.runtime import create_services, running
from conductor.client import ConductorClient
from conductor.settings import CommonSettings
from conductor.workflow import render_completion
from schemas.plan import Workflow
from schemas.rollout import ROLLOUT_SUBJECT, Rollout, RolloutBatch
from schemas.work import WORK
from services.executor.app import ExecutorService
from services.executor.config import ExecutorSettings

pytestmark = pytest.mark.e2e

QUESTIONS = {  # in the bundled sim dataset, with their answers
    "What is the remainder when 2^100 is divided by 7?": "2",
    "Find the sum of all positive divisors of 36.": "91",
    "Solve for x: 3x + 7 = 2x - 5.": "-12",
    "What is the area of a triangle with side lengths 13, 14 and 15?": "84",
}
VIEW = ["sim-small", "sim-knowledge", "sim-math"]  # a 3-subset of the 4 sim workers, renumbered 0..2


def _completion(ids: list[int], access: list) -> str:
    subtasks = [
        f"Step {i}: solve the problem, check what you are shown, box the final answer."
        for i in range(len(ids))
    ]
    return render_completion("Plan.", Workflow(model_id=ids, subtasks=subtasks, access_list=access))


GROUP = [  # G = 8 completions of one question, as a policy early in training might write them
    _completion([0], [[]]),
    _completion([2], [[]]),
    _completion([1], [[]]),
    _completion([0, 2], [[], "all"]),
    _completion([0, 1, 2], [[], [], "all"]),
    "Model 2 is the math model, so I would ask it.",  # no lists: unparseable
    _completion([3], [[]]),  # outside the view of three: unparseable
    _completion([2, 2], [[], "all"]),
]


class CountingExecutor(ExecutorService):
    """An executor replica that counts the rollouts it served."""

    served = 0

    async def handle_rollout(self, batch: RolloutBatch):
        self.served += len(batch.rollouts)
        return await super().handle_rollout(batch)


@pytest.fixture
async def replicas(nats_url, subject_prefix):
    env = {
        "NATS_URL": nats_url,
        "CONDUCTOR_SUBJECT_PREFIX": subject_prefix,
        "CONDUCTOR_LOG_LEVEL": "WARNING",
        "CONDUCTOR_DURABLE": "false",
    }
    common = CommonSettings.from_env(env)
    executors = [CountingExecutor(ExecutorSettings.from_env(env)) for _ in range(2)]
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(
            running(create_services(["worker-adapter", "verifier"], env), common, name="w")
        )
        for i, ex in enumerate(executors):
            await stack.enter_async_context(running([ex], common, name=f"executor-{i}"))
        yield common, executors


def _rollouts(question: str, answer: str) -> list[Rollout]:
    common = {
        "question": question,
        "pool": VIEW,
        "reference": answer,
        "domain": "math",
        "policy_version": "step-0",
    }
    return [Rollout(id=f"{answer}/{g}", completion=text, **common) for g, text in enumerate(GROUP)]


async def test_groups_fan_out_over_two_replicas_and_score_as_the_paper_says(replicas):
    """One GRPO step's worth: 4 questions x G=8, each group sent as batches of two at once."""
    common, executors = replicas
    rollouts = [r for q, a in QUESTIONS.items() for r in _rollouts(q, a)]
    async with ConductorClient(common) as client:
        results = await client.rollout_all(rollouts, batch_size=2, timeout=120)
    assert [r.id for r in results] == [r.id for r in rollouts]
    assert all(ex.served > 0 for ex in executors) and sum(ex.served for ex in executors) == len(rollouts)
    for r in results:
        assert r.error is None and r.policy_version == "step-0", r
        if not r.parsed:
            assert r.reward == 0.0 and r.parse_error.code == "format_error" and r.steps == []
        else:
            assert r.reward == (1.0 if r.verdict.outcome == "correct" else 0.5), r
            assert r.usage.calls == len(r.steps) and r.usage.cost_usd > 0
            assert {s.worker for s in r.steps} <= set(VIEW)
    assert {r.reward for r in results} == {0.0, 0.5, 1.0}
    assert [r.parse_error.message.split(":")[0] for r in results[:8] if not r.parsed] == [
        "missing_lists",
        "bad_model_id",
    ]
    assert [s.worker for s in results[2].steps] == ["sim-knowledge"]  # ordinal 1 of the view, not of the pool


async def test_unparseable_completions_score_zero_without_a_worker_call(nats_url, replicas):
    common, _ = replicas
    seen: list[bytes] = []

    async def spy_on(msg) -> None:
        seen.append(msg.data)

    spy = await nats.connect(nats_url)
    await spy.subscribe(
        common.subject(WORK.subject), cb=spy_on
    )  # sees every worker call, beside the queue group
    await spy.flush()
    group = _rollouts(*next(iter(QUESTIONS.items())))
    try:
        async with ConductorClient(common) as client:
            unparseable = await client.rollout(RolloutBatch(rollouts=[group[5], group[6]]), timeout=60)
            await spy.flush()
            calls_then = len(seen)
            control = await client.rollout(
                RolloutBatch(rollouts=[group[4]]), timeout=60
            )  # the spy does see calls
            await spy.flush()
    finally:
        await spy.close()
    assert (
        unparseable.error is None
        and [(r.reward, r.parsed) for r in unparseable.results] == [(0.0, False)] * 2
    )
    assert calls_then == 0
    assert control.results[0].parsed and len(seen) == len(control.results[0].steps) == 3


async def test_a_bad_batch_is_one_typed_error_naming_the_rollout_and_field(replicas):
    common, _ = replicas
    good, *_ = _rollouts(*next(iter(QUESTIONS.items())))
    stranger = Rollout(id="x", question="q", pool=["sim-math", "gpt-99"], completion="", reference="1")
    async with ConductorClient(common) as client:
        reply = await client.rollout(RolloutBatch(rollouts=[good, stranger]), timeout=60)
        assert reply.results == [] and (reply.error.code, reply.error.field) == (
            "bad_request",
            "rollouts[1].pool[1]",
        )
        nc = await nats.connect(common.nats_url)
        try:
            raw = await nc.request(common.subject(ROLLOUT_SUBJECT), b'{"rollouts": []}', timeout=10)
        finally:
            await nc.close()
    assert b'"field":"rollouts"' in raw.data

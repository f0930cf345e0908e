"""Rollouts (issue 12, item 1): the learner's completions scored through the solve path — parsed as written, never
resampled, never rescued — against scripted workers and verifier; then the handler through ``serve``."""

from __future__ import annotations

import msgspec
import pytest
from faststream.nats import TestNatsBroker

from conductor.broker import make_broker
from conductor.pool import load_pool
from conductor.service import full_router
from conductor.settings import CommonSettings
from conductor.workflow import render_completion
from schemas.errors import ErrorCode, ErrorInfo
from schemas.plan import PriorRound, Workflow
from schemas.rollout import MAX_ROLLOUTS_PER_BATCH, ROLLOUT_SUBJECT, Rollout, RolloutBatch, RolloutBatchResult
from schemas.solve import Budget
from schemas.verify import Outcome, VerifyBatchResult
from services.executor.app import ExecutorService
from services.executor.config import CallSettings, ExecutorSettings
from services.executor.core import Executor
from services.executor.rollouts import Rollouts
from tests.executor.fakes import ScriptedTransport

POOL = load_pool(None)  # sim-frontier, sim-math, sim-knowledge, sim-small
SETTINGS = ExecutorSettings(
    common=CommonSettings(), calls=CallSettings(retry_base_s=0.01, verify_retry_s=0.05)
)
VIEW = ["sim-small", "sim-math"]  # the policy saw the deployment's 4th worker as Model 0, its 2nd as Model 1


def completion(ids: list[int], access: list, reasoning: str = "Plan: ask, then check.") -> str:
    subtasks = [f"sub{i}" for i in range(len(ids))]
    return render_completion(reasoning, Workflow(model_id=ids, subtasks=subtasks, access_list=access))


ONE_STEP = completion([0], [[]])
HANDBACK = "The earlier answer holds.\nmodel_id = []\nsubtasks = []\naccess_list = []"


def rollout(**kw) -> Rollout:
    fields = {"id": "r0", "question": "Q?", "pool": VIEW, "completion": ONE_STEP, "reference": "sim-small@0"}
    return Rollout(**{**fields, **kw})


async def score(
    *rollouts: Rollout, transport=None, concurrency: int = 8
) -> tuple[RolloutBatchResult, ScriptedTransport]:
    t = transport or ScriptedTransport([])  # the planner must never be asked
    result = await Rollouts(Executor(POOL, SETTINGS, t), concurrency).run(
        RolloutBatch(rollouts=list(rollouts))
    )
    assert t.plan_requests == []
    return result, t


async def test_an_unparseable_completion_scores_zero_with_its_reason_and_calls_no_worker():
    res, t = await score(rollout(completion="I would ask Model 0 to solve it."))
    (r,) = res.results
    assert r.reward == 0.0 and not r.parsed and r.error is None
    assert r.parse_error.code == ErrorCode.FORMAT_ERROR and r.parse_error.message.startswith("missing_lists:")
    assert r.answer is None and r.steps == [] and r.verdict is None
    assert t.work_requests == [] and t.verify_batches == []


async def test_a_completion_outside_the_view_or_the_step_cap_is_a_format_failure_not_a_retry():
    res, t = await score(
        rollout(id="a", completion=completion([2], [[]])),  # Model 2 does not exist in a view of two
        rollout(id="b", completion=completion([0, 1, 0], [[], [], "all"]), max_steps=2),
    )
    reasons = [r.parse_error.message.split(":")[0] for r in res.results]
    assert reasons == ["bad_model_id", "too_many_steps"] and [r.reward for r in res.results] == [0.0, 0.0]
    assert t.work_requests == []


async def test_correct_scores_one_wrong_scores_half_with_verdict_steps_usage_and_version():
    res, t = await score(
        rollout(id="right", policy_version="v7"),
        rollout(id="wrong", reference="sim-math@0", completion=completion([0, 1], [[], "all"])),
    )
    right, wrong = res.results
    assert (right.id, right.reward, right.parsed, right.verdict.outcome) == (
        "right",
        1.0,
        True,
        Outcome.CORRECT,
    )
    assert right.answer == "sim-small@0: saw 1 msgs" and right.policy_version == "v7" and right.error is None
    assert (wrong.reward, wrong.verdict.outcome) == (0.5, Outcome.INCORRECT) and len(wrong.steps) == 2
    assert (
        wrong.usage.calls == 2 and abs(wrong.usage.cost_usd - 0.002) < 1e-12
    )  # the workers' total, no planner
    assert t.events == []  # progress events are off for rollouts
    assert all(w.task_id.startswith("rollout-") and not w.idempotent for w in t.work_requests)


async def test_a_rollouts_worker_calls_are_keyed_by_its_id_so_a_rerun_draws_the_same():
    """A sim pool with ``vary_by_task`` seeds each draw with the task id: the rollout's own id, not a random one."""
    _, first = await score(rollout(id="run@3/0/5"), rollout(id="run@3/0/6"))
    _, again = await score(rollout(id="run@3/0/5"))
    assert {w.task_id for w in first.work_requests} == {"rollout-run@3/0/5", "rollout-run@3/0/6"}
    assert [w.task_id for w in again.work_requests] == ["rollout-run@3/0/5"]


async def test_the_pool_view_renumbers_the_workers():
    """Ordinal 0 runs pool[0] even when that is the deployment's last worker."""
    res, t = await score(
        rollout(pool=["sim-small", "sim-frontier", "sim-math"], completion=completion([0, 2], [[], "all"]))
    )
    (r,) = res.results
    assert [s.worker for s in r.steps] == ["sim-small", "sim-math"] and [s.model_id for s in r.steps] == [
        0,
        2,
    ]
    assert [w.worker for w in t.work_requests] == ["sim-small", "sim-math"]


async def test_a_recursive_rollout_hands_back_the_previous_answer_then_it_is_verified():
    previous = [PriorRound(completion=ONE_STEP, final_response="sim-small@0: saw 1 msgs")]
    res, t = await score(rollout(round=1, previous=previous, completion=HANDBACK))
    (r,) = res.results
    assert r.handback and r.parsed and r.reward == 1.0 and r.answer == previous[0].final_response
    assert t.work_requests == [] and len(t.verify_batches) == 1


async def test_a_recursive_rollouts_all_access_sees_the_previous_final_response():
    previous = [PriorRound(completion=ONE_STEP, final_response="earlier answer")]
    res, t = await score(
        rollout(
            round=1, previous=previous, completion=completion([1, 0], [[], "all"]), reference="sim-small@1"
        )
    )
    (r,) = res.results
    assert r.parsed and not r.handback and r.reward == 1.0
    first, last = t.work_requests
    assert len(first.messages) == 1 and first.round == 1
    assert last.messages[1].content == "earlier answer"  # granted first, as in a recursive solve


async def test_empty_lists_in_a_first_call_are_unparseable():
    res, _ = await score(rollout(completion=HANDBACK))
    assert res.results[0].reward == 0.0 and res.results[0].parse_error.message.startswith("empty:")


class VerifierDown(ScriptedTransport):
    async def verify(self, batch, timeout):
        self.verify_batches.append(batch)
        return VerifyBatchResult(error=ErrorInfo(code=ErrorCode.UNAVAILABLE, message="down", retryable=True))


async def test_a_verifier_outage_masks_the_reward_and_says_why():
    res, t = await score(rollout(), transport=VerifierDown([]))
    (r,) = res.results
    assert r.reward is None and r.parsed and r.verdict is None and r.answer
    assert r.error.code == ErrorCode.UNAVAILABLE and len(t.verify_batches) >= 2  # retried before giving up


async def test_a_failing_worker_or_the_budget_masks_the_reward():
    res, _ = await score(
        rollout(completion=completion([1, 0], [[], "all"])),
        transport=ScriptedTransport([], fail_worker="sim-math"),
    )
    assert res.results[0].reward is None and res.results[0].error.code == ErrorCode.WORKER_ERROR
    res, _ = await score(rollout(completion=completion([0, 1], [[], "all"]), budget=Budget(max_calls=1)))
    assert res.results[0].reward is None and res.results[0].error.code == ErrorCode.BUDGET_EXCEEDED


@pytest.mark.parametrize(
    ("second", "field"),
    [
        ({"pool": ["sim-small", "sim-math", "gpt-99"]}, "rollouts[1].pool[2]"),
        ({"pool": ["sim-math", "sim-math"]}, "rollouts[1].pool[1]"),
        ({"round": 1}, "rollouts[1].previous"),
        ({"previous": [PriorRound(completion="c", final_response="r")]}, "rollouts[1].round"),
        ({"round": 99, "previous": [PriorRound(completion="c", final_response="r")]}, "rollouts[1].round"),
        ({"max_steps": 99}, "rollouts[1].max_steps"),
        ({"id": "r0"}, "rollouts[1].id"),
    ],
)
async def test_a_bad_rollout_rejects_the_batch_naming_its_field_before_anything_runs(second, field):
    res, t = await score(rollout(), rollout(**{"id": "r1", **second}))
    assert res.results == [] and res.error.code == ErrorCode.BAD_REQUEST and res.error.field == field
    assert t.work_requests == []


def carrying(r: Rollout) -> Rollout:
    """``r`` in the schema-14 form: the solve it amounts to in ``request``, nothing of it at the top level."""
    return Rollout(id=r.id, completion=r.completion, request=r.solve, round=r.round, previous=r.previous)


async def test_a_rollout_carrying_its_request_scores_as_its_schema_13_form():
    """The same rollouts in either form: the same rewards, steps, answers, verdicts, usage and worker calls."""
    previous = [PriorRound(completion=ONE_STEP, final_response="sim-small@0: saw 1 msgs")]
    old = [
        rollout(id="right", domain="math", cache=True),
        rollout(id="wrong", reference="sim-math@0", completion=completion([0, 1], [[], "all"]), max_steps=2),
        rollout(id="again", round=1, previous=previous, completion=HANDBACK),
        rollout(id="spent", completion=completion([0, 1], [[], "all"]), budget=Budget(max_calls=1)),
    ]
    new = [carrying(r) for r in old]
    assert all(isinstance(r.question, msgspec.UnsetType) and r.request is not None for r in new)
    (was, t_old), (now, t_new) = await score(*old), await score(*new)
    strip = lambda res: [msgspec.structs.replace(r, latency_s=0.0) for r in res.results]  # noqa: E731
    assert strip(was) == strip(now) and [r.reward for r in now.results] == [1.0, 0.5, 1.0, None]
    assert t_old.work_requests == t_new.work_requests and t_new.events == []


@pytest.mark.parametrize(
    ("request_fields", "field"),
    [
        ({"pool": ["sim-small", "sim-math", "gpt-99"]}, "rollouts[1].request.pool[2]"),
        ({"max_steps": 99}, "rollouts[1].request.max_steps"),
    ],
)
async def test_a_bad_request_in_a_rollout_is_named_inside_it(request_fields, field):
    bad = carrying(rollout(id="r1"))
    bad = msgspec.structs.replace(bad, request=msgspec.structs.replace(bad.request, **request_fields))
    res, t = await score(carrying(rollout()), bad)
    assert res.results == [] and res.error.code == ErrorCode.BAD_REQUEST and res.error.field == field
    assert t.work_requests == []


async def test_a_batch_runs_concurrently_within_the_bound_and_answers_in_order():
    t = ScriptedTransport([], delay=0.05)
    res, _ = await score(*(rollout(id=f"r{i}") for i in range(6)), transport=t, concurrency=2)
    assert [r.id for r in res.results] == [f"r{i}" for i in range(6)] and t.max_active == 2
    t = ScriptedTransport([], delay=0.05)
    await score(*(rollout(id=f"r{i}") for i in range(6)), transport=t, concurrency=8)
    assert t.max_active == 6


class Crashing(ScriptedTransport):
    async def work(self, req, timeout):
        if "boom" in req.messages[-1].content:
            raise RuntimeError("a bug")
        return await super().work(req, timeout)


async def test_a_rollout_that_raises_is_one_masked_sample_not_a_failed_batch():
    boom = render_completion("", Workflow(model_id=[0], subtasks=["boom"], access_list=[[]]))
    res, _ = await score(rollout(id="a"), rollout(id="b", completion=boom), transport=Crashing([]))
    ok, crashed = res.results
    assert ok.reward == 1.0 and crashed.reward is None and crashed.error.code == ErrorCode.INTERNAL


def _service(prefix: str) -> tuple[ExecutorService, object]:
    common = CommonSettings(subject_prefix=prefix, nats_url="nats://127.0.0.1:1")
    svc = ExecutorService(ExecutorSettings(common=common, durable=False), transport=ScriptedTransport([]))
    broker = make_broker(common, name="test")
    broker.include_router(full_router(svc))
    return svc, broker


async def test_the_rollout_handler_in_memory_with_typed_errors_for_bad_batches(subject_prefix):
    svc, broker = _service(subject_prefix)
    subject = subject_prefix + ROLLOUT_SUBJECT
    async with TestNatsBroker(broker) as br:
        await svc.start(broker)

        async def request(batch: object) -> RolloutBatchResult:
            body = msgspec.json.encode(batch)
            return msgspec.json.decode((await br.request(body, subject)).body, type=RolloutBatchResult)

        good = await request(RolloutBatch(rollouts=[rollout(id="x"), rollout(id="y", completion="nope")]))
        assert good.error is None and [(r.id, r.reward) for r in good.results] == [("x", 1.0), ("y", 0.0)]
        over = await request(
            {
                "rollouts": [
                    msgspec.to_builtins(rollout(id=f"r{i}")) for i in range(MAX_ROLLOUTS_PER_BATCH + 1)
                ]
            }
        )
        assert over.results == [] and (over.error.code, over.error.field) == (
            ErrorCode.BAD_REQUEST,
            "rollouts",
        )
        empty = await request({"rollouts": []})
        assert (empty.error.code, empty.error.field) == (ErrorCode.BAD_REQUEST, "rollouts")
        bad = await request({"rollouts": [{**msgspec.to_builtins(rollout()), "pool": ["sim-math", "who"]}]})
        assert (bad.error.code, bad.error.field) == (ErrorCode.BAD_REQUEST, "rollouts[0].pool[1]")
        zero = await request({"rollouts": [{**msgspec.to_builtins(rollout()), "max_steps": 0}]})
        assert (zero.error.code, zero.error.field) == (ErrorCode.BAD_REQUEST, "rollouts[0].max_steps")

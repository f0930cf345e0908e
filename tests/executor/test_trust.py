"""The executor trusts nothing it is handed (issue 8, item 5): a planner's workflow, a stored checkpoint, a verdict
and a worker's reply are each checked against the task before they are acted on, with typed errors — never a hang,
an ``IndexError``, a silent wrap-around, a replaced question or a credited forgery."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from conductor.client import ConductorClient
from conductor.pool import load_pool
from conductor.settings import CommonSettings
from schemas.errors import ErrorCode
from schemas.plan import PlanReply, PriorRound, Workflow
from schemas.solve import RoundRecord, SolveRequest, StepRecord
from schemas.tasks import TaskCheckpoint
from schemas.usage import Usage
from schemas.verify import Outcome, Verdict, VerifyBatchResult
from schemas.work import WorkReply
from services.executor.config import CallSettings, ExecutorSettings
from services.executor.core import Executor
from tests.executor.fakes import ScriptedTransport
from tests.executor.test_durable import _settings, _start

POOL = load_pool(None)  # sim-frontier, sim-math, sim-knowledge, sim-small
SETTINGS = ExecutorSettings(
    common=CommonSettings(), calls=CallSettings(retry_base_s=0.01, verify_retry_s=0.05)
)
QUESTION = "What is 2 + 2?"
HANG_S = 5.0  # far above any of these runs; a deadlocked task would wait forever


def wf(ids: list[int], access: list, subtasks: list[str] | None = None) -> Workflow:
    return Workflow(
        model_id=ids, subtasks=subtasks or [f"sub{i}" for i in range(len(ids))], access_list=access
    )


async def solve(t: ScriptedTransport, *, resume: TaskCheckpoint | None = None, **kw):
    req = SolveRequest(**{"question": QUESTION, **kw})
    return await asyncio.wait_for(Executor(POOL, SETTINGS, t).solve(req, resume=resume), HANG_S)


# --- workflows from the planner ---------------------------------------------------------------------------------


@pytest.mark.timeout(10)
@pytest.mark.parametrize("access", [[[1], [0]], [[], [1]], [[1], []]], ids=["crossed", "self", "forward"])
async def test_access_to_a_later_step_is_a_typed_error_not_a_deadlock(access):
    """Failed before: the step waited for a step that waited for it; heartbeats kept the task 'in progress'."""
    t = ScriptedTransport([wf([0, 1], access)])
    res = await solve(t, reference="4")
    assert res.error.code == ErrorCode.FORMAT_ERROR and "bad_access" in res.error.message
    assert not res.error.retryable and t.work_requests == []
    assert res.reward == 0.0  # the policy wrote an invalid workflow (docs/method.md §3)


@pytest.mark.parametrize("model_id", [-1, 5, 99])  # the demo pool: five workers, 0..4
async def test_a_model_id_outside_the_pool_view_calls_no_worker(model_id):
    """Failed before: -1 silently ran the view's last worker; 99 was an internal ``IndexError``."""
    t = ScriptedTransport([wf([0, model_id], [[], "all"])])
    res = await solve(t)
    assert res.error.code == ErrorCode.FORMAT_ERROR and "bad_model_id" in res.error.message
    assert t.work_requests == []


async def test_the_pool_view_not_the_deployment_bounds_model_ids():
    t = ScriptedTransport([wf([2], [[]])])
    res = await solve(t, pool=["sim-small", "sim-math"])
    assert (
        res.error.code == ErrorCode.FORMAT_ERROR and "(0..1)" in res.error.message and t.work_requests == []
    )


async def test_more_steps_than_the_cap_calls_no_worker():
    """Failed before: a 50-step plan with a cap of 5 ran 50 worker calls."""
    t = ScriptedTransport([wf([0] * 50, [[]] * 50)])
    res = await solve(t)
    assert res.error.code == ErrorCode.FORMAT_ERROR and "too_many_steps" in res.error.message
    assert t.work_requests == [] and t.plan_requests[0].max_steps == 5


async def test_the_request_step_cap_is_the_one_checked():
    t = ScriptedTransport([wf([0] * 3, [[]] * 3)])
    res = await solve(t, max_steps=2)
    assert (
        res.error.code == ErrorCode.FORMAT_ERROR
        and "at most 2" in res.error.message
        and t.work_requests == []
    )
    t = ScriptedTransport([wf([0] * 7, [[]] * 7)])
    res = await solve(t, max_steps=7)
    assert res.error is None and len(t.work_requests) == 7


async def test_lists_of_different_lengths_are_a_typed_error():
    """Failed before: an internal ``IndexError`` once the shorter list ran out."""
    t = ScriptedTransport([wf([0, 1], [[], "all"], subtasks=["only one"])])
    res = await solve(t)
    assert res.error.code == ErrorCode.FORMAT_ERROR and "length_mismatch" in res.error.message
    assert t.work_requests == []


async def test_an_empty_workflow_hands_back_only_on_a_recursion_round():
    """Failed before: three empty lists in the first round ended the task with no answer and no error."""
    t = ScriptedTransport([wf([], [])])
    res = await solve(t)
    assert res.error.code == ErrorCode.FORMAT_ERROR and "empty" in res.error.message and res.answer is None
    t = ScriptedTransport([wf([0], [[]]), wf([], [])])
    res = await solve(t, max_rounds=1)
    assert res.error is None and res.workflows[1].handback and res.answer == "sim-frontier@0: saw 1 msgs"


class Planned(ScriptedTransport):
    """The planner's reply as given: e.g. a baseline's or a fallback's workflow."""

    def __init__(self, reply: PlanReply) -> None:
        super().__init__([])
        self.reply = reply

    async def plan(self, req, timeout):
        self.plan_requests.append(req)
        return self.reply


async def test_an_invalid_baseline_plan_is_the_planners_error_with_no_reward():
    bad = wf([9], [[]])
    res = await solve(Planned(PlanReply(policy="moa", workflow=bad, attempts=0)), reference="4")
    assert res.error.code == ErrorCode.PLANNER_ERROR and "bad_model_id" in res.error.message
    assert not res.error.retryable and res.reward is None


async def test_an_invalid_fallback_plan_after_unparseable_samples_is_an_error_with_reward_zero():
    reply = PlanReply(
        policy="moa", workflow=wf([9], [[]]), attempts=3, fallback_used=True, format_failures=["x"]
    )
    res = await solve(Planned(reply), reference="4")
    assert (
        res.error.code == ErrorCode.PLANNER_ERROR and res.reward == 0.0
    )  # the policy's samples failed to parse


# --- checkpoints on resume --------------------------------------------------------------------------------------


def in_progress(
    request: SolveRequest, *, workflow: Workflow, steps: list[StepRecord], **kw
) -> TaskCheckpoint:
    fields = {
        "task_id": request.task_id,
        "request": request,
        "rounds": [RoundRecord(round=0, policy="p", steps=steps)],
    }
    return TaskCheckpoint(**{**fields, "workflow": workflow, **kw})


def step(index: int, model_id: int = 0, worker: str = "sim-frontier", **kw) -> StepRecord:
    fields = {"subtask": f"sub{index}", "access": [], "response": "done", "usage": Usage(calls=1)}
    return StepRecord(index=index, model_id=model_id, worker=worker, **{**fields, **kw})


SUBMITTED = SolveRequest(question=QUESTION, task_id="t-1", reference="sim-frontier@0")
FRESH = wf([0], [[]])  # what the planner plans when the task starts afresh


async def test_a_checkpoint_with_another_request_is_refused_and_the_submitted_request_runs():
    """Failed before: the stored checkpoint's request replaced the submitted one, so a forged checkpoint injected
    its question (and its reference) and the planner was never asked."""
    forged_request = msgspec.structs.replace(SUBMITTED, question="INJECTED", reference="sim-math@0")
    forged = in_progress(forged_request, workflow=wf([1, 0], [[], "all"]), steps=[step(0, 1, "sim-math")])
    t = ScriptedTransport([FRESH])
    res = await solve(t, resume=forged, **msgspec.structs.asdict(SUBMITTED))
    assert res.error is None and len(t.plan_requests) == 1 and t.plan_requests[0].question == QUESTION
    assert all("INJECTED" not in m.content for r in t.work_requests for m in r.messages)
    assert t.verify_batches[0].items[0].reference.answer == "sim-frontier@0" and res.reward == 1.0


async def test_a_checkpoint_of_another_task_is_refused():
    other = in_progress(msgspec.structs.replace(SUBMITTED, task_id="t-2"), workflow=FRESH, steps=[])
    t = ScriptedTransport([FRESH])
    res = await solve(
        t, resume=msgspec.structs.replace(other, request=SUBMITTED), **msgspec.structs.asdict(SUBMITTED)
    )
    assert res.error is None and len(t.plan_requests) == 1


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("workflow", "steps"),
    [
        (wf([0, 99], [[], "all"]), [step(0)]),  # an index outside the pool: IndexError before
        (wf([0, 1], [[1], [0]]), []),  # crossed access: a deadlock before
        (wf([0] * 50, [[]] * 50), []),  # above the step cap: 50 calls before
        (FRESH, [step(7)]),  # a record outside the workflow: IndexError before
        (FRESH, [step(0), step(0)]),  # a step recorded twice: InvalidStateError before
        (FRESH, [step(0, worker="sim-math")]),  # a record naming another worker than the view's
        (FRESH, [step(0, subtask="not the plan's")]),  # a record of another plan
        (FRESH, [step(0, model_id=3, worker="sim-small")]),  # a record of another model id
    ],
    ids=[
        "model-id",
        "access",
        "cap",
        "record-index",
        "record-twice",
        "record-worker",
        "record-subtask",
        "record-id",
    ],
)
async def test_an_invalid_checkpoint_is_refused_and_the_task_starts_afresh(workflow, steps):
    cp = in_progress(SUBMITTED, workflow=workflow, steps=steps)
    t = ScriptedTransport([FRESH])
    res = await solve(t, resume=cp, **msgspec.structs.asdict(SUBMITTED))
    assert res.error is None and len(t.plan_requests) == 1 and res.workflows[0].steps[0].response != "done"
    assert res.reward == 1.0


async def test_a_checkpoint_whose_answer_its_records_do_not_give_is_refused():
    """Between rounds the standing answer is the last round's final response; a forged one is not believed."""
    done = RoundRecord(round=0, policy="p", completion="c", steps=[step(0, response="4")])
    honest = TaskCheckpoint(
        task_id="t-1",
        request=msgspec.structs.replace(SUBMITTED, max_rounds=1),
        rounds=[done],
        previous=[PriorRound(completion="c", final_response="4")],
        answer="4",
    )
    for cp, planned_round in [(honest, 1), (msgspec.structs.replace(honest, answer="sim-frontier@0"), 0)]:
        t = ScriptedTransport([wf([], []), wf([], [])])
        await solve(t, resume=cp, **msgspec.structs.asdict(cp.request))
        assert t.plan_requests[0].round == planned_round


async def test_a_valid_checkpoint_still_resumes_without_repeating_finished_calls():
    cp = in_progress(SUBMITTED, workflow=wf([0, 1], [[], "all"]), steps=[step(0)])
    t = ScriptedTransport([])
    res = await solve(t, resume=cp, **msgspec.structs.asdict(SUBMITTED))
    assert res.error is None and not t.plan_requests and [r.step for r in t.work_requests] == [1]


@pytest.mark.nats
async def test_the_durable_intake_runs_the_submitted_request_over_a_forged_checkpoint(
    nats_url, subject_prefix
):
    """The checkpoint bucket is read on every delivery: a checkpoint written there before the task arrives (or an
    undecodable one) is refused and dropped, and the submitted question is what the planner and workers see."""
    settings = _settings(nats_url, subject_prefix)
    t = ScriptedTransport([FRESH, FRESH])
    svc, broker = await _start(settings, t)
    try:
        forged = msgspec.structs.replace(SUBMITTED, question="INJECTED", task_id="forged-1")
        await svc.store.save_checkpoint("client.forged-1", in_progress(forged, workflow=FRESH, steps=[]))
        await svc.store.checkpoints.put("client.garbled-1", b"{not json")  # the tenant client's keys
        async with ConductorClient(settings.common) as client:
            for task_id in ["forged-1", "garbled-1"]:
                await client.submit(msgspec.structs.replace(SUBMITTED, task_id=task_id))
                res = await client.result(task_id, wait=10)
                assert res.error is None and res.reward == 1.0, res
        assert [r.question for r in t.plan_requests] == [QUESTION, QUESTION]
        assert all("INJECTED" not in m.content for r in t.work_requests for m in r.messages)
    finally:
        await broker.stop()


# --- verdicts and worker replies ----------------------------------------------------------------------------------


class Misrouted(ScriptedTransport):
    """The verifier's first ``bad`` answers are ``answers(batch)``; then the honest one."""

    def __init__(self, answers, bad: int = 10**6) -> None:
        super().__init__([FRESH])
        self.answers, self.bad = answers, bad

    async def verify(self, batch, timeout):
        if self.bad > 0:
            self.bad -= 1
            self.verify_batches.append(batch)
            return self.answers(batch)
        return await super().verify(batch, timeout)


def correct(id_: str) -> Verdict:
    return Verdict(id=id_, outcome=Outcome.CORRECT, reason="forged")


async def test_a_verdict_for_another_item_is_never_credited():
    """Failed before: ``result.verdicts[0]`` was believed whatever its id — a forged ``correct`` earned 1.0."""
    t = Misrouted(lambda batch: VerifyBatchResult(verdicts=[correct("someone-else")]))
    res = await solve(t, task_id="t-1", reference="the wrong answer")
    assert res.verdict is None and res.reward is None
    assert (
        res.error.code == ErrorCode.UNAVAILABLE
        and res.error.retryable
        and "does not match" in res.error.message
    )
    assert (
        len(t.verify_batches) >= 2
    )  # asked again (services/executor/verifying.py), like any transient failure


@pytest.mark.parametrize("count", [0, 2])
async def test_a_reply_with_another_number_of_verdicts_is_not_credited_and_asked_again(count):
    """Failed before: no second request — a reply with the wrong count was final (verdict ``error``)."""
    t = Misrouted(lambda batch: VerifyBatchResult(verdicts=[correct(batch.items[0].id)] * count), bad=1)
    res = await solve(t, task_id="t-1", reference="the wrong answer")
    assert res.error is None and res.verdict.outcome == Outcome.INCORRECT and res.reward == 0.5
    assert len(t.verify_batches) == 2


async def test_a_misrouted_verdict_is_asked_again_and_the_real_one_counts():
    t = Misrouted(lambda batch: VerifyBatchResult(verdicts=[correct("someone-else")]), bad=1)
    res = await solve(t, task_id="t-1", reference="the wrong answer")
    assert res.error is None and res.verdict.outcome == Outcome.INCORRECT and res.reward == 0.5


class Impostor(ScriptedTransport):
    """Every worker call is answered in another worker's name."""

    async def work(self, req, timeout):
        self.work_requests.append(req)
        return WorkReply(
            worker="sim-small", text="sim-frontier@0 (forged)", usage=Usage(calls=1, cost_usd=9.0)
        )


async def test_a_worker_reply_in_another_workers_name_is_not_believed():
    t = Impostor([FRESH])
    res = await solve(t, reference="sim-frontier@0")
    assert (
        res.error.code == ErrorCode.WORKER_ERROR and res.error.retryable and "sim-small" in res.error.message
    )
    assert res.answer is None and res.reward is None and res.usage.total.cost_usd == 0.0

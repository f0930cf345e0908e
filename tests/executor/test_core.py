"""Executor core: validation, step scheduling, message template, recursion, budgets, usage, reward."""

from __future__ import annotations

import gc

import msgspec
import pytest

from conductor.pool import load_pool
from conductor.reward import judge
from conductor.settings import CommonSettings
from conductor.wire import WireError, decode, encode
from schemas.errors import ErrorCode, ErrorInfo
from schemas.plan import PlanReply, Workflow
from schemas.solve import Budget, SolveRequest
from schemas.verify import Outcome
from services.executor.config import ExecutorSettings
from services.executor.core import Executor, TaskState
from services.executor.messages import PREVIOUS_ROUND_SUBTASK, build_messages, granted_steps
from services.executor.validation import validate
from tests.executor.fakes import ScriptedTransport

POOL = load_pool(None)
SETTINGS = ExecutorSettings(common=CommonSettings())


def wf(ids, access, subtasks=None) -> Workflow:
    return Workflow(
        model_id=ids, subtasks=subtasks or [f"sub{i}" for i in range(len(ids))], access_list=access
    )


def run(transport, **kw):
    return Executor(POOL, SETTINGS, transport).solve(SolveRequest(**{"question": "Q?", **kw}))


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"question": "   "}, "question"),
        ({"pool": []}, "pool"),
        ({"pool": ["sim-math", "nope"]}, "pool[1]"),
        ({"pool": ["sim-math", "sim-math"]}, "pool[1]"),
        ({"max_steps": 0}, "max_steps"),
        ({"max_steps": 99}, "max_steps"),
        ({"max_rounds": -1}, "max_rounds"),
        ({"max_rounds": 50}, "max_rounds"),
        ({"task_id": "a b"}, "task_id"),
        ({"task_id": "x" * 200}, "task_id"),
        ({"budget": Budget(max_calls=0)}, "budget.max_calls"),
    ],
)
def test_validation_names_the_field(kw, field):
    """Through the wire, as every request arrives: the schema's bounds first, then ``validate``."""
    try:
        req = decode(encode(SolveRequest(**{"question": "Q?", **kw})), SolveRequest)
    except WireError as exc:
        err = exc.info
    else:
        err = validate(req, POOL, SETTINGS)
    assert err is not None and err.code == ErrorCode.BAD_REQUEST and err.field == field


def test_granted_steps():
    assert granted_steps(3, "all") == [0, 1, 2]
    assert granted_steps(3, []) == []
    assert granted_steps(3, [2, 0, 2]) == [0, 2]


def test_message_template_without_and_with_history():
    alone = build_messages("Q", "do it", [])
    assert [(m.role, m.content) for m in alone] == [("user", "Q\n\ndo it")]
    msgs = build_messages("Q", "final", [("s0", "r0"), ("s1", "r1")])
    assert [(m.role, m.content) for m in msgs] == [
        ("user", "Q\n\ns0"),
        ("assistant", "r0"),
        ("user", "s1"),
        ("assistant", "r1"),
        ("user", "final"),
    ]


async def test_three_step_workflow_answer_usage_and_progress():
    t = ScriptedTransport([wf([0, 1, 3], [[], [], "all"])])
    res = await run(t, pool=["sim-frontier", "sim-math", "sim-knowledge", "sim-small"])
    assert res.error is None
    assert res.answer == "sim-small@2: saw 5 msgs"  # question+s0, r0, s1, r1, own subtask
    assert [s.worker for s in res.workflows[0].steps] == ["sim-frontier", "sim-math", "sim-small"]
    assert res.usage.total.calls == 3 + 1  # three workers + one plan
    assert res.usage.by_worker["sim-math"].input_tokens == 10
    assert abs(res.usage.total.cost_usd - 0.003) < 1e-12
    kinds = [e.kind for e in t.events]
    assert kinds[0] == "planned" and kinds.count("step_done") == 3 and kinds[-1] == "done"
    assert t.plan_requests[0].workers[0].name is None  # names hidden by default


@pytest.mark.parametrize("access", [[[], [0], [1]], [[], [], "all"]], ids=["chain", "fan-in"])
async def test_a_finished_task_is_freed_without_the_garbage_collector(access):
    """No reference cycle holds a task's state once it has ended: the executor's tuned collector runs rarely, and
    every finished task waiting for it is memory (conductor/app/process.py)."""
    gc.collect()
    gc.disable()
    try:
        res = await run(ScriptedTransport([wf([0, 1, 2], access)]))
        assert res.error is None
        assert not [o for o in gc.get_objects() if isinstance(o, TaskState)]
    finally:
        gc.enable()


async def test_independent_steps_overlap_dependent_steps_wait():
    t = ScriptedTransport([wf([0, 1, 2, 3], [[], [], [], "all"])], delay=0.05)
    res = await run(t)
    assert res.error is None
    assert t.max_active == 3  # the three independent proposers ran together; the aggregator waited
    assert len(t.work_requests[-1].messages) == 7


async def test_index_access_sees_only_granted_steps():
    t = ScriptedTransport([wf([0, 1, 2], [[], [], [0]])])
    res = await run(t)
    last = t.work_requests[-1]
    assert last.step == 2 and len(last.messages) == 3
    assert last.messages[0].content == "Q?\n\nsub0"
    assert res.answer.startswith("sim-knowledge@2")


async def test_recursion_handback_keeps_previous_answer():
    t = ScriptedTransport([wf([0], [[]]), Workflow(model_id=[], subtasks=[], access_list=[])])
    res = await run(t, max_rounds=2)
    assert res.error is None and len(res.workflows) == 2 and res.workflows[1].handback
    assert res.answer == "sim-frontier@0: saw 1 msgs"
    assert t.plan_requests[1].previous[0].final_response == res.answer


async def test_recursion_all_access_sees_previous_final_response():
    t = ScriptedTransport([wf([0], [[]]), wf([1, 2], [[], "all"])])
    res = await run(t, max_rounds=1)
    first = t.work_requests[1]  # round 1 step 0 has [] access: question + subtask only
    assert len(first.messages) == 1
    last = t.work_requests[2]
    assert last.messages[0].content == f"Q?\n\n{PREVIOUS_ROUND_SUBTASK}"
    assert last.messages[1].content == "sim-frontier@0: saw 1 msgs"
    assert res.answer == "sim-knowledge@1: saw 5 msgs"


async def test_a_policy_whose_card_recurses_gets_its_second_round_and_sees_each_steps_answer():
    """Issue 33: a policy trained to decide from the first round's results (its card's ``rounds``) is given that
    round even when the request asks for none; the second plan request shows each step's final answer."""
    t = ScriptedTransport([wf([0, 1], [[], []]), wf([2], [[]])], card_rounds=1)
    res = await run(t)
    assert res.error is None and len(res.workflows) == 2 and res.workflows[0].card_rounds == 1
    shown = t.plan_requests[1].previous[0].answers
    assert [(a.step, a.model_id) for a in shown] == [(0, 0), (1, 1)]
    # a request may ask for more than the card; never more than the deployment's cap
    t = ScriptedTransport([wf([0], [[]]), wf([1], [[]]), wf([2], [[]])], card_rounds=1)
    assert len((await run(t, max_rounds=2)).workflows) == 3
    capped = ExecutorSettings(common=CommonSettings(), max_rounds_cap=0)
    t = ScriptedTransport([wf([0], [[]]), wf([1], [[]])], card_rounds=1)
    res = await Executor(POOL, capped, t).solve(SolveRequest(question="Q?"))
    assert len(res.workflows) == 1


async def test_worker_failure_is_typed_and_dependents_are_skipped():
    t = ScriptedTransport([wf([0, 1, 2], [[], "all", "all"])], fail_worker="sim-math")
    res = await run(t)
    assert res.error is not None and res.error.code == ErrorCode.WORKER_ERROR
    steps = res.workflows[0].steps
    assert steps[2].error.code == ErrorCode.SKIPPED
    assert res.answer == steps[0].response  # best answer so far


async def test_budget_stops_and_returns_best_so_far():
    t = ScriptedTransport([wf([0, 1, 2], [[], "all", "all"])])
    res = await run(t, budget=Budget(max_calls=2))
    assert res.error.code == ErrorCode.BUDGET_EXCEEDED
    assert len(t.work_requests) == 2
    assert res.answer == res.workflows[0].steps[1].response


async def test_format_error_without_fallback_gives_reward_zero():
    t = ScriptedTransport([None])
    res = await run(t, reference="4")
    assert res.error.code == ErrorCode.FORMAT_ERROR and res.answer is None and res.reward == 0.0


async def test_reference_is_verified_and_rewarded():
    t = ScriptedTransport([wf([0], [[]])])
    res = await run(t, reference="sim-frontier@0", domain="math")
    assert res.verdict.outcome == Outcome.CORRECT and res.reward == 1.0
    assert t.verify_batches[0].items[0].reference.kind == "math"
    t = ScriptedTransport([wf([0], [[]])])
    res = await run(t, reference="nope")
    assert res.verdict.outcome == Outcome.INCORRECT and res.reward == 0.5


def test_reward_masks_verifier_errors():
    from schemas.verify import Verdict

    assert judge(True, Verdict(id="x", outcome=Outcome.ERROR, reason="died")).value is None
    assert judge(False, None).value == 0.0


async def test_checkpoint_after_every_plan_and_step_and_resume_skips_finished_calls():
    saved = []

    async def checkpoint(cp):
        saved.append(cp)

    plan = wf([0, 1, 2], [[], "all", "all"])
    t = ScriptedTransport([plan])
    full = await Executor(POOL, SETTINGS, t).solve(
        SolveRequest(question="Q?", task_id="t1"), checkpoint=checkpoint
    )
    assert full.error is None
    # plan, 3 steps, end of round
    assert [len(cp.rounds[-1].steps) if cp.workflow else "end" for cp in saved] == [0, 1, 2, 3, "end"]

    mid = saved[2]  # plan + steps 0 and 1 finished; step 2 was in flight when the process died
    t2 = ScriptedTransport([])  # the planner must not be asked again
    resumed = await Executor(POOL, SETTINGS, t2).solve(mid.request, resume=mid)
    assert resumed.error is None and not t2.plan_requests
    assert [r.step for r in t2.work_requests] == [2]  # only the in-flight call re-runs
    assert resumed.answer == full.answer
    assert resumed.usage.total == full.usage.total  # usage of finished steps is carried, not re-counted
    assert [s.index for s in resumed.workflows[0].steps] == [0, 1, 2]


async def test_resume_between_rounds_and_budget_carries_over():
    saved = []

    async def checkpoint(cp):
        saved.append(cp)

    t = ScriptedTransport([wf([0], [[]]), wf([1], ["all"])])
    await Executor(POOL, SETTINGS, t).solve(SolveRequest(question="Q?", max_rounds=1), checkpoint=checkpoint)
    between = next(cp for cp in saved if cp.workflow is None)
    t2 = ScriptedTransport([wf([1], ["all"])])
    res = await Executor(POOL, SETTINGS, t2).solve(between.request, resume=between)
    assert len(t2.plan_requests) == 1 and t2.plan_requests[0].round == 1
    assert t2.plan_requests[0].previous[0].final_response == "sim-frontier@0: saw 1 msgs"
    assert res.answer == "sim-math@0: saw 3 msgs"

    limited = msgspec.structs.replace(between.request, budget=Budget(max_calls=1))
    t3 = ScriptedTransport([wf([1], ["all"])])
    res = await Executor(POOL, SETTINGS, t3).solve(
        limited, resume=msgspec.structs.replace(between, request=limited)
    )
    assert res.error.code == ErrorCode.BUDGET_EXCEEDED and not t3.work_requests


async def test_pool_budget_defaults_apply_and_the_request_overrides_them_field_by_field():
    pool = msgspec.structs.replace(POOL, budget=Budget(max_calls=1, max_tokens=10**9))
    t = ScriptedTransport([wf([0, 1, 2], [[], "all", "all"])])
    res = await Executor(pool, SETTINGS, t).solve(SolveRequest(question="Q?"))
    assert res.error.code == ErrorCode.BUDGET_EXCEEDED and "max_calls=1" in res.error.message
    assert len(t.work_requests) == 1
    t = ScriptedTransport([wf([0, 1, 2], [[], "all", "all"])])
    res = await Executor(pool, SETTINGS, t).solve(SolveRequest(question="Q?", budget=Budget(max_calls=5)))
    assert (
        res.error is None and len(t.work_requests) == 3
    )  # the request's max_calls wins; max_tokens still holds


async def test_request_budget_overrides_the_executor_default_when_the_pool_sets_none():
    settings = msgspec.structs.replace(SETTINGS, default_budget=Budget(max_calls=1))
    t = ScriptedTransport([wf([0, 1], [[], "all"])])
    res = await Executor(POOL, settings, t).solve(SolveRequest(question="Q?"))
    assert res.error.code == ErrorCode.BUDGET_EXCEEDED
    t = ScriptedTransport([wf([0, 1], [[], "all"])])
    res = await Executor(POOL, settings, t).solve(SolveRequest(question="Q?", budget=Budget(max_calls=2)))
    assert res.error is None and len(t.work_requests) == 2


async def test_progress_events_can_be_turned_off_per_request():
    t = ScriptedTransport([wf([0, 1], [[], "all"])])
    res = await run(t)
    assert res.error is None and [e.kind for e in t.events] == ["planned", "step_done", "step_done", "done"]
    quiet = ScriptedTransport([wf([0, 1], [[], "all"])])
    res = await run(quiet, progress=False)
    assert res.error is None and len(quiet.work_requests) == 2 and quiet.events == []


class Rescued(ScriptedTransport):
    """The planner's reply when the Conductor's samples failed and its fallback baseline planned instead."""

    def __init__(self, *, attempts: int, failures: list[str], policy_error: ErrorInfo | None = None) -> None:
        super().__init__([])
        self.reply = PlanReply(
            policy="moa",
            completion="model_id = [0]",
            workflow=wf([0], [[]]),
            attempts=attempts,
            fallback_used=True,
            format_failures=failures,
            policy_error=policy_error,
        )

    async def plan(self, req, timeout):
        self.plan_requests.append(req)
        return self.reply


async def test_a_fallback_standing_in_for_unparseable_samples_is_rewarded_as_unparseable():
    """Failed before: the fallback's correct answer earned the policy 1.0 — the parse check saw no format error.
    The user still gets the fallback's answer and its verdict (docs/method.md §3)."""
    failures = ["missing_lists: no lists", "syntax: not a Python literal", "incomplete: missing subtasks"]
    res = await run(Rescued(attempts=3, failures=failures), reference="sim-frontier@0")
    assert res.error is None and res.answer == "sim-frontier@0: saw 1 msgs"
    assert res.verdict.outcome == Outcome.CORRECT and res.reward == 0.0
    assert res.workflows[0].fallback_used and res.workflows[0].planner_attempts == 3


async def test_a_fallback_standing_in_for_a_failed_backend_leaves_the_reward_unset():
    """The policy wrote nothing: nothing of its own to judge, so training masks the sample."""
    down = ErrorInfo(code=ErrorCode.PLANNER_ERROR, message="endpoint down", retryable=True)
    res = await run(Rescued(attempts=0, failures=[], policy_error=down), reference="sim-frontier@0")
    assert res.error is None and res.verdict.outcome == Outcome.CORRECT and res.reward is None


async def test_a_workflow_that_parsed_on_a_resample_is_the_policys_own_and_rewarded():
    class Resampled(ScriptedTransport):
        async def plan(self, req, timeout):
            return PlanReply(
                policy="conductor", workflow=wf([0], [[]]), attempts=2, format_failures=["syntax: x"]
            )

    res = await run(Resampled([]), reference="sim-frontier@0")
    assert res.reward == 1.0


async def test_an_infrastructure_failure_leaves_the_reward_unset_but_the_answer_so_far_verified():
    t = ScriptedTransport([wf([0, 1, 2], [[], "all", "all"])], fail_worker="sim-math")
    res = await run(t, reference="sim-frontier@0")
    assert res.error.code == ErrorCode.WORKER_ERROR and res.verdict.outcome == Outcome.CORRECT
    assert res.reward is None  # a worker outage says nothing about the policy's workflow

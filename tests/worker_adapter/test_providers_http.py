"""The openai and anthropic providers through their real SDKs against a local server speaking their wire formats."""

from __future__ import annotations

import time

import msgspec
import pytest

from conductor.pool import Pool, WorkerSpec
from schemas.errors import ErrorCode
from schemas.work import ChatMessage, WorkReply, WorkRequest
from services.worker_adapter.core import RetryPolicy, WorkerAdapter
from services.worker_adapter.providers import build_providers
from tests.worker_adapter.fakeapi import (
    FakeAPI,
    Reply,
    anthropic_error,
    anthropic_ok,
    openai_error,
    openai_ok,
)

FAST = RetryPolicy(base_s=0.01, max_s=0.05, retry_after_cap_s=5.0)
KEYS = {"TEST_OPENAI_KEY": "sk-test", "TEST_ANTHROPIC_KEY": "ak-test"}
MESSAGES = [
    ChatMessage(role="system", content="Be brief."),
    ChatMessage(role="user", content="What is 6*7?\n\nSolve it."),
]


def _pool(url: str) -> Pool:
    common = {"max_retries": 3, "timeout_s": 5.0, "price_in_per_mtok": 2.0, "price_out_per_mtok": 10.0}
    return Pool(
        workers=[
            WorkerSpec(
                name="gpt",
                provider="openai",
                model="gpt-x",
                base_url=f"{url}/v1",
                api_key_env="TEST_OPENAI_KEY",
                reasoning_effort="minimal",
                **common,
            ),
            WorkerSpec(
                name="qwen",
                provider="openai_compatible",
                model="qwen3",
                base_url=f"{url}/v1",
                top_p=0.8,
                top_k=20,
                presence_penalty=1.0,
                enable_thinking=False,
                **common,
            ),
            WorkerSpec(
                name="claude",
                provider="anthropic",
                model="claude-x",
                base_url=url,
                api_key_env="TEST_ANTHROPIC_KEY",
                thinking_budget=1024,
                max_tokens=512,
                **common,
            ),
            WorkerSpec(
                name="claude-nokey",
                provider="anthropic",
                model="claude-x",
                base_url=url,
                api_key_env="UNSET_KEY",
                **common,
            ),
        ]
    )


async def _call(api: FakeAPI, worker: str, **overrides: object) -> WorkReply:
    pool = _pool(api.url)
    providers = build_providers(pool, KEYS)
    adapter = WorkerAdapter(pool, providers, retry=FAST)
    try:
        return await adapter.call(WorkRequest(worker=worker, messages=MESSAGES, **overrides))
    finally:
        for p in {id(p): p for p in providers.values()}.values():
            await p.aclose()


async def test_openai_success_maps_request_and_usage():
    with FakeAPI([openai_ok("Final answer: 42", prompt=11, completion=7)]) as api:
        reply = await _call(api, "gpt")
    assert reply.error is None and reply.text == "Final answer: 42" and reply.model == "gpt-x"
    assert (reply.usage.input_tokens, reply.usage.output_tokens, reply.usage.calls) == (11, 7, 1)
    assert reply.usage.cost_usd == pytest.approx((11 * 2.0 + 7 * 10.0) / 1e6)
    (seen,) = api.seen
    assert seen.path == "/v1/chat/completions"
    assert seen.headers["authorization"] == "Bearer sk-test"
    body = seen.body
    assert body["model"] == "gpt-x" and body["max_completion_tokens"] == 4096
    assert body["reasoning_effort"] == "minimal" and "temperature" not in body  # reasoning models reject it
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}


async def test_openai_compatible_sends_sampling_and_extra_body():
    with FakeAPI([openai_ok()]) as api:
        reply = await _call(api, "qwen", max_tokens=64, temperature=0.7)
    assert reply.error is None
    body = api.seen[0].body
    assert api.seen[0].headers["authorization"] == "Bearer not-needed"
    assert body["max_tokens"] == 64 and body["temperature"] == 0.7 and body["top_p"] == 0.8
    assert body["presence_penalty"] == 1.0 and body["top_k"] == 20
    assert body["chat_template_kwargs"] == {"enable_thinking": False}


async def test_openai_429_retry_after_is_honoured_then_succeeds():
    with FakeAPI([openai_error(429, {"retry-after": "1"}), openai_ok()]) as api:
        reply = await _call(api, "gpt")
    assert reply.error is None and reply.attempts == 2 and reply.faults == {"rate_limited": 1}
    waited = api.seen[1].at - api.seen[0].at
    assert 0.95 <= waited < 2.0, waited


async def test_retry_after_is_capped():
    with FakeAPI([openai_error(429, {"retry-after": "3600"}), openai_ok()]) as api:
        pool = _pool(api.url)
        adapter = WorkerAdapter(pool, build_providers(pool, KEYS), retry=RetryPolicy(retry_after_cap_s=0.2))
        start = time.monotonic()
        reply = await adapter.call(WorkRequest(worker="gpt", messages=MESSAGES))
    assert reply.error is None and reply.attempts == 2
    assert time.monotonic() - start < 2.0


async def test_openai_500_then_success():
    with FakeAPI([openai_error(500), openai_error(503), openai_ok()]) as api:
        reply = await _call(api, "qwen")
    assert reply.error is None and reply.attempts == 3 and len(api.seen) == 3
    assert reply.faults == {"server_error": 2}


async def test_openai_timeout_then_success():
    with FakeAPI([openai_ok(delay_s=1.5), openai_ok()]) as api:
        reply = await _call(api, "gpt", timeout_s=0.4)
    assert reply.error is None and reply.attempts == 2 and reply.faults == {"timeout": 1}


async def test_openai_400_is_not_retried():
    with FakeAPI([openai_error(400), openai_ok()]) as api:
        reply = await _call(api, "gpt")
    assert reply.attempts == 1 and len(api.seen) == 1
    assert reply.error is not None and reply.error.code == ErrorCode.WORKER_ERROR
    assert reply.error.retryable is False and "HTTP 400" in (reply.error.detail or "")
    assert reply.faults == {"client_error": 1}


async def test_openai_500s_exhaust_retries_as_retryable_error():
    with FakeAPI([openai_error(500)] * 4) as api:
        reply = await _call(api, "gpt")
    assert reply.attempts == 4 and len(api.seen) == 4  # 1 + max_retries
    assert reply.error is not None and reply.error.retryable is True and reply.usage.calls == 0
    assert reply.faults == {"server_error": 4}  # the try that gave up counts too


async def test_openai_faults_of_every_transient_kind_in_one_call():
    """429 with Retry-After, 500, a timeout, 409 and 408 on the way to an answer: one fault per reason seen."""
    script = [
        openai_error(429, {"retry-after-ms": "20"}),
        openai_error(500),
        openai_ok(delay_s=1.5),
        openai_error(409),
        openai_error(408),
        openai_ok(),
    ]
    with FakeAPI(script) as api:
        pool = _pool(api.url)
        pool = Pool(workers=[msgspec.structs.replace(w, max_retries=5) for w in pool.workers])
        adapter = WorkerAdapter(pool, build_providers(pool, KEYS), retry=FAST)
        reply = await adapter.call(WorkRequest(worker="gpt", messages=MESSAGES, timeout_s=0.4))
    assert reply.error is None and reply.attempts == 6
    assert reply.faults == {"rate_limited": 1, "server_error": 1, "timeout": 2, "conflict": 1}


async def test_openai_response_without_choices_is_an_invalid_response():
    body = {"id": "c", "object": "chat.completion", "created": 1, "model": "gpt-x", "choices": []}
    with FakeAPI([Reply(200, body), openai_ok()]) as api:
        reply = await _call(api, "gpt")
    assert reply.error is not None and not reply.error.retryable and len(api.seen) == 1
    assert reply.faults == {"invalid_response": 1}


async def test_anthropic_success_maps_system_thinking_and_usage():
    with FakeAPI([anthropic_ok("Answer: B", input_tokens=20, output_tokens=9, cache_read=5)]) as api:
        reply = await _call(api, "claude")
    assert reply.error is None and reply.text == "Answer: B" and reply.model == "claude-x"
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (25, 9)  # cache reads count as input
    (seen,) = api.seen
    assert seen.path == "/v1/messages"
    body = seen.body
    assert body["system"] == "Be brief." and [m["role"] for m in body["messages"]] == ["user"]
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert body["max_tokens"] == 512 + 1024 and body["thinking"]["budget_tokens"] < body["max_tokens"]
    assert "temperature" not in body  # API 2026-10-21 rejects sampling parameters


async def test_anthropic_429_then_overloaded_then_success():
    script = [anthropic_error(429, {"retry-after": "1"}), anthropic_error(529), anthropic_ok()]
    with FakeAPI(script) as api:
        reply = await _call(api, "claude")
    assert reply.error is None and reply.attempts == 3
    assert reply.faults == {"rate_limited": 1, "server_error": 1}  # 529 "overloaded" is a 5xx
    assert api.seen[1].at - api.seen[0].at >= 0.95


async def test_anthropic_timeout_then_success():
    with FakeAPI([anthropic_ok(delay_s=1.5), anthropic_ok()]) as api:
        reply = await _call(api, "claude", timeout_s=0.4)
    assert reply.error is None and reply.attempts == 2 and reply.faults == {"timeout": 1}


async def test_anthropic_400_is_not_retried():
    with FakeAPI([anthropic_error(400), anthropic_ok()]) as api:
        reply = await _call(api, "claude")
    assert reply.attempts == 1 and len(api.seen) == 1
    assert reply.error is not None and reply.error.retryable is False
    assert reply.faults == {"client_error": 1}


async def test_missing_key_is_a_permanent_error_without_a_request():
    with FakeAPI([anthropic_ok()]) as api:
        reply = await _call(api, "claude-nokey")
    assert not api.seen and reply.attempts == 1
    assert reply.error is not None and "UNSET_KEY" in reply.error.message and not reply.error.retryable
    assert reply.faults == {"config": 1}


async def test_connection_refused_is_transient():
    with FakeAPI([]) as api:
        url = api.url
    pool = _pool(url)  # the server is gone: nothing listens on that port any more
    adapter = WorkerAdapter(pool, build_providers(pool, KEYS), retry=FAST)
    reply = await adapter.call(WorkRequest(worker="qwen", messages=MESSAGES))
    assert reply.error is not None and reply.error.retryable is True and reply.attempts == 4
    assert reply.faults == {"connection": 4}

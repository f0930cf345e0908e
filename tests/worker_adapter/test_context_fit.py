"""A worker's ``max_tokens`` above its server's context length, and a ``base_url`` without ``/v1`` (issue 19, item 8),
through the real ``openai`` SDK against a local server answering as vLLM does."""

from __future__ import annotations

from conductor.openai_errors import context_limit, missing_v1_hint
from conductor.pool import Pool, WorkerSpec
from schemas.work import ChatMessage, WorkRequest
from services.worker_adapter.core import WorkerAdapter
from services.worker_adapter.providers import build_providers
from tests.worker_adapter.fakeapi import FakeAPI, Reply, openai_ok, vllm_clamping_context, vllm_context
from tests.worker_adapter.test_providers_http import FAST

QUESTION = [ChatMessage(role="user", content="What is 6*7? " * 20)]


def _adapter(base_url: str, max_tokens: int = 4096) -> tuple[WorkerAdapter, list]:
    spec = WorkerSpec(
        name="smol",
        provider="openai_compatible",
        model="smol",
        base_url=base_url,
        max_tokens=max_tokens,
        max_retries=2,
        timeout_s=5.0,
    )
    pool = Pool(workers=[spec])
    providers = build_providers(pool, {})
    return WorkerAdapter(pool, providers, retry=FAST), list(providers.values())


async def _close(providers: list) -> None:
    for p in {id(p): p for p in providers}.values():
        await p.aclose()


async def test_max_tokens_above_the_context_is_fitted_not_a_400_on_every_call():
    """Failed before: the paper's 4096 against a model served with 2048 tokens was a 400 on every call."""
    with FakeAPI([vllm_context(2048)] * 6) as api:
        adapter, providers = _adapter(f"{api.url}/v1")
        try:
            replies = [await adapter.call(WorkRequest(worker="smol", messages=QUESTION)) for _ in range(3)]
        finally:
            await _close(providers)
    assert all(r.error is None and r.usage.calls == 1 for r in replies), [r.error for r in replies]
    sent = [s.body["max_tokens"] for s in api.seen]
    prompt = sum(len(m.content) for m in QUESTION) // 4 + 1
    # one refusal, the same call fitted to exactly what the server said fits, then later calls fitted up front
    assert sent[:2] == [4096, 2048 - prompt] and len(sent) == 4, sent
    assert all(prompt + n <= 2048 for n in sent[1:])


async def test_a_prompt_over_the_context_is_a_clear_error_naming_both_numbers():
    with FakeAPI([vllm_context(64)] * 3) as api:
        adapter, providers = _adapter(f"{api.url}/v1", max_tokens=16)
        try:
            reply = await adapter.call(WorkRequest(worker="smol", messages=QUESTION))
        finally:
            await _close(providers)
    assert reply.error is not None and not reply.error.retryable and len(api.seen) == 1
    prompt = sum(len(m.content) for m in QUESTION) // 4 + 1
    assert (
        f"prompt ({prompt} tokens)" in reply.error.message and "context of 64 tokens" in reply.error.message
    )


async def test_vllm_032_refusing_max_tokens_above_its_whole_context_is_fitted_too():
    """Failed before, against a real vLLM 0.32 (tests/worker_adapter/test_vllm.py): its refusal ("max_tokens=4096
    cannot be greater than max_model_len=2048") names no prompt size, so every call was a permanent 400. It cuts any
    max_tokens up to its context to what the prompt leaves itself: the call is made again with the context, and
    later calls are fitted to it before they are sent."""
    with FakeAPI([vllm_clamping_context(2048)] * 4) as api:
        adapter, providers = _adapter(f"{api.url}/v1")
        try:
            replies = [await adapter.call(WorkRequest(worker="smol", messages=QUESTION)) for _ in range(2)]
        finally:
            await _close(providers)
    assert all(r.error is None and r.usage.calls == 1 for r in replies), [r.error for r in replies]
    assert [s.body["max_tokens"] for s in api.seen] == [4096, 2048, 2048]


async def test_a_prompt_vllm_032_counted_only_past_its_context_is_named_as_at_least():
    """Failed before: vLLM 0.32 stops counting one token past the context, and the error named that as the size."""
    with FakeAPI([vllm_clamping_context(64)] * 3) as api:
        adapter, providers = _adapter(f"{api.url}/v1", max_tokens=16)
        try:
            reply = await adapter.call(WorkRequest(worker="smol", messages=QUESTION))
        finally:
            await _close(providers)
    assert reply.error is not None and not reply.error.retryable and len(api.seen) == 1
    assert "prompt (at least 65 tokens)" in reply.error.message, reply.error.message
    assert "context of 64 tokens" in reply.error.message


async def test_a_refusal_without_the_prompts_size_names_max_tokens_and_the_context():
    said = {
        "error": {
            "message": "This model's maximum context length is 2048 tokens.",
            "type": "invalid_request_error",
        }
    }
    with FakeAPI([Reply(400, said)]) as api:
        adapter, providers = _adapter(f"{api.url}/v1")
        try:
            reply = await adapter.call(WorkRequest(worker="smol", messages=QUESTION))
        finally:
            await _close(providers)
    assert reply.error is not None and "max_tokens 4096" in reply.error.message
    assert "context of 2048 tokens" in reply.error.message and len(api.seen) == 1


async def test_a_404_from_a_base_url_without_v1_says_so():
    """Failed before: a bare "Error code: 404 - {'detail': 'Not Found'}"."""
    with FakeAPI([Reply(404, {"detail": "Not Found"}), openai_ok()]) as api:
        adapter, providers = _adapter(api.url)  # the server serves /v1/chat/completions
        try:
            reply = await adapter.call(WorkRequest(worker="smol", messages=QUESTION))
        finally:
            await _close(providers)
    assert api.seen[0].path == "/chat/completions" and len(api.seen) == 1
    assert reply.error is not None and f"try {api.url}/v1" in reply.error.message, reply.error


def test_refusals_as_each_server_words_them():
    vllm = context_limit(
        "This model's maximum context length is 2048 tokens. However, you requested 4127 tokens "
        "(31 in the messages, 4096 in the completion)."
    )
    sglang = context_limit(
        "Requested token count exceeds the model's maximum context length of 2048 tokens. You "
        "requested a total of 4127 tokens: 31 tokens from the input messages and 4096 tokens."
    )
    hosted = context_limit(
        "This model's maximum context length is 8192 tokens. However, your messages resulted in "
        "9000 tokens. Please reduce the length of the messages."
    )
    assert (vllm.context, vllm.room()) == (2048, 2017) and (sglang.context, sglang.prompt) == (2048, 31)
    assert (hosted.context, hosted.prompt) == (8192, 9000) and context_limit("model not found") is None
    # vLLM 0.32: only max_tokens above the whole context is refused (the server cuts the rest); prompts are counted
    # to one token past the context; a prompt of exactly the context leaves no room for one output token
    clamping = context_limit(
        "max_tokens=4096 cannot be greater than max_model_len=2048. Please request fewer output tokens. "
        "(parameter=max_tokens, value=4096)"
    )
    counted = context_limit(
        "This model's maximum context length is 2048 tokens. However, your prompt contains at least 2049 "
        "input tokens, which exceeds this limit even without any output tokens. (parameter=input_tokens, value=2049)"
    )
    full = context_limit(
        "The decoder prompt (length 2048) plus the number of requested output tokens (at least 1) is longer "
        "than the maximum model length of 2048. Make sure that `max_model_len` is no smaller than the number"
    )
    assert (clamping.context, clamping.prompt, clamping.room()) == (2048, None, 2048) and clamping.clamps
    assert (counted.context, counted.prompt, counted.prompt_at_least) == (2048, 2049, True)
    assert (full.context, full.prompt, full.prompt_at_least, full.clamps) == (2048, 2048, False, False)
    assert missing_v1_hint("http://h:8000/v1") == "" and missing_v1_hint("https://x/api/v1beta/") == ""
    assert "/v1" in missing_v1_hint("http://h:8000") and missing_v1_hint(None) == ""

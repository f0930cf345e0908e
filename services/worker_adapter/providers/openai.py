"""Chat Completions through the official ``openai`` SDK, for OpenAI itself and any OpenAI-compatible server.

``openai``: ``max_completion_tokens`` and ``reasoning_effort``. Reasoning models (o-series, GPT-5) reject sampling
parameters other than the defaults, so when ``reasoning_effort`` is set temperature and top_p are not sent.
``openai_compatible`` (vLLM, SGLang, Ollama, Gemini's OpenAI endpoint): ``max_tokens`` (the field every such server
knows), temperature/top_p/presence_penalty, ``reasoning_effort`` when set, and the non-standard ``top_k`` and
``chat_template_kwargs.enable_thinking`` (Qwen3's thinking switch in vLLM/SGLang) through ``extra_body``.

The SDK's own retries are off (``max_retries=0``): the core retries, so backoff and Retry-After have one owner.
Token counts come from the response's ``usage``; a server that omits it gets an estimate of 4 characters per token
so budgets and costs never silently read zero.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import openai
import structlog

from conductor.pool import WorkerSpec
from schemas.work import ChatMessage, FaultReason
from services.worker_adapter.provider import (
    CallParams,
    Completion,
    PermanentProviderError,
)
from services.worker_adapter.providers.clients import ClientCache, sdk_errors

log = structlog.get_logger("conductor.worker_adapter.openai")

KEYLESS = "not-needed"
"""Sent as the key to compatible servers that need none (a local vLLM); the SDK refuses an empty key."""


def request_body(spec: WorkerSpec, messages: Sequence[ChatMessage], params: CallParams) -> dict[str, Any]:
    """Keyword arguments for ``chat.completions.create``; pure, so the mapping is tested without a server."""
    body: dict[str, Any] = {
        "model": spec.model,
        "messages": [{"role": m.role, "content": m.content} for m in messages],
    }
    sampling = {
        "temperature": params.temperature,
        "top_p": spec.top_p,
        "presence_penalty": spec.presence_penalty,
    }
    if spec.provider == "openai":
        body["max_completion_tokens"] = params.max_tokens
        if spec.reasoning_effort:
            body["reasoning_effort"] = spec.reasoning_effort
            sampling = {"presence_penalty": spec.presence_penalty}
    else:
        body["max_tokens"] = params.max_tokens
        if spec.reasoning_effort:
            body["reasoning_effort"] = spec.reasoning_effort
        extra: dict[str, Any] = {}
        if spec.top_k is not None:
            extra["top_k"] = spec.top_k
        if spec.enable_thinking is not None:
            extra["chat_template_kwargs"] = {"enable_thinking": spec.enable_thinking}
        if extra:
            body["extra_body"] = extra
    body.update({k: v for k, v in sampling.items() if v is not None})
    return body


def _estimate(chars: int) -> int:
    return math.ceil(chars / 4)


class OpenAIProvider:
    """One ``AsyncOpenAI`` client per (base URL, key variable), created on first use and closed in ``aclose``."""

    def __init__(self, keys: Mapping[str, str]) -> None:
        self._clients: ClientCache[openai.AsyncOpenAI] = ClientCache(
            keys,
            lambda key, spec: openai.AsyncOpenAI(api_key=key, base_url=spec.base_url, max_retries=0, timeout=spec.timeout_s),
            keyless=KEYLESS,
        )

    def _client(self, spec: WorkerSpec) -> openai.AsyncOpenAI:
        return self._clients.get(spec)

    async def complete(
        self, spec: WorkerSpec, messages: Sequence[ChatMessage], params: CallParams
    ) -> Completion:
        client = self._client(spec)
        try:
            with sdk_errors(openai, params.timeout_s):
                resp = await client.chat.completions.create(
                    **request_body(spec, messages, params), timeout=params.timeout_s
                )
        except openai.APIError as exc:  # e.g. a 2xx whose body is not a chat completion: replaying will not fix it
            raise PermanentProviderError(
                f"unusable response: {exc.message}", reason=FaultReason.INVALID_RESPONSE
            ) from exc
        if not resp.choices:
            raise PermanentProviderError("the response has no choices", reason=FaultReason.INVALID_RESPONSE)
        text = resp.choices[0].message.content or ""
        if resp.usage is not None:
            n_in, n_out = resp.usage.prompt_tokens, resp.usage.completion_tokens
        else:
            log.warning("response without usage; estimating tokens", worker=spec.name)
            n_in, n_out = _estimate(sum(len(m.content) for m in messages)), _estimate(len(text))
        return Completion(text=text, input_tokens=n_in, output_tokens=n_out, model=resp.model or spec.model)

    async def aclose(self) -> None:
        await self._clients.aclose()

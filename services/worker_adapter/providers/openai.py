"""Chat Completions through the official ``openai`` SDK, for OpenAI itself and any OpenAI-compatible server.

``openai``: ``max_completion_tokens`` and ``reasoning_effort``. Reasoning models (o-series, GPT-5) reject sampling
parameters other than the defaults, so when ``reasoning_effort`` is set temperature and top_p are not sent.
``openai_compatible`` (vLLM, SGLang, Ollama, Gemini's OpenAI endpoint): ``max_tokens`` (the field every such server
knows), temperature/top_p/presence_penalty, ``reasoning_effort`` when set, and the non-standard ``top_k`` and
``chat_template_kwargs.enable_thinking`` (Qwen3's thinking switch in vLLM/SGLang) through ``extra_body``.

The SDK's own retries are off (``max_retries=0``): the core retries, so backoff and Retry-After have one owner.
Token counts come from the response's ``usage``; a server that omits it gets an estimate of 4 characters per token
so budgets and costs never silently read zero. A ``max_tokens`` above the server's context length is fitted to it
(``OpenAIProvider``, conductor/openai_errors.py); a 404 from a ``base_url`` without ``/v1`` says to add it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import openai
import structlog

from conductor.aio import longest_wait
from conductor.openai_errors import ContextLimit, context_limit, fit, missing_v1_hint, server_message
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


class ContextOverflow(Exception):
    """The server refused the call's ``max_tokens`` (or its prompt) for its context length; numbers in ``limit``."""

    def __init__(self, limit: ContextLimit, detail: str) -> None:
        super().__init__(detail)
        self.limit = limit
        self.detail = detail


class OpenAIProvider:
    """One ``AsyncOpenAI`` client per (base URL, key variable), created on first use and closed in ``aclose``.

    A worker's ``max_tokens`` above its server's context length (the paper's 4096 against a small model served with
    2048) would make every call a 400: the server's refusal names the context and the prompt's tokens (vLLM 0.32:
    the context only, and it cuts any max_tokens up to it to what the prompt leaves), so the call is made once more
    with what fits, and the context is remembered so later calls are fitted before they are sent (against a
    generous estimate of the prompt). A prompt that alone fills the context, or a refusal without the prompt's size
    from a server that does not cut, is a permanent error naming both numbers."""

    def __init__(self, keys: Mapping[str, str]) -> None:
        self._clients: ClientCache[openai.AsyncOpenAI] = ClientCache(
            keys,
            lambda key, spec: openai.AsyncOpenAI(
                api_key=key, base_url=spec.base_url, max_retries=0, timeout=spec.timeout_s
            ),
            keyless=KEYLESS,
        )
        self._limits: dict[tuple[str | None, str], ContextLimit] = {}  # (base_url, model) -> its context

    def _client(self, spec: WorkerSpec) -> openai.AsyncOpenAI:
        return self._clients.get(spec)

    def _fitted(self, spec: WorkerSpec, messages: Sequence[ChatMessage], params: CallParams) -> CallParams:
        max_tokens = fit(self._limits.get((spec.base_url, spec.model)), messages, params.max_tokens)
        return (
            params
            if max_tokens == params.max_tokens
            else msgspec.structs.replace(params, max_tokens=max_tokens)
        )

    async def complete(
        self, spec: WorkerSpec, messages: Sequence[ChatMessage], params: CallParams
    ) -> Completion:
        client = self._client(spec)
        fitted = self._fitted(spec, messages, params)
        try:
            try:
                resp = await self._create(client, spec, messages, fitted)
            except ContextOverflow as exc:
                self._limits[(spec.base_url, spec.model)] = exc.limit
                room = exc.limit.room()
                if room is None or room < 1 or room >= fitted.max_tokens:
                    raise _overflow(spec, fitted.max_tokens, exc) from exc
                log.warning(
                    "max_tokens above the server's context: fitted",
                    worker=spec.name,
                    max_tokens=params.max_tokens,
                    context=exc.limit.context,
                    fitted=room,
                )
                fitted = msgspec.structs.replace(fitted, max_tokens=room)
                resp = await self._create(client, spec, messages, fitted)
        except ContextOverflow as exc:  # refused again with what the server said would fit: no third try
            raise _overflow(spec, fitted.max_tokens, exc) from exc
        except (
            openai.APIError
        ) as exc:  # e.g. a 2xx whose body is not a chat completion: replaying will not fix it
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

    async def _create(
        self,
        client: openai.AsyncOpenAI,
        spec: WorkerSpec,
        messages: Sequence[ChatMessage],
        params: CallParams,
    ) -> Any:
        """One request; a context-length refusal is a ``ContextOverflow``, a 404 hints at a missing ``/v1``."""
        with sdk_errors(openai, params.timeout_s):
            try:
                return await client.chat.completions.create(
                    **request_body(spec, messages, params), timeout=longest_wait(params.timeout_s)
                )
            except openai.BadRequestError as exc:
                said = server_message(exc.body, exc.message)
                if (limit := context_limit(said)) is None:
                    raise
                raise ContextOverflow(limit, f"HTTP 400: {said[:500]}") from exc
            except openai.NotFoundError as exc:
                said = server_message(exc.body, exc.message)
                raise PermanentProviderError(
                    f"HTTP 404 from {spec.base_url or 'the OpenAI API'}: {said[:200]}{missing_v1_hint(spec.base_url)}",
                    reason=FaultReason.CLIENT_ERROR,
                    status=404,
                    detail=f"HTTP 404: {str(exc.body)[:500]}",
                ) from exc

    async def aclose(self) -> None:
        await self._clients.aclose()


def _overflow(spec: WorkerSpec, max_tokens: int, exc: ContextOverflow) -> PermanentProviderError:
    limit = exc.limit
    if limit.prompt is not None and limit.prompt >= limit.context:
        size = f"at least {limit.prompt}" if limit.prompt_at_least else limit.prompt
        what = f"the prompt ({size} tokens) fills worker {spec.name!r}'s context of {limit.context} tokens"
    elif limit.prompt is not None:
        what = (
            f"max_tokens {max_tokens} does not fit worker {spec.name!r}'s context of {limit.context} tokens "
            f"after the prompt's {limit.prompt}"
        )
    else:
        what = (
            f"max_tokens {max_tokens} does not fit worker {spec.name!r}'s context of {limit.context} tokens; "
            "lower max_tokens in the pool file"
        )
    return PermanentProviderError(what, reason=FaultReason.CLIENT_ERROR, status=400, detail=exc.detail)

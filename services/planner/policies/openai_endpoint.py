"""An OpenAI-compatible Chat Completions endpoint as the policy: how vLLM serves the trained Conductor, and how a
hosted model is used as the conductor (the paper's frontier-model ablation, docs/method.md §7)."""

from __future__ import annotations

from collections.abc import Sequence

import openai

from conductor.openai_errors import ContextLimit, context_limit, fit, missing_v1_hint, server_message
from schemas.learner import PolicyCard
from schemas.usage import Usage
from schemas.work import ChatMessage
from services.planner.policy import PolicyError, PromptTooLong, Sample

RETRYABLE_STATUS = frozenset({408, 409, 429})
"""Besides 5xx: request timeout, conflict and rate limit may succeed later. Other 4xx are configuration errors."""


class _Overflow(Exception):
    def __init__(self, limit: ContextLimit, detail: str) -> None:
        super().__init__(detail)
        self.limit = limit
        self.detail = detail


class OpenAIEndpointPolicy:
    """Samples via ``chat.completions.create``. The SDK's own retries (with backoff, honouring Retry-After) run
    first; what still fails becomes a ``PolicyError`` carrying the server's status and words (a 404 from a
    ``base_url`` without ``/v1`` says so). The API key is passed in by value, resolved by the config from the env
    var it names.

    The server's context length (conductor/openai_errors.py) bounds each sample: ``max_tokens`` above what is left
    after the prompt (or, for vLLM 0.32, above the whole context) is fitted to it, remembered so later prompts are
    fitted before they are sent; a prompt that fills the context alone is ``PromptTooLong``."""

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None,
        api_key: str,
        timeout_s: float = 120.0,
        max_retries: int = 2,
        name: str | None = None,
    ) -> None:
        self.name = name or f"openai:{model}"
        # A served checkpoint's card does not travel over HTTP: the settings apply.
        self.card: PolicyCard | None = None
        self._model = model
        self._base_url = base_url
        self._client = openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=max_retries
        )
        self._limit: ContextLimit | None = None  # the server's context, once a refusal named it

    async def sample(
        self, messages: Sequence[ChatMessage], *, n: int, temperature: float, max_tokens: int
    ) -> list[Sample]:
        max_tokens = fit(self._limit, messages, max_tokens)
        try:
            return await self._sample(messages, n, temperature, max_tokens)
        except _Overflow as exc:
            self._limit = exc.limit
            room = exc.limit.room()
            if room is None or not 0 < room < max_tokens:
                raise _refused(exc, max_tokens) from exc
        try:
            return await self._sample(messages, n, temperature, room)
        except _Overflow as exc:  # refused again with what the server said would fit: no third try
            raise _refused(exc, room) from exc

    async def _sample(
        self, messages: Sequence[ChatMessage], n: int, temperature: float, max_tokens: int
    ) -> list[Sample]:
        try:
            resp = await self._client.chat.completions.create(
                model=self._model,
                messages=[{"role": m.role, "content": m.content} for m in messages],  # type: ignore[misc]
                temperature=temperature,
                max_completion_tokens=max_tokens,
                **({"n": n} if n != 1 else {}),  # some compatible servers reject `n` altogether
            )
        except openai.APIStatusError as exc:
            said = server_message(exc.body, exc.message)
            if exc.status_code == 400 and (limit := context_limit(said)) is not None:
                raise _Overflow(limit, f"HTTP 400: {said[:500]}") from exc
            retryable = exc.status_code >= 500 or exc.status_code in RETRYABLE_STATUS
            hint = missing_v1_hint(self._base_url) if exc.status_code == 404 else ""
            raise PolicyError(
                f"policy endpoint answered HTTP {exc.status_code}: {said[:300]}{hint}",
                retryable=retryable,
                detail=str(exc)[:500],
            ) from exc
        except openai.APIConnectionError as exc:  # includes APITimeoutError
            raise PolicyError(
                f"policy endpoint unreachable: {type(exc).__name__}", retryable=True, detail=str(exc)[:500]
            ) from exc
        except openai.APIResponseValidationError as exc:
            raise PolicyError("policy endpoint sent a malformed response", retryable=False) from exc
        return _samples(resp)

    async def aclose(self) -> None:
        await self._client.close()


def _refused(exc: _Overflow, max_tokens: int) -> PolicyError:
    limit = exc.limit
    if limit.prompt is not None and limit.prompt >= limit.context:
        return PromptTooLong(limit.prompt, limit.context, at_least=limit.prompt_at_least, detail=exc.detail)
    after = f" after the prompt's {limit.prompt}" if limit.prompt is not None else ""
    return PolicyError(
        f"max_tokens {max_tokens} does not fit the policy's context of {limit.context} tokens{after}",
        retryable=False,
        detail=exc.detail,
    )


def _samples(resp: openai.types.chat.ChatCompletion) -> list[Sample]:
    """One Sample per choice. The response's usage covers all choices, so it is attributed to the first sample:
    sums over samples stay exact."""
    usage = Usage(
        input_tokens=resp.usage.prompt_tokens if resp.usage else 0,
        output_tokens=resp.usage.completion_tokens if resp.usage else 0,
        calls=1,
    )
    choices = sorted(resp.choices, key=lambda c: c.index)
    return [
        Sample(
            text=c.message.content or "",
            usage=usage if i == 0 else Usage(),
            truncated=c.finish_reason == "length",
        )
        for i, c in enumerate(choices)
    ]

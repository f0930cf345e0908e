"""An OpenAI-compatible Chat Completions endpoint as the policy: how vLLM serves the trained Conductor, and how a
hosted model is used as the conductor (the paper's frontier-model ablation, docs/method.md §7)."""

from __future__ import annotations

from collections.abc import Sequence

import openai

from schemas.usage import Usage
from schemas.work import ChatMessage
from services.planner.policy import PolicyError, Sample

RETRYABLE_STATUS = frozenset({408, 409, 429})
"""Besides 5xx: request timeout, conflict and rate limit may succeed later. Other 4xx are configuration errors."""


class OpenAIEndpointPolicy:
    """Samples via ``chat.completions.create``. The SDK's own retries (with backoff, honouring Retry-After) run
    first; what still fails becomes a ``PolicyError``. The API key is passed in by value, resolved by the config
    from the env var it names."""

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
        self._model = model
        self._client = openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=max_retries
        )

    async def sample(
        self, messages: Sequence[ChatMessage], *, n: int, temperature: float, max_tokens: int
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
            retryable = exc.status_code >= 500 or exc.status_code in RETRYABLE_STATUS
            raise PolicyError(
                f"policy endpoint answered HTTP {exc.status_code}", retryable=retryable, detail=str(exc)[:500]
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

"""Claude through the official ``anthropic`` SDK's Messages API.

System turns go to ``system=`` (the Messages API has no system role in ``messages``). Thinking: a
``thinking_budget`` > 0 sends ``thinking={"type": "enabled", "budget_tokens": N}``. The API counts thinking inside
``max_tokens`` and requires budget < max_tokens, so the pool's ``max_tokens`` is kept as the answer's allowance and
``N + max_tokens`` is sent; the constraint then holds by construction and thinking cannot starve the answer.
Sampling: SDK 2.x speaks API version 2026-10-21, which rejects temperature, top_p and top_k outright (formerly
thinking also forced temperature 1), so the pool's temperature is not sent to Claude; it stays in the pool file for
the other providers and is recorded as not applied here.

The SDK's own retries are off; the core retries. Input tokens include prompt-cache reads and writes, priced at the
pool's single input price (an upper bound when caching is active).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import anthropic

from conductor.aio import longest_wait
from conductor.pool import WorkerSpec
from schemas.work import ChatMessage, FaultReason
from services.worker_adapter.provider import (
    CallParams,
    Completion,
    PermanentProviderError,
)
from services.worker_adapter.providers.clients import ClientCache, sdk_errors


def request_body(spec: WorkerSpec, messages: Sequence[ChatMessage], params: CallParams) -> dict[str, Any]:
    """Keyword arguments for ``messages.create``; pure, so the mapping is tested without a server."""
    body: dict[str, Any] = {
        "model": spec.model,
        "max_tokens": params.max_tokens,
        "messages": [{"role": m.role, "content": m.content} for m in messages if m.role != "system"],
    }
    system = "\n\n".join(m.content for m in messages if m.role == "system")
    if system:
        body["system"] = system
    budget = spec.thinking_budget or 0
    if budget > 0:
        body["thinking"] = {"type": "enabled", "budget_tokens": budget}
        body["max_tokens"] = params.max_tokens + budget
    return body


class AnthropicProvider:
    """One ``AsyncAnthropic`` client per (base URL, key variable), created on first use and closed in ``aclose``."""

    def __init__(self, keys: Mapping[str, str]) -> None:
        self._clients: ClientCache[anthropic.AsyncAnthropic] = ClientCache(
            keys,
            lambda key, spec: anthropic.AsyncAnthropic(
                api_key=key, base_url=spec.base_url, max_retries=0, timeout=spec.timeout_s
            ),
            keyless=None,
        )

    def _client(self, spec: WorkerSpec) -> anthropic.AsyncAnthropic:
        return self._clients.get(spec)

    async def complete(
        self, spec: WorkerSpec, messages: Sequence[ChatMessage], params: CallParams
    ) -> Completion:
        client = self._client(spec)
        try:
            with sdk_errors(anthropic, params.timeout_s):
                resp = await client.messages.create(
                    **request_body(spec, messages, params), timeout=longest_wait(params.timeout_s)
                )
        except anthropic.AnthropicError as exc:  # unusable response or credentials: replaying will not fix it
            reason = (
                FaultReason.INVALID_RESPONSE if isinstance(exc, anthropic.APIError) else FaultReason.CONFIG
            )
            raise PermanentProviderError(f"{type(exc).__name__}: {exc}", reason=reason) from exc
        text = "".join(block.text for block in resp.content if block.type == "text")
        u = resp.usage
        n_in = u.input_tokens + (u.cache_creation_input_tokens or 0) + (u.cache_read_input_tokens or 0)
        return Completion(
            text=text, input_tokens=n_in, output_tokens=u.output_tokens, model=resp.model or spec.model
        )

    async def aclose(self) -> None:
        await self._clients.aclose()

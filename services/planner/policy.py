"""The policy seam: whatever writes Conductor completions (a served checkpoint, a hosted model, a local model, a
script) is a ``Policy``; the planner core only ever sees this Protocol and ``PolicyError``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import msgspec

from schemas.learner import PolicyCard
from schemas.usage import Usage
from schemas.work import ChatMessage


class Sample(msgspec.Struct, frozen=True, kw_only=True):
    text: str
    usage: Usage = Usage()
    truncated: bool = False  # generation stopped at max_tokens; the lists may be cut off


class PolicyError(Exception):
    """The backend failed to produce samples (not a format error). ``retryable``: a later call may succeed
    (connection, timeout, 429, 5xx); otherwise the configuration or request is wrong (4xx, missing model).
    ``field``: the request field at fault (e.g. ``policy`` naming an unknown worker); the planner then answers
    ``bad_request`` instead of falling back, since a fallback would hide the caller's mistake."""

    def __init__(
        self, message: str, *, retryable: bool, detail: str | None = None, field: str | None = None
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.detail = detail
        self.field = field


class PromptTooLong(PolicyError):
    """The prompt alone fills the policy's context (a long question, or a recursion prompt carrying earlier rounds).
    Deterministic for this request: the planner answers a typed error instead of falling back, since on a
    recursion round the fallback hands back and the round would end silently. ``at_least``: the server stopped
    counting the prompt at ``prompt_tokens`` (vLLM counts only to one token past its context)."""

    def __init__(
        self, prompt_tokens: int, context: int, *, at_least: bool = False, detail: str | None = None
    ) -> None:
        size = f"at least {prompt_tokens}" if at_least else str(prompt_tokens)
        super().__init__(
            f"the prompt is {size} tokens, over the policy's context of {context} tokens",
            retryable=False,
            detail=detail,
        )
        self.prompt_tokens = prompt_tokens
        self.context = context


class Policy(Protocol):
    name: str  # reported as PlanReply.policy, e.g. "openai:conductor-7b"

    @property
    def card(self) -> PolicyCard | None:
        """How the weights the next sample comes from must be served (schemas/learner.py): the planner adopts its
        prompt, temperature, lengths and step cap, and serves it on the views it covers; None: no card, the
        settings apply."""
        ...

    async def sample(
        self, messages: Sequence[ChatMessage], *, n: int, temperature: float, max_tokens: int
    ) -> list[Sample]:
        """``n`` completions of the conversation; raises ``PolicyError`` only."""
        ...

    async def aclose(self) -> None:
        """Release clients and models; the policy is not used afterwards."""
        ...

"""What OpenAI-compatible servers say when they refuse a request, read once for the two clients of such servers (the
worker-adapter's openai provider and the planner's endpoint policy): a context-length refusal's numbers, and the
hint for a 404 from a ``base_url`` without ``/v1``.

The refusals, as the servers word them (a 400):

- vLLM: "'max_tokens' or 'max_completion_tokens' is too large: 4096. This model's maximum context length is 2048
  tokens and your request has 31 input tokens (4096 > 2048 - 31)."; older: "This model's maximum context length is
  2048 tokens. However, you requested 4127 tokens (31 in the messages, 4096 in the completion)."; a prompt alone
  too long: "... However, your request has 3000 input tokens. Please reduce the length of the input messages."
- SGLang: "Requested token count exceeds the model's maximum context length of 2048 tokens. You requested a total
  of 4127 tokens: 31 tokens from the input messages and 4096 tokens for the completion."
- OpenAI: "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens."
- vLLM 0.32 refuses only a ``max_tokens`` above the whole context, naming no prompt size ("max_tokens=4096 cannot be
  greater than max_model_len=2048. Please request fewer output tokens.") and cuts any other to what the prompt
  leaves; it counts a prompt only to one token past the context ("However, your prompt contains at least 2049
  input tokens, which exceeds this limit even without any output tokens."), and a prompt of exactly the context
  is "The decoder prompt (length 2048) plus the number of requested output tokens (at least 1) is longer than the
  maximum model length of 2048."
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from urllib.parse import urlparse

import msgspec

from schemas.work import ChatMessage

_CONTEXT = re.compile(
    r"(?:maximum context length (?:is |of )?\(?|maximum model length of |max_model_len=)(\d+)", re.IGNORECASE
)
_CLAMPS = re.compile(r"max_(?:completion_)?tokens=\d+ cannot be greater than max_model_len=", re.IGNORECASE)
_AT_LEAST = re.compile(r"at least (\d+) input tokens", re.IGNORECASE)
_PROMPT = [
    re.compile(p, re.IGNORECASE)
    for p in (
        r"(\d+) input tokens",
        r"prompt \(length (\d+)\)",
        r"\((\d+) in the messages",
        r"(\d+) tokens from the input",
        r"messages resulted in (\d+) tokens",
        r"requested (\d+) tokens in the messages",
        r"input length \((\d+)\)",
    )
]


class ContextLimit(msgspec.Struct, frozen=True, kw_only=True):
    """A server's context length and, when it said, how many tokens the prompt took (``prompt_at_least``: at least
    that many, the server stopped counting there). ``clamps``: the server refused only a ``max_tokens`` above its
    whole context and cuts any other to what the prompt leaves itself."""

    context: int
    prompt: int | None = None
    prompt_at_least: bool = False
    clamps: bool = False

    def room(self) -> int | None:
        """Output tokens to ask for: what the prompt leaves; the whole context from a server that cuts it to that
        itself; None when neither is known."""
        if self.prompt is not None:
            return self.context - self.prompt
        return self.context if self.clamps else None


def context_limit(message: str) -> ContextLimit | None:
    """The numbers of a context-length refusal, or None when ``message`` is not one."""
    found = _CONTEXT.search(message)
    if found is None:
        return None
    prompt = next((int(m.group(1)) for p in _PROMPT if (m := p.search(message)) is not None), None)
    return ContextLimit(
        context=int(found.group(1)),
        prompt=prompt,
        prompt_at_least=_AT_LEAST.search(message) is not None,
        clamps=_CLAMPS.search(message) is not None,
    )


def prompt_estimate(messages: Sequence[ChatMessage]) -> int:
    """Generous prompt tokens, to fit ``max_tokens`` before sending once a server's context is known: 3 characters a
    token (English runs near 4) plus a chat template's markers. An estimate short of the truth costs one refusal,
    which names the exact numbers."""
    return sum(math.ceil(len(m.content) / 3) + 8 for m in messages) + 16


def fit(limit: ContextLimit | None, messages: Sequence[ChatMessage], max_tokens: int) -> int:
    """``max_tokens`` fitted before sending, once a refusal named the server's context: to the context itself for a
    server that cuts it to what the prompt leaves (``clamps``), else to what the prompt's estimate leaves. Unchanged
    when that is not less, or when the estimate leaves nothing: the server's answer then says whether the prompt
    fits."""
    if limit is None:
        return max_tokens
    room = limit.context if limit.clamps else limit.context - prompt_estimate(messages)
    return room if 0 < room < max_tokens else max_tokens


def missing_v1_hint(base_url: str | None) -> str:
    """For a 404: OpenAI-compatible servers (vLLM, SGLang, Ollama) serve ``/v1/chat/completions``, and the SDK
    appends only ``/chat/completions`` to ``base_url``. Empty when the URL already ends in a versioned path."""
    if not base_url:
        return ""
    path = urlparse(base_url).path.rstrip("/")
    if re.search(r"/v\d+(beta|alpha)?\d*$", path):
        return ""
    return f" (base_url {base_url} has no /v1: OpenAI-compatible servers serve /v1/chat/completions; try {base_url.rstrip('/')}/v1)"


def server_message(body: object, fallback: str) -> str:
    """The server's own words from an error body: OpenAI's and vLLM's ``{"message": ...}`` (the SDKs unwrap
    ``{"error": {...}}`` first), FastAPI's ``{"detail": ...}`` (vLLM's 404 for an unknown path); else ``fallback``."""
    if isinstance(body, dict):
        for key in ("message", "detail"):
            if isinstance(body.get(key), str) and body[key]:
                return str(body[key])
    return str(body) if isinstance(body, str) and body else fallback

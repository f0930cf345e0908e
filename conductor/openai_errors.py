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
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from urllib.parse import urlparse

import msgspec

from schemas.work import ChatMessage

_CONTEXT = re.compile(r"maximum context length (?:is |of )?\(?(\d+)\)?", re.IGNORECASE)
_PROMPT = [
    re.compile(p, re.IGNORECASE)
    for p in (
        r"(\d+) input tokens",
        r"\((\d+) in the messages",
        r"(\d+) tokens from the input",
        r"messages resulted in (\d+) tokens",
        r"requested (\d+) tokens in the messages",
        r"input length \((\d+)\)",
    )
]


class ContextLimit(msgspec.Struct, frozen=True, kw_only=True):
    """A server's context length and, when it said, how many tokens the prompt took."""

    context: int
    prompt: int | None = None

    def room(self) -> int | None:
        """Output tokens that fit after the prompt; None when the prompt's size is not known."""
        return None if self.prompt is None else self.context - self.prompt


def context_limit(message: str) -> ContextLimit | None:
    """The numbers of a context-length refusal, or None when ``message`` is not one."""
    found = _CONTEXT.search(message)
    if found is None:
        return None
    prompt = next((int(m.group(1)) for p in _PROMPT if (m := p.search(message)) is not None), None)
    return ContextLimit(context=int(found.group(1)), prompt=prompt)


def prompt_estimate(messages: Sequence[ChatMessage]) -> int:
    """Generous prompt tokens, to fit ``max_tokens`` before sending once a server's context is known: 3 characters a
    token (English runs near 4) plus a chat template's markers. An estimate short of the truth costs one refusal,
    which names the exact numbers."""
    return sum(math.ceil(len(m.content) / 3) + 8 for m in messages) + 16


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

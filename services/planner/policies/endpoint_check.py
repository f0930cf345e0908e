"""The planner's start-up check of an ``openai:`` policy: the endpoint answers and serves the model.

Without it a server that is down, a ``base_url`` without ``/v1`` or a typo in the model name showed only as every
plan falling back to the baseline (issue 19, item 10). ``GET /models`` is what every OpenAI-compatible server
(vLLM, SGLang, Ollama, OpenAI itself) answers, and it costs no tokens.
"""

from __future__ import annotations

import openai

from conductor.service import StartupError


async def check_endpoint(
    *, name: str, model: str, base_url: str | None, api_key: str, timeout_s: float = 10.0
) -> None:
    """``StartupError`` naming the policy, the endpoint and what is wrong, unless ``model`` is among the models the
    endpoint lists. One try, no SDK retries: a start-up that waits minutes on a dead endpoint is a silent one."""
    client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=0)
    where = f"CONDUCTOR_POLICY={name}: the policy endpoint {client.base_url}"
    try:
        page = await client.models.list()
    except openai.APIStatusError as exc:
        hint = " (does CONDUCTOR_POLICY_BASE_URL end in /v1?)" if exc.status_code == 404 else ""
        raise StartupError(f"{where} answered GET models with HTTP {exc.status_code}{hint}") from None
    except openai.APIError as exc:  # refused, timed out, or a body that is not a model list
        raise StartupError(f"{where} is unreachable ({type(exc).__name__}: {exc})") from None
    finally:
        await client.close()
    served = [m.id for m in page.data]
    if model not in served:
        raise StartupError(f"{where} does not serve the model {model!r} (it serves {served})")

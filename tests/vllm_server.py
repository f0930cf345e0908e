"""The real vLLM server of the opt-in ``vllm`` tier: the one ``make test-vllm`` started (scripts/vllm/run.py), or
yours, named by ``CONDUCTOR_VLLM_URL``; the model is ``CONDUCTOR_VLLM_MODEL`` or else the first the server lists.
The ``vllm_server`` fixture (tests/conftest.py) hands it to the planner, worker-adapter and end-to-end tests."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass

import openai


@dataclass(frozen=True)
class VllmServer:
    url: str  # the /v1 base URL
    model: str  # the served model's name

    def context(self) -> int:
        """The served model's context length (``--max-model-len``, else the model config's), as vLLM lists it."""
        with urllib.request.urlopen(f"{self.url}/models", timeout=30) as resp:
            models = json.loads(resp.read())["data"]
        return next(int(m["max_model_len"]) for m in models if m["id"] == self.model)


def served(env: Mapping[str, str]) -> VllmServer | None:
    """The server ``env`` names, or None when it names none (the tier is then skipped)."""
    url = env.get("CONDUCTOR_VLLM_URL")
    if not url:
        return None
    if model := env.get("CONDUCTOR_VLLM_MODEL"):
        return VllmServer(url=url, model=model)
    client = openai.OpenAI(base_url=url, api_key="not-needed", max_retries=0)
    try:
        return VllmServer(url=url, model=client.models.list().data[0].id)
    finally:
        client.close()

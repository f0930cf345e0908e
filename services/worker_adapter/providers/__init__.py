"""One module per provider kind, all behind ``services.worker_adapter.provider.Provider``."""

from __future__ import annotations

from collections.abc import Mapping

from conductor.pool import Pool
from services.worker_adapter.provider import Provider


def build_providers(
    pool: Pool, keys: Mapping[str, str], *, local_threads: int = 0, replay_path: str = ""
) -> dict[str, Provider]:
    """Every provider kind, keyed as the pool file names them. Nothing connects or loads until its first call.

    The imports are here so that importing one provider (the learner imports ``sim``) does not import every SDK.
    """
    from services.worker_adapter.providers.anthropic import AnthropicProvider
    from services.worker_adapter.providers.local import LocalProvider
    from services.worker_adapter.providers.openai import OpenAIProvider
    from services.worker_adapter.providers.replay import ReplayProvider
    from services.worker_adapter.providers.sim import SimProvider

    compatible = OpenAIProvider(keys)
    return {
        "openai": compatible,
        "openai_compatible": compatible,
        "anthropic": AnthropicProvider(keys),
        "local": LocalProvider(pool, threads=local_threads),
        "sim": SimProvider(pool),
        "replay": ReplayProvider(pool, replay_path),
    }

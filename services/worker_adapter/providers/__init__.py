"""One module per provider kind, all behind ``services.worker_adapter.provider.Provider``; ``ADAPTERS`` makes each
kind of conductor/pool.py ``PROVIDER_KINDS`` (docs/providers.md: adding one)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from conductor.pool import PROVIDER_KINDS, Pool
from services.worker_adapter.provider import Provider


@dataclass
class Making:
    """What the adapters are made from: the pool, the API keys it names, the local threads, the replay tables. The
    OpenAI client is made once and shared by ``openai`` and ``openai_compatible`` (one wire format)."""

    pool: Pool
    keys: Mapping[str, str]
    local_threads: int = 0
    replay_path: str = ""
    _openai: Provider | None = field(default=None, repr=False)

    def openai(self) -> Provider:
        if self._openai is None:
            from services.worker_adapter.providers.openai import OpenAIProvider

            self._openai = OpenAIProvider(self.keys)
        return self._openai


# The imports are inside the makers so that importing one provider (the learner imports ``sim``) does not import
# every SDK.


def _anthropic(m: Making) -> Provider:
    from services.worker_adapter.providers.anthropic import AnthropicProvider

    return AnthropicProvider(m.keys)


def _local(m: Making) -> Provider:
    from services.worker_adapter.providers.local import LocalProvider

    return LocalProvider(m.pool, threads=m.local_threads)


def _sim(m: Making) -> Provider:
    from services.worker_adapter.providers.sim import SimProvider

    return SimProvider(m.pool)


def _replay(m: Making) -> Provider:
    from services.worker_adapter.providers.replay import ReplayProvider

    return ReplayProvider(m.pool, m.replay_path)


ADAPTERS: dict[str, Callable[[Making], Provider]] = {
    "openai": Making.openai,
    "openai_compatible": Making.openai,
    "anthropic": _anthropic,
    "local": _local,
    "sim": _sim,
    "replay": _replay,
}
"""The adapter of each provider kind, by the name a pool file gives it."""


def build_providers(
    pool: Pool, keys: Mapping[str, str], *, local_threads: int = 0, replay_path: str = ""
) -> dict[str, Provider]:
    """Every provider kind, keyed as the pool file names them. Nothing connects or loads until its first call."""
    making = Making(pool, keys, local_threads=local_threads, replay_path=replay_path)
    return {kind.name: ADAPTERS[kind.name](making) for kind in PROVIDER_KINDS}

"""Worker-adapter settings and API keys, read once at start-up (never at import time, never elsewhere)."""

from __future__ import annotations

import os
from collections.abc import Mapping

import msgspec

from conductor.pool import Pool, WorkerSpec
from conductor.settings import CommonSettings

DEFAULT_KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
"""The env var a hosted provider's key comes from when the pool file names none."""


class SharedSettings(msgspec.Struct, frozen=True, kw_only=True):
    """What replicas share through NATS KV: idempotent calls, the call cache, deployment-wide limits.

    On by default; it takes effect only where JetStream answers (otherwise a warning and per-process behaviour).
    """

    enabled: bool = True
    lease_s: float = 15.0  # call claims and slot holdings outlive a crashed replica by at most this
    calls_ttl_s: float = 24 * 3600.0  # how long a finished call can be replayed to a resumed task
    cache_ttl_s: float = 7 * 24 * 3600.0
    reserve_fraction: float = 0.05  # share of rpm/tpm a replica reserves per KV write


class WorkerAdapterSettings(msgspec.Struct, frozen=True, kw_only=True):
    common: CommonSettings
    shared: SharedSettings = SharedSettings()
    backoff_base_s: float = 0.5  # first retry waits about this long; doubles per attempt
    backoff_max_s: float = 20.0  # ceiling of the exponential backoff
    retry_after_cap_s: float = (
        60.0  # a provider's Retry-After is honoured up to this, so no call parks for hours
    )
    local_threads: int = 0  # torch intra-op threads for the local provider; 0 keeps torch's default

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> WorkerAdapterSettings:
        env = os.environ if env is None else env
        return cls(
            common=CommonSettings.from_env(env),
            backoff_base_s=float(env.get("CONDUCTOR_BACKOFF_BASE_S", "0.5")),
            backoff_max_s=float(env.get("CONDUCTOR_BACKOFF_MAX_S", "20")),
            retry_after_cap_s=float(env.get("CONDUCTOR_RETRY_AFTER_CAP_S", "60")),
            local_threads=int(env.get("CONDUCTOR_LOCAL_THREADS", "0")),
            shared=SharedSettings(
                enabled=env.get("CONDUCTOR_WORKER_SHARED", "1").lower() not in {"0", "false", "no"},
                lease_s=float(env.get("CONDUCTOR_CALL_LEASE_S", "15")),
                calls_ttl_s=float(env.get("CONDUCTOR_CALLS_TTL_S", "86400")),
                cache_ttl_s=float(env.get("CONDUCTOR_CACHE_TTL_S", "604800")),
                reserve_fraction=float(env.get("CONDUCTOR_RESERVE_FRACTION", "0.05")),
            ),
        )


def key_env(spec: WorkerSpec) -> str | None:
    """The env var holding this worker's key; ``None`` for providers that need none (sim, local, keyless vLLM)."""
    return spec.api_key_env or DEFAULT_KEY_ENV.get(spec.provider)


def api_keys(pool: Pool, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Values of exactly the env vars the pool names; kept out of Settings so no repr or log can leak them."""
    env = os.environ if env is None else env
    names = {name for w in pool.workers if (name := key_env(w)) is not None}
    return {name: env[name] for name in sorted(names) if env.get(name)}

"""Worker-adapter settings and API keys, read once at start-up (never at import time, never elsewhere)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Annotated

import msgspec

from conductor.pool import PROVIDER_KINDS, Pool, WorkerSpec
from conductor.settings import (
    CommonSettings,
    Env,
    Fraction,
    NonNegative,
    PositiveSeconds,
    Seconds,
    SettingsError,
    read,
)

DEFAULT_KEY_ENV = {kind.name: kind.key_env for kind in PROVIDER_KINDS if kind.key_env is not None}
"""The env var a hosted provider's key comes from when the pool file names none (conductor/pool.py
``PROVIDER_KINDS``)."""


class SharedSettings(msgspec.Struct, frozen=True, kw_only=True):
    """What replicas share through NATS KV: idempotent calls, the call cache, deployment-wide limits.

    On by default; it takes effect only where JetStream answers (otherwise a warning and per-process behaviour).
    """

    enabled: Annotated[
        bool,
        Env(
            "CONDUCTOR_WORKER_SHARED",
            "Share call records, the call cache and rate limits across replicas via KV.",
        ),
    ] = True
    lease_s: Annotated[
        PositiveSeconds,
        Env(
            "CONDUCTOR_CALL_LEASE_S",
            "Call claims and slot holdings outlive a crashed replica by at most this.",
        ),
    ] = 15.0
    calls_ttl_s: Annotated[
        PositiveSeconds,
        Env("CONDUCTOR_CALLS_TTL_S", "How long a finished durable call can be replayed to a resumed task."),
    ] = 24 * 3600.0
    cache_ttl_s: Annotated[
        PositiveSeconds, Env("CONDUCTOR_CACHE_TTL_S", "How long a worker-call cache entry lives.")
    ] = 7 * 24 * 3600.0
    reserve_fraction: Annotated[
        Fraction,
        Env("CONDUCTOR_RESERVE_FRACTION", "Share of a worker's rpm/tpm a replica reserves per KV write."),
    ] = 0.05


class WorkerAdapterSettings(msgspec.Struct, frozen=True, kw_only=True):
    common: CommonSettings
    shared: SharedSettings = SharedSettings()
    backoff_base_s: Annotated[
        Seconds,
        Env(
            "CONDUCTOR_RETRY_BACKOFF_BASE_S",
            "First wait before retrying a failed provider call; doubles per try.",
        ),
    ] = 0.5
    backoff_max_s: Annotated[
        Seconds, Env("CONDUCTOR_RETRY_BACKOFF_MAX_S", "Ceiling of the exponential provider-retry backoff.")
    ] = 20.0
    retry_after_cap_s: Annotated[
        Seconds,
        Env(
            "CONDUCTOR_RETRY_AFTER_CAP_S",
            "A provider's Retry-After is honoured up to this, so no call parks for hours.",
        ),
    ] = 60.0
    local_threads: Annotated[
        NonNegative,
        Env(
            "CONDUCTOR_LOCAL_THREADS",
            "torch intra-op threads for the `local` provider; 0 keeps torch's default.",
        ),
    ] = 0
    replay_path: Annotated[
        str,
        Env(
            "CONDUCTOR_REPLAY_PATH",
            "Replay tables for `replay` workers: files or folders, separated by ':'; empty: the shipped tables.",
        ),
    ] = ""
    allow_missing_keys: Annotated[
        bool,
        Env(
            "CONDUCTOR_ALLOW_MISSING_KEYS",
            "Start even when a worker's API-key variable is unset (that worker's calls then fail); off: start-up "
            "stops with an error naming the variables.",
        ),
    ] = False

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> WorkerAdapterSettings:
        return read(cls, env)


def key_env(spec: WorkerSpec) -> str | None:
    """The env var holding this worker's key; ``None`` for providers that need none (sim, local, keyless vLLM)."""
    return spec.api_key_env or DEFAULT_KEY_ENV.get(spec.provider)


def api_keys(pool: Pool, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Values of exactly the env vars the pool names; kept out of Settings so no repr or log can leak them."""
    env = os.environ if env is None else env
    names = {name for w in pool.workers if (name := key_env(w)) is not None}
    return {name: env[name] for name in sorted(names) if env.get(name)}


def missing_keys(pool: Pool, keys: Mapping[str, str]) -> dict[str, str]:
    """worker -> the unset variable its key should come from, for each worker that needs a key it does not have."""
    return {w.name: env for w in pool.workers if (env := key_env(w)) is not None and env not in keys}


def check_keys(pool: Pool, keys: Mapping[str, str], settings: WorkerAdapterSettings) -> None:
    """A worker without its key would fail every call: an error at start-up, unless it is allowed on purpose."""
    missing = missing_keys(pool, keys)
    if missing and not settings.allow_missing_keys:
        named = ", ".join(f"{worker!r} needs {env}" for worker, env in missing.items())
        raise SettingsError(
            f"API keys not set: {named}; set them, or CONDUCTOR_ALLOW_MISSING_KEYS=1 to start "
            "anyway (those workers' calls fail)"
        )

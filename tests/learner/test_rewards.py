"""The reward function TRL calls: masking, the recursion scale, the cost penalty, the storm guard."""

from __future__ import annotations

import math

import msgspec
import pytest

from conductor.reward import shape
from schemas.rollout import Rollout, RolloutResult
from schemas.usage import Usage
from schemas.verify import TextReference
from services.learner.config import ConfigError, parse_config
from services.learner.episodes import Episode
from services.learner.rewards import ConductorReward, MaskedStormError

CONFIG = parse_config('[model]\nsource = "tiny"\n[grpo]\nmax_masked_fraction = 0.5\n')
EP = Episode(
    question="What is 2+2?", reference=TextReference(answer="4", kind="math"), domain="math", pool=["a", "b"]
)


def column(ep: Episode) -> str:
    return msgspec.json.encode(ep).decode()


def scripted(rewards: list[float | None]):
    def score(rollouts: list[Rollout]) -> list[RolloutResult]:
        return [
            RolloutResult(id=r.id, reward=w, parsed=w != 0.0, usage=Usage(cost_usd=0.5))
            for r, w in zip(rollouts, rewards, strict=True)
        ]

    return score


def test_masked_rewards_stay_none_never_zero() -> None:
    reward = ConductorReward(scripted([1.0, None, 0.5, 0.0]), CONFIG)
    out = reward(prompts=[None] * 4, completions=["x"] * 4, episode=[column(EP)] * 4)
    assert out == [1.0, None, 0.5, 0.0]


def test_recursion_first_round_scale_and_cost_penalty() -> None:
    first = msgspec.structs.replace(EP, scale=0.25, recurse=True)
    assert shape(1.0, scale=first.scale).value == 0.25
    assert shape(0.5, scale=first.scale).value == 0.125
    assert shape(None, scale=first.scale).value is None
    penalised = shape(1.0, cost_usd=0.2, cost_weight=0.5).value
    assert math.isclose(penalised, 0.9)


def test_rollouts_carry_the_episode_and_conversational_completions_are_unwrapped() -> None:
    seen: list[Rollout] = []

    def score(rollouts: list[Rollout]) -> list[RolloutResult]:
        seen.extend(rollouts)
        return [RolloutResult(id=r.id, reward=1.0, parsed=True) for r in rollouts]

    ConductorReward(score, CONFIG)(
        prompts=[None], completions=[[{"role": "assistant", "content": "text"}]], episode=[column(EP)]
    )
    assert seen[0].completion == "text"
    asked = seen[0].request  # the solve it amounts to (schema 14), nothing of it at the top level
    assert asked is not None and isinstance(seen[0].pool, msgspec.UnsetType)
    assert asked.pool == ["a", "b"] and asked.reference == EP.reference and asked.max_steps == 5


def test_a_completion_scored_on_several_draws_gets_their_mean() -> None:
    config = parse_config(
        '[model]\nsource = "tiny"\n[data]\nfresh_draws = true\n[grpo]\ndraws = 3\ncost_weight = 0.1\n'
        'cost_form = "log"\ncost_floor_usd = 0.5\n'
    )
    seen: list[Rollout] = []
    script = scripted([1.0, 0.5, None, None, None, None])  # three draws of each of two completions

    def score(rollouts: list[Rollout]) -> list[RolloutResult]:
        seen.extend(rollouts)
        return script(rollouts)

    out = ConductorReward(score, config)(prompts=[None] * 2, completions=["a", "b"], episode=[column(EP)] * 2)
    assert out == [
        0.75,
        None,
    ]  # the masked draw left out; every draw masked: masked ($0.5 at the floor: free)
    assert [r.completion for r in seen] == ["a"] * 3 + ["b"] * 3 and len({r.id for r in seen}) == 6


def test_several_draws_need_a_pool_that_varies_per_rollout() -> None:
    with pytest.raises(ConfigError, match=r"grpo\.draws > 1"):
        parse_config('[model]\nsource = "tiny"\n[grpo]\ndraws = 4\n')


def test_a_verifier_storm_stops_the_step() -> None:
    reward = ConductorReward(scripted([None, None, None, 1.0]), CONFIG)
    with pytest.raises(MaskedStormError, match="3 of 4"):
        reward(prompts=[None] * 4, completions=["x"] * 4, episode=[column(EP)] * 4)


def test_trl_gives_a_masked_sample_no_advantage() -> None:
    """What the installed TRL does with None (GRPOTrainer._generate_and_score_completions, 1.16): NaN, left out of
    the group's mean and std, advantage 0. Reproduced here on TRL's own nan-aware helpers so an upgrade that
    changes it is caught by reading that code again (this test names it)."""
    torch = pytest.importorskip("torch")
    from trl.trainer.utils import nanstd

    rewards = torch.tensor([1.0, float("nan"), 0.5, 0.5])  # one group of G=4, one masked
    mean = torch.nanmean(rewards)
    advantages = torch.nan_to_num((rewards - mean) / (nanstd(rewards) + 1e-4), nan=0.0)
    assert math.isclose(mean.item(), 2 / 3, rel_tol=1e-6)  # the masked sample is not a zero in the baseline
    assert advantages[1].item() == 0.0
    import inspect

    from trl import GRPOTrainer

    source = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    assert "unscorable_mask" in source and "nan_to_num(advantages, nan=0.0)" in source

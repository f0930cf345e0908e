"""Expert iteration (services/learner/coldstart.py rejection_rows, ``[cold_start.rejection] select = "best"``):
each question's best sample by its mean reward over fresh draws, not every sample that was lucky once (issue 18,
cause 5)."""

from __future__ import annotations

import itertools

import msgspec
import pytest

from conductor.pool import load_pool
from schemas.rollout import RolloutResult
from schemas.usage import Usage
from schemas.verify import TextReference
from services.learner import coldstart, evaluate
from services.learner.config import ConfigError, parse_config
from services.learner.rewards import Scored
from services.learner.search import Tally
from tasks import sim
from tasks.problem import Problem

POOL = load_pool(sim.pool_path())
BASE = """
[model]
source = "tiny"
[data]
k_min = 5
shuffle_view = false
fresh_draws = true
[[data.tasks]]
name = "sim"
[cold_start.rejection]
questions = 3
samples = 3
"""
PROBLEMS = [
    Problem(id=f"p{i}", benchmark="sim", question=f"q{i}", reference=TextReference(answer="1"), domain="math")
    for i in range(3)
]
# Per sample text: the rewards its successive fresh draws return. "lucky" scores 1 on its first draw only;
# "steady" is right three times in four; "cheap" as steady at a tenth of the price; "bad" is never right.
DRAWS = {"lucky": [1.0, 0.5, 0.5, 0.5], "steady": [1.0, 1.0, 0.5, 1.0], "cheap": [1.0, 1.0, 0.5, 1.0]}
PRICE = {"lucky": 0.001, "steady": 0.001, "cheap": 0.0001, "bad": 0.001}


class FakeReward:
    """Scores a text on a question by its next scripted draw (what the pool's fresh draws do), with its price."""

    def __init__(self) -> None:
        self.draws: dict[tuple[str, str], itertools.cycle] = {}
        self.scored = 0

    def score(self, eps, texts, step: int = 0) -> list[Scored]:
        out = []
        for ep, text in zip(eps, texts, strict=True):
            draws = self.draws.setdefault((ep.question, text), itertools.cycle(DRAWS.get(text, [0.5])))
            r = next(draws)
            result = RolloutResult(id="r", reward=r, parsed=True, usage=Usage(cost_usd=PRICE[text]))
            out.append(
                Scored(episode=ep, completion=text, result=result, reward=r, step=0, policy_version="")
            )
        self.scored += len(out)
        return out


@pytest.fixture
def sampled(monkeypatch):
    """The policy samples, per question, "lucky", "steady" and "cheap" or "bad" (question 3 has no good sample)."""

    def generate(
        model, tokenizer, episodes, pool, config, *, samples, temperature=None, logits_processor=None
    ):
        assert temperature == config.cold_start.rejection.temperature
        per_question = [["lucky", "steady", "cheap"], ["lucky", "steady", "bad"], ["bad", "bad", "bad"]]
        eps = [ep for ep in episodes for _ in range(samples)]
        return eps, [t for texts in per_question[: len(episodes)] for t in texts]

    monkeypatch.setattr(evaluate, "generate", generate)


def _rows(extra: str) -> tuple[list[dict], dict, FakeReward]:
    config = parse_config(BASE + extra)
    reward = FakeReward()
    rows, stats = coldstart.rejection_rows(None, None, PROBLEMS, POOL, config, reward)
    return rows, stats, reward


def _texts(rows: list[dict]) -> list[str]:
    return [r["completion"][0]["content"] for r in rows]


def test_one_draw_keeps_whatever_was_lucky_once(sampled):
    rows, stats, reward = _rows("")
    assert sorted(_texts(rows)) == ["cheap", "lucky", "lucky", "steady", "steady"]
    assert stats["kept"] == 5 and reward.scored == 9 and stats["draws"] == 9


def test_expert_iteration_keeps_each_questions_best_mean_and_the_cheaper_of_equals(sampled):
    rows, stats, reward = _rows("select = 'best'\ndraws = 4\ntemperature = 1.0\ncost_weight = 60.0\n")
    # q0: steady and cheap both 0.875, cheap costs less; q1: steady; q2: nothing reaches 0.75 — no row.
    assert _texts(rows) == ["cheap", "steady"]
    assert stats["kept"] == 2 and stats["kept_mean_reward"] == pytest.approx(0.875)
    assert reward.scored == 9 * 4 and stats["questions"] == 3
    assert len({r["prompt"][-1]["content"] for r in rows}) == 2  # one row per question, on its own prompt


def test_a_masked_draw_is_left_out_of_the_mean_not_zeroed():
    tallies = [Tally(), Tally(), Tally()]
    tallies[0].add(1.0, 0.001)  # one unmasked draw of four, right
    for r in (1.0, 1.0, 0.5, 1.0):
        tallies[1].add(r, 0.001)
    assert coldstart._best_per_question(tallies, 3, 0.0, 0.75) == [0]
    assert coldstart._best_per_question([Tally()] * 3, 3, 0.0, 0.0) == []  # every draw masked: no row


def test_repeated_draws_need_a_pool_that_draws_afresh():
    with pytest.raises(ConfigError, match="fresh_draws"):
        parse_config(BASE.replace("fresh_draws = true", "fresh_draws = false") + "draws = 4\n")
    assert msgspec.structs.asdict(parse_config(BASE).cold_start.rejection)["draws"] == 1


def test_stages_are_measured_at_the_temperature_the_card_serves(monkeypatch):
    """GRPO explores at 1.0; a policy served at 0.5 is measured at 0.5 (parse rate and held-out alike)."""
    seen = []

    def generate(
        model, tokenizer, episodes, pool, config, *, samples=1, temperature=None, logits_processor=None
    ):
        seen.append(temperature)
        return [], []

    monkeypatch.setattr(evaluate, "generate", generate)
    hot = parse_config(BASE + "[grpo]\ntemperature = 1.0\n[output]\nserve_temperature = 0.5\n")
    assert hot.serve_temperature == 0.5 and parse_config(BASE).serve_temperature == 1.0
    evaluate.parse_rate(None, None, [], POOL, hot)
    evaluate.held_out_reward(None, None, [], POOL, hot, FakeReward())  # type: ignore[arg-type]
    assert seen == [0.5, 0.5]

"""Recursion training (docs/method.md §5, "credit assignment"): slots, the 0.25 first-round scale, the hand-off."""

from __future__ import annotations

import itertools

import pytest

from conductor.pool import load_pool
from schemas.rollout import RolloutResult
from services.learner.config import parse_config
from services.learner.episodes import first_round, from_column
from services.learner.recursion import RecursionBuffer
from services.learner.rewards import Scored
from services.learner.stream import EpisodeStream, problems, shares
from tasks import sim

CONFIG = parse_config(
    '[model]\nsource = "tiny"\n[data]\nfew_shot = false\n[[data.tasks]]\nname = "sim"\ndomains = ["math", "mcq"]\n'
    '[grpo]\nquestions_per_step = 4\ngenerations = 2\nscale_rewards = "batch"\n'
    "[recursion]\nfraction = 0.5\nfirst_round_scale = 0.25\n"
)


@pytest.fixture(scope="module")
def pool():
    return load_pool(sim.pool_path())


def scored(ep, results):
    return [
        Scored(episode=ep, completion=f"c{i}", result=r, reward=r.reward, step=0, policy_version="v")
        for i, r in enumerate(results)
    ]


def test_half_of_each_step_recurses_with_the_first_round_scaled(pool) -> None:
    buffer = RecursionBuffer()
    stream = EpisodeStream(shares(CONFIG, "train"), pool, CONFIG, buffer)
    step = list(itertools.islice(stream.episodes(), CONFIG.prompts_per_step))
    assert CONFIG.prompts_per_step == 6 and CONFIG.step_batch == 12
    assert [(e.round, e.recurse, e.scale) for e in step[:4]] == [(0, True, 0.25)] * 2 + [(0, False, 1.0)] * 2
    assert all(e.round == 0 and e.scale == 1.0 for e in step[4:])  # the buffer is empty in the first step


def test_an_answered_first_round_becomes_a_second_round_prompt(pool) -> None:
    buffer = RecursionBuffer(seed=1)
    ep = first_round(problems(CONFIG, "train")[0], ["sim-math", "sim-small"], scale=0.25, recurse=True)
    buffer.observe(
        scored(
            ep,
            [RolloutResult(id="a", reward=0.0), RolloutResult(id="b", reward=0.5, parsed=True, answer="42")],
        )
    )
    second = buffer.pop()
    assert second is not None and buffer.pop() is None
    assert (second.round, second.scale, second.recurse, second.pool) == (1, 1.0, False, ep.pool)
    assert second.previous[0].completion == "c1" and second.previous[0].final_response == "42"
    stream = EpisodeStream(shares(CONFIG, "train"), pool, CONFIG, buffer)
    buffer.observe(scored(ep, [RolloutResult(id="b", reward=1.0, parsed=True, answer="7")]))
    rows = list(itertools.islice(stream.rows(), CONFIG.prompts_per_step))
    fifth = from_column(rows[4]["episode"])
    assert fifth.round == 1 and "Result of the coordination strategy" in rows[4]["prompt"][-1]["content"]


def test_nothing_is_handed_off_when_no_completion_produced_an_answer(pool) -> None:
    buffer = RecursionBuffer()
    ep = first_round(problems(CONFIG, "train")[0], ["sim-math"], scale=0.25, recurse=True)
    buffer.observe(
        scored(ep, [RolloutResult(id="a", reward=0.0), RolloutResult(id="b", reward=None, parsed=True)])
    )
    plain = first_round(problems(CONFIG, "train")[1], ["sim-math"])
    buffer.observe(scored(plain, [RolloutResult(id="c", reward=1.0, parsed=True, answer="1")]))
    assert len(buffer) == 0


@pytest.mark.nats
def test_second_rounds_score_through_the_real_executor(nats_url: str, subject_prefix: str) -> None:
    """A first round, then its forced second round, over the rollout subject: a hand-back keeps the first answer's
    reward; a new workflow is run and verified again."""
    import random

    from conductor.app.training import local_rollouts
    from services.learner import synthetic
    from services.learner.bridge import LoopThread
    from services.learner.episodes import next_round
    from services.learner.evaluate import fixed_episodes
    from services.learner.rewards import ConductorReward

    cfg = parse_config('[model]\nsource = "tiny"\n[[data.tasks]]\nname = "sim"\ndomains = ["math", "mcq"]\n')
    pool = load_pool(sim.pool_path())
    eps = fixed_episodes(problems(cfg, "train")[:8], pool, cfg, "recursion-test")
    rng = random.Random(0)
    with LoopThread() as loop, local_rollouts(loop, cfg, nats_url=nats_url, prefix=subject_prefix) as score:
        reward = ConductorReward(score, cfg)
        firsts = reward.score(eps, [synthetic.first_round(rng, len(e.pool), e.domain) for e in eps])
        seconds = [next_round(s.episode, s.completion, s.result.answer or "") for s in firsts]
        texts = ["The result stands.\nmodel_id = []\nsubtasks = []\naccess_list = []"] * 4 + [
            synthetic.second_round(random.Random(1), len(e.pool), e.domain) for e in seconds[4:]
        ]
        scored = reward.score(seconds, texts)
    assert all(s.result.parsed for s in scored)
    for first, second in zip(firsts[:4], scored[:4], strict=True):
        assert second.result.handback and second.result.reward == first.result.reward
    assert all(s.result.reward in (0.5, 1.0) for s in scored)

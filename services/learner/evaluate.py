"""Measuring the policy: the parse rate of its completions, and its reward on held-out questions over the rollout path.

Both sample with ``policy.sample`` at the temperature the policy will be served at (``config.serve_temperature``:
the card's), on pool views drawn with a fixed seed, so "before" and "after" figures of one run see the same
questions and views, sampled as users will sample them. The held-out reward goes through the same rollout
subject as training (executor → workers → verifier): what is measured is what would be served.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from conductor.pool import Pool
from conductor.workflow import WorkflowFormatError, parse_completion
from services.learner.config import LearnerConfig
from services.learner.episodes import Episode, first_round, messages, sample_view, view_workers
from services.learner.policy import sample
from services.learner.rewards import ConductorReward
from services.learner.telemetry import by_domain, routing, specialists, summarize
from tasks.problem import Problem


def fixed_episodes(
    problems: Sequence[Problem], pool: Pool, config: LearnerConfig, seed: str
) -> list[Episode]:
    """One first-round episode per problem with a seeded view: the same set for every measurement of a run."""
    rng = random.Random(f"{seed}:{config.data.seed}")
    workers = view_workers(pool, config.data)
    return [first_round(p, sample_view(workers, rng, config.data)) for p in problems]


def parses(text: str, episode: Episode, max_steps: int) -> bool:
    """Whether ``text`` is a valid workflow for ``episode`` (the one parser, conductor.workflow)."""
    try:
        parse_completion(
            text, n_workers=len(episode.pool), max_steps=max_steps, allow_empty=episode.round > 0
        )
    except WorkflowFormatError:
        return False
    return True


def generate(
    model: Any,
    tokenizer: Any,
    episodes: Sequence[Episode],
    pool: Pool,
    config: LearnerConfig,
    *,
    samples: int = 1,
    temperature: float | None = None,
    logits_processor: Any = None,
) -> tuple[list[Episode], list[str]]:
    """``samples`` completions per episode, as parallel lists, at ``temperature`` (None: ``grpo.temperature``)."""
    import torch

    torch.manual_seed(config.data.seed)  # the same draws for "before" and "after" measurements of one run
    repeated = [ep for ep in episodes for _ in range(samples)]
    prompts = [messages(ep, pool, config.data) for ep in repeated]
    texts = sample(
        model,
        tokenizer,
        prompts,
        temperature=config.grpo.temperature if temperature is None else temperature,
        max_new_tokens=config.grpo.max_completion_tokens,
        logits_processor=logits_processor,
    )
    return repeated, texts


def _as_served(model, tokenizer, episodes, pool, config, *, samples=1, logits_processor=None):
    """``generate`` at the temperature the policy's card serves it at: what every stage measurement samples."""
    return generate(
        model,
        tokenizer,
        episodes,
        pool,
        config,
        samples=samples,
        temperature=config.serve_temperature,
        logits_processor=logits_processor,
    )


def parse_rate(
    model: Any,
    tokenizer: Any,
    episodes: Sequence[Episode],
    pool: Pool,
    config: LearnerConfig,
    logits_processor: Any = None,
) -> float:
    eps, texts = _as_served(model, tokenizer, episodes, pool, config, logits_processor=logits_processor)
    return sum(parses(t, e, config.data.max_steps) for t, e in zip(texts, eps, strict=True)) / max(
        1, len(eps)
    )


def held_out_reward(
    model: Any,
    tokenizer: Any,
    episodes: Sequence[Episode],
    pool: Pool,
    config: LearnerConfig,
    reward: ConductorReward,
) -> dict[str, Any]:
    """Reward, parse rate and routing on held-out questions: ``data.eval_samples`` completions each, scored over NATS.
    Rewards are the paper's 1/0.5/0 (masked ones left out), without the training-time cost penalty or scale."""
    eps, texts = _as_served(model, tokenizer, episodes, pool, config, samples=config.data.eval_samples)
    scored = reward.score(eps, texts)
    return {
        **summarize(scored),
        "by_domain": by_domain(scored),
        "parse_rate": _parse_rate(scored),
        **routing(scored, specialists(pool)),
    }


def _parse_rate(scored: list[Any]) -> float:
    return sum(s.result.parsed for s in scored) / max(1, len(scored))

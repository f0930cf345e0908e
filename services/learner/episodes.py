"""Training episodes: a question, the pool view it is planned for, and the prompt the policy sees — pure.

The prompt comes from ``conductor.prompt`` (the planner's builder, the one source of the prompt), so the policy is
trained on exactly what it is served. Each question gets its own view of the pool (docs/method.md §6): a random
k-subset of the deployment's workers, renumbered 0..k-1 — optionally in random order so an ordinal carries no fixed
meaning. ``Episode.pool`` holds the names in the order shown; it travels as ``Rollout.request.pool`` so the executor maps
ordinal ``i`` back to ``pool[i]``.

An episode is also one row of the TRL dataset (``row``): the ``prompt`` column is the conversation, every other
column reaches the reward function as a keyword argument (TRL's public seam), so the reward function rebuilds the
``Rollout`` from the row alone.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import msgspec

from conductor.pool import Pool, WorkerSpec
from conductor.prompt import policy_messages
from schemas.plan import PriorRound, StepAnswer
from schemas.verify import Reference
from services.learner.config import ConfigError, DataSection
from tasks.problem import Problem


class Episode(msgspec.Struct, frozen=True, kw_only=True):
    """One prompt to sample a group of completions for. ``scale`` multiplies the reward (recursion training's
    first-round factor, docs/method.md §5); ``recurse`` marks a first round whose result feeds a forced second."""

    question: str
    reference: Reference
    domain: str
    pool: list[str]
    round: int = 0
    previous: list[PriorRound] = []
    scale: float = 1.0
    recurse: bool = False


def view_workers(pool: Pool, data: DataSection) -> list[WorkerSpec]:
    """The deployment workers views are drawn from (``data.workers``, else the whole pool); checks that every
    named view (``data.views``) is made of them."""
    workers = pool.subset(list(data.workers) or None)
    names = {w.name for w in workers}
    for view in data.views:
        if unknown := sorted(set(view) - names):
            raise ConfigError(f"data.views: {unknown} are not workers of this pool ({sorted(names)})")
    return workers


def sample_view(workers: Sequence[WorkerSpec], rng: random.Random, data: DataSection) -> list[str]:
    """A random k-subset (k uniform in [k_min, min(k_max, n)]), shuffled when ``data.shuffle_view``; names. A
    ``data.full_view_fraction`` of views are the whole pool in pool order instead, and a ``data.views_fraction``
    one of ``data.views``, uniformly."""
    n = len(workers)
    u = rng.random() if data.full_view_fraction or data.views_fraction else 1.0
    if u < data.full_view_fraction:
        return [w.name for w in workers]
    if u < data.full_view_fraction + data.views_fraction:
        return list(rng.choice(data.views))
    k = rng.randint(min(data.k_min, n), min(data.k_max, n))
    if data.shuffle_view:
        chosen = rng.sample(list(workers), k)
    else:
        keep = sorted(rng.sample(range(n), k))
        chosen = [workers[i] for i in keep]
    return [w.name for w in chosen]


def first_round(problem: Problem, view: list[str], *, scale: float = 1.0, recurse: bool = False) -> Episode:
    return Episode(
        question=problem.question,
        reference=problem.reference,
        domain=problem.domain,
        pool=view,
        scale=scale,
        recurse=recurse,
    )


def next_round(
    episode: Episode, completion: str, final_response: str, answers: Sequence[StepAnswer] = ()
) -> Episode:
    """The forced recursive call after ``episode``: it sees its completion, the response it produced and each of its
    steps' final answers (``tasks.finals.step_answers`` of the rollout's steps, as the executor shows them)."""
    prior = PriorRound(completion=completion, final_response=final_response, answers=list(answers))
    return msgspec.structs.replace(
        episode,
        round=episode.round + 1,
        previous=[*episode.previous, prior],
        scale=1.0,
        recurse=False,
    )


def messages(episode: Episode, pool: Pool, data: DataSection) -> list[dict[str, str]]:
    """The conversation the policy sees, as TRL's conversational format (role/content dicts)."""
    cards = pool.cards(pool.subset(episode.pool))
    domain = episode.domain if data.show_domain else None
    built = policy_messages(
        episode.question,
        cards,
        episode.previous,
        max_steps=data.max_steps,
        domain=domain,
        style=data.prompt_style,
        response_chars=data.response_chars,
    )
    return [{"role": m.role, "content": m.content} for m in built]


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Episode)


def row(episode: Episode, pool: Pool, data: DataSection) -> dict[str, Any]:
    """A dataset row: the prompt, and the episode as one JSON column for the reward function."""
    return {"prompt": messages(episode, pool, data), "episode": _encoder.encode(episode).decode()}


def from_column(value: str) -> Episode:
    return _decoder.decode(value)

"""Pool views (docs/method.md §6) and the prompt: a random k-subset, renumbered, built by conductor/prompt.py."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from conductor.pool import load_pool
from conductor.prompt import conductor_messages
from services.learner.config import parse_config
from services.learner.episodes import first_round, messages, sample_view, view_workers
from services.learner.stream import problems
from tasks import sim


@pytest.fixture(scope="module")
def pool():
    return load_pool(sim.pool_path())


def config(data: str):
    return parse_config(f'[model]\nsource = "tiny"\n[data]\n{data}\n')


def test_views_are_random_k_subsets_in_random_order(pool) -> None:
    cfg = config("k_min = 2\nk_max = 4")
    rng = random.Random(0)
    views = [sample_view(view_workers(pool, cfg.data), rng, cfg.data) for _ in range(400)]
    assert {len(v) for v in views} == {2, 3, 4}
    assert all(len(set(v)) == len(v) and set(v) <= set(pool.names()) for v in views)
    firsts = Counter(v[0] for v in views)
    assert len(firsts) == 5 and min(firsts.values()) > 40  # any worker can be Model 0


def test_a_fixed_view_keeps_pool_order(pool) -> None:
    cfg = config('workers = ["sim-knowledge", "sim-math"]\nk_min = 2\nk_max = 2\nshuffle_view = false')
    view = sample_view(view_workers(pool, cfg.data), random.Random(1), cfg.data)
    assert view == ["sim-knowledge", "sim-math"]


def test_the_prompt_is_the_planners_for_the_renumbered_view(pool) -> None:
    cfg = config("few_shot = true")
    problem = problems(cfg, "train")[0]
    ep = first_round(problem, ["sim-small", "sim-math"])
    built = messages(ep, pool, cfg.data)
    expected = conductor_messages(
        problem.question, pool.cards(pool.subset(ep.pool)), max_steps=5, domain="math"
    )
    assert built == [{"role": m.role, "content": m.content} for m in expected]
    assert (
        "Model 0: Small fast model" in built[1]["content"] and "Model 1: Open-weight" in built[1]["content"]
    )
    assert "sim-small" not in built[1]["content"]  # names hidden (docs/method.md §1)


def test_without_rules_only_the_task_turn_remains(pool) -> None:
    cfg = config("few_shot = false\nrules = false")
    ep = first_round(problems(cfg, "train")[0], ["sim-math"])
    assert [m["role"] for m in messages(ep, pool, cfg.data)] == ["user"]


def test_a_share_of_views_is_the_whole_pool_in_pool_order(pool) -> None:
    cfg = config("k_min = 2\nk_max = 3\nshuffle_view = false\nfull_view_fraction = 0.25")
    rng = random.Random(3)
    views = [sample_view(view_workers(pool, cfg.data), rng, cfg.data) for _ in range(800)]
    full = [v for v in views if len(v) == 5]
    assert all(v == pool.names() for v in full)
    assert 0.2 < len(full) / len(views) < 0.3
    assert {len(v) for v in views} == {2, 3, 5}


def test_an_adapter_start_needs_a_pretrained_base() -> None:
    from services.learner.config import ConfigError

    with pytest.raises(ConfigError, match=r"model\.adapter"):
        parse_config('[model]\nsource = "tiny"\nadapter = "x"\n')

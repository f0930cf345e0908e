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


def test_a_share_of_views_is_drawn_from_the_named_views(pool) -> None:
    named = '[["sim-frontier", "sim-coder", "sim-small"], ["sim-small", "sim-frontier"]]'
    cfg = config(
        f"k_min = 3\nk_max = 3\nshuffle_view = false\nfull_view_fraction = 0.25\n"
        f"views_fraction = 0.5\nviews = {named}"
    )
    rng = random.Random(5)
    views = [tuple(sample_view(view_workers(pool, cfg.data), rng, cfg.data)) for _ in range(2000)]
    counts = Counter(views)
    full, a, b = (
        tuple(pool.names()),
        ("sim-frontier", "sim-coder", "sim-small"),
        ("sim-small", "sim-frontier"),
    )
    assert 0.21 < counts[full] / len(views) < 0.29
    assert 0.21 < counts[b] / len(views) < 0.29  # the order given is the order shown
    # the named three-view is also one of the ten random 3-subsets: 25% named + 25% / 10 drawn
    assert 0.24 < counts[a] / len(views) < 0.31
    assert {len(v) for v in views} == {2, 3, 5}


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ("views_fraction = 0.3", r"needs data\.views"),
        ('full_view_fraction = 0.6\nviews_fraction = 0.5\nviews = [["sim-small"]]', "exceed 1"),
        ('views = [["sim-small", "sim-small"]]', "each once"),
        ("views = [[]]", "one or more workers"),
        ('workers = ["sim-small", "sim-math"]\nviews = [["sim-frontier"]]', r"not in data\.workers"),
    ],
)
def test_named_views_are_checked(data: str, match: str) -> None:
    from services.learner.config import ConfigError

    with pytest.raises(ConfigError, match=match):
        config(data)


def test_a_named_view_outside_the_pool_is_a_config_error(pool) -> None:
    from services.learner.config import ConfigError

    cfg = config('views = [["sim-frontier", "gpt-9"]]\nviews_fraction = 0.5')
    with pytest.raises(ConfigError, match=r"\['gpt-9'\] are not workers of this pool"):
        view_workers(pool, cfg.data)


def test_an_adapter_start_needs_a_pretrained_base() -> None:
    from services.learner.config import ConfigError

    with pytest.raises(ConfigError, match=r"model\.adapter"):
        parse_config('[model]\nsource = "tiny"\nadapter = "x"\n')

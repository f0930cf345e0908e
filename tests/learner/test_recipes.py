"""Recipes (services/learner/recipes.py): a base config and stage overlays, chained through run directories."""

from __future__ import annotations

from pathlib import Path

import pytest

from conductor.policies import REGISTRY
from services.learner import recipes
from services.learner.recipes import RecipeError, load_recipe, merge

RECIPE = """
name = "chain"
policy = ""

[base]
name = "ignored"
[base.model]
source = "smollm2"
path = "runs/models/smollm2"
[base.data]
eval_questions = 8
[[base.data.tasks]]
name = "sim"
[base.grpo]
steps = 0
[base.output]
adapter_rank = 8
adapter_base = "runs/models/smollm2"

[[stage]]
name = "first"
[stage.data]
eval_questions = 4

[[stage]]
name = "second"
[stage.grpo]
steps = 2
[stage.output]
adapter_rank = 0

[[stage]]
name = "third"
"""


def _write(tmp_path: Path, text: str = RECIPE) -> Path:
    path = tmp_path / "chain.toml"
    path.write_text(text)
    return path


def test_merge_merges_tables_and_replaces_everything_else() -> None:
    base = {"a": {"x": 1, "y": [1, 2]}, "b": 1, "t": [{"n": 1}]}
    got = merge(base, {"a": {"y": [3]}, "t": [{"n": 2}, {"n": 3}]})
    assert got == {"a": {"x": 1, "y": [3]}, "b": 1, "t": [{"n": 2}, {"n": 3}]}
    assert base["a"] == {"x": 1, "y": [1, 2]}  # not mutated


def test_stages_chain_through_their_run_directories(tmp_path: Path) -> None:
    recipe = load_recipe(str(_write(tmp_path)), runs=tmp_path / "runs")
    first, second, third = recipe.stages
    assert [s.config.name for s in recipe.stages] == ["chain-first", "chain-second", "chain-third"]
    assert first.out == tmp_path / "runs" / "chain" / "1-first"
    assert first.config.output.dir == str(first.out)
    assert first.config.model.adapter == "" and first.config.data.eval_questions == 4
    # the second starts from the first's exported adapter; base keys the first overrode come back
    assert second.config.model.adapter == str(first.out / "adapter")
    assert second.config.data.eval_questions == 8 and second.config.grpo.steps == 2
    # the second exports no adapter: the third starts from its merged policy
    assert third.config.model.source == "path" and third.config.model.path == str(second.out / "policy")
    assert third.config.model.adapter == ""
    assert recipe.stage("third") == 2
    with pytest.raises(RecipeError, match="no stage 'fourth'"):
        recipe.stage("fourth")


def test_an_overlay_that_names_its_start_keeps_it(tmp_path: Path) -> None:
    text = RECIPE.replace(
        '[[stage]]\nname = "third"', '[[stage]]\nname = "third"\n[stage.model]\nadapter = "x"'
    )
    third = load_recipe(str(_write(tmp_path, text)), runs=tmp_path).stages[2]
    assert third.config.model.adapter == "x" and third.config.model.source == "smollm2"


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda t: t.replace(
                '[[stage]]\nname = "first"', '[[stage]]\nname = "first"\n[stage.output]\ndir = "x"'
            ),
            "output.dir is the recipe's to set",
        ),
        (lambda t: t.replace('name = "chain"', 'name = "chain"\ncolour = "red"'), "unknown top-level keys"),
        (
            lambda t: t.replace("[stage.data]\neval_questions = 4", "[stage.data]\neval_questions = -4"),
            r"stage first: .*eval_questions",
        ),
        (lambda t: t.replace('[[stage]]\nname = "third"\n', "[[stage]]\n"), "stage 3 needs a name"),
        (lambda t: t.split("[[stage]]")[0], r"needs a \[base\] table and at least one \[\[stage\]\]"),
    ],
)
def test_a_bad_recipe_is_one_clear_error(tmp_path: Path, edit, message: str) -> None:
    with pytest.raises(RecipeError, match=message):
        load_recipe(str(_write(tmp_path, edit(RECIPE))), runs=tmp_path)


def test_an_unknown_recipe_names_the_known_ones() -> None:
    with pytest.raises(RecipeError, match=r"no recipe 'nope'; the recipes are \["):
        load_recipe("nope")


def test_every_registered_policy_names_a_recipe_that_loads() -> None:
    """One command reproduces each shipped policy: its registry entry names a recipe whose last stage is it."""
    for policy in REGISTRY.values():
        recipe = load_recipe(policy.recipe)
        assert recipe.policy == policy.name, policy.name
        last = recipe.stages[-1].config
        assert last.output.adapter_rank, f"{policy.name}: the last stage must export an adapter"
        assert recipes.PRESETS / f"{policy.recipe}.toml" == recipes.find(policy.recipe)


def test_a_two_stage_recipe_runs_chained_and_resumes_past_its_finished_stages(tmp_path: Path) -> None:
    """The tiny model end to end (rewards in process, bench/fakes.py): the second stage trains from the first's
    policy, and once both are written a resumed recipe has nothing left to run."""
    from bench.fakes import SkillScorer
    from services.learner import pipeline
    from services.learner.stream import load_run_pool

    text = """
name = "tiny-chain"
[base.model]
source = "tiny"
threads = 1
[base.data]
workers = ["sim-math", "sim-knowledge"]
k_min = 2
k_max = 2
few_shot = false
rules = false
eval_questions = 4
eval_samples = 1
[[base.data.tasks]]
name = "sim"
domains = ["math", "mcq"]
[base.cold_start]
parse_probe = 4
[base.cold_start.synthetic]
examples = 32
topologies = ["single"]
[base.grpo]
steps = 1
questions_per_step = 2
generations = 2
max_completion_tokens = 48
[[stage]]
name = "first"
[[stage]]
name = "second"
[stage.cold_start.synthetic]
examples = 16
"""
    recipe = load_recipe(str(_write(tmp_path, text)), runs=tmp_path / "runs")
    first, second = recipe.stages
    assert second.config.model.source == "path" and second.config.model.path == str(first.out / "policy")
    assert not first.finished and not second.finished
    for stage in recipe.stages:
        done = pipeline.run(stage.config, SkillScorer(load_run_pool(stage.config)))
        assert stage.finished, stage.name
    assert "grpo" in done
    assert all(s.finished for s in load_recipe(str(tmp_path / "chain.toml"), runs=tmp_path / "runs").stages)
    with pytest.raises(RecipeError, match="stage first leaves nothing for stage second to start from"):
        load_recipe(str(_write(tmp_path, text.replace("steps = 1\n", "steps = 0\n", 1))), runs=tmp_path)

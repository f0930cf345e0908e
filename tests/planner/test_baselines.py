"""Baseline planners: their workflows, caps, worker choice, spec grammar and hand-back."""

from __future__ import annotations

import pytest

from conductor.workflow import parse_completion
from services.planner.baselines import (
    AGGREGATE,
    REVISE,
    VOTE,
    BaselineError,
    BaselineSpec,
    handback,
    parse_baseline,
    plan_baseline,
)


def plan(spec: str, n_workers: int = 4, max_steps: int = 5):
    return plan_baseline(parse_baseline(spec), n_workers=n_workers, max_steps=max_steps)


def test_single_defaults_to_the_first_worker_and_takes_an_index() -> None:
    assert plan("single").workflow.model_id == [0]
    assert plan("single:2").workflow.model_id == [2]
    assert plan("single@3").workflow.access_list == [[]]


def test_moa_proposers_then_aggregator_capped_by_max_steps() -> None:
    w = plan("moa", n_workers=7).workflow  # the paper's 7-model pool: 4 proposers fit under 5 steps
    assert w.model_id == [0, 1, 2, 3, 0]
    assert w.access_list == [[], [], [], [], "all"]
    assert w.subtasks[-1] == AGGREGATE
    assert plan("moa", n_workers=2).workflow.model_id == [0, 1, 0, 1, 0]  # 7 proposers cycling, capped at 4
    with pytest.raises(BaselineError):
        plan("moa:3@2", n_workers=2)  # aggregator outside the pool
    assert plan("moa:4@1", n_workers=2).workflow.model_id == [0, 1, 0, 1, 1]  # proposers cycle
    assert plan("moa", n_workers=4, max_steps=1).workflow.model_id == [0]  # degenerates to single


def test_refine_counts_steps_and_revises_with_history() -> None:
    w = plan("refine:3@1").workflow
    assert w.model_id == [1, 1, 1]
    assert w.access_list == [[], "all", "all"]
    assert w.subtasks[1:] == [REVISE, REVISE]
    assert len(plan("refine").workflow) == 5
    assert len(plan("refine:9", max_steps=4).workflow) == 4


def test_consensus_samples_then_the_same_worker_votes() -> None:
    w = plan("consensus:3@2").workflow
    assert w.model_id == [2, 2, 2, 2]
    assert w.access_list == [[], [], [], "all"]
    assert w.subtasks[-1] == VOTE
    assert len(plan("consensus").workflow) == 5  # 5 samples (docs/method.md §7) capped to 4 + the vote


@pytest.mark.parametrize("spec", ["single", "moa", "moa:2@1", "refine:2", "consensus:2@3"])
def test_rendered_completion_parses_back_to_the_workflow(spec: str) -> None:
    p = plan(spec)
    parsed = parse_completion(p.completion, n_workers=4)
    assert parsed.workflow == p.workflow
    assert parsed.reasoning == p.reasoning
    assert p.reasoning.startswith(f"Baseline {parse_baseline(spec).name}:")


@pytest.mark.parametrize(
    "spec", ["", "mixture", "moa:", "single:1@2", "refine:0", "moa:x", "consensus:5@", "moa; rm"]
)
def test_bad_specs_are_rejected(spec: str) -> None:
    with pytest.raises(BaselineError):
        parse_baseline(spec)


def test_canonical_names() -> None:
    assert parse_baseline("single").name == "single:0"
    assert parse_baseline(" moa ").name == "moa"
    assert parse_baseline("consensus:5@1") == BaselineSpec(kind="consensus", count=5, worker=1)
    assert parse_baseline("consensus:5@1").name == "consensus:5@1"


def test_worker_outside_the_pool_is_an_error() -> None:
    with pytest.raises(BaselineError, match="outside the pool"):
        plan("single:4", n_workers=4)


def test_handback_is_three_empty_lists_that_parse() -> None:
    p = handback("moa")
    assert len(p.workflow) == 0
    assert len(parse_completion(p.completion, n_workers=1, allow_empty=True).workflow) == 0


def test_a_remembered_plan_is_never_shared():
    """Plans are built once per (spec, pool size, step cap); each caller still gets lists of its own."""
    first = plan_baseline(parse_baseline("moa:2"), n_workers=3, max_steps=4)
    first.workflow.model_id.append(9)
    first.workflow.access_list[-1] = [0]
    again = plan_baseline(parse_baseline("moa:2"), n_workers=3, max_steps=4)
    assert again.workflow.model_id == [0, 1, 0] and again.workflow.access_list[-1] == "all"
    assert again.completion == first.completion

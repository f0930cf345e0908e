"""Strategy specs -> the SolveRequest shapes the planner's baselines and policies understand."""

from __future__ import annotations

import pytest

from evaluation.errors import UnknownStrategyError
from evaluation.strategies import Strategy, parse_strategies

POOL = ["sim-frontier", "sim-math", "sim-knowledge", "sim-coder", "sim-small"]


def test_every_kind() -> None:
    got = parse_strategies("conductor,moa,refine:5,consensus:5,worker:sim-math,conductor+r1", POOL)
    assert got == [
        Strategy(label="conductor", policy=None),
        Strategy(label="moa", policy="moa:7", max_steps=8),  # the paper's 8 calls
        Strategy(label="refine:5", policy="refine:5@0", max_steps=5),
        Strategy(label="consensus:5", policy="consensus:5@0", max_steps=6),  # 5 samples + the vote
        Strategy(label="worker:sim-math", policy="worker:sim-math"),
        Strategy(label="conductor+r1", policy=None, max_rounds=1),
    ]


def test_single_workers_by_name_and_all_of_them() -> None:
    labels = [s.label for s in parse_strategies("single:*", POOL)]
    assert labels == [f"single:{n}" for n in POOL]
    assert parse_strategies("single:sim-coder", POOL)[0].policy == "single:3"
    assert parse_strategies("single:sim-coder", ["sim-math", "sim-coder"])[0].policy == "single:1"  # a subset


def test_workers_named_with_at_and_duplicates_dropped() -> None:
    [s] = parse_strategies(["refine:3@sim-math", "refine:3@sim-math"], POOL)
    assert s == Strategy(label="refine:3@sim-math", policy="refine:3@1", max_steps=3)
    assert parse_strategies("moa:4+r1", POOL) == [
        Strategy(label="moa:4+r1", policy="moa:4", max_steps=5, max_rounds=1)
    ]


@pytest.mark.parametrize(
    "spec, message",
    [
        ("magic", "unknown strategy 'magic'"),
        ("single:gpt-9", "worker 'gpt-9' is not in the run's pool"),
        ("single", "needs a worker"),
        ("moa:0", "whole number 1-9"),
        ("conductor:3", "malformed"),
        ("", "no strategy given"),
    ],
)
def test_bad_specs_are_named(spec: str, message: str) -> None:
    with pytest.raises(UnknownStrategyError, match=message):
        parse_strategies(spec, POOL)

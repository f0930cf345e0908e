"""The training reward from a verdict, as the paper defines it (docs/method.md §3), with infrastructure errors masked.

Shared by the executor (every solve with a reference carries its reward) and the learner (GRPO rollouts).

0 when the Conductor's three lists could not be parsed, 1 when the final answer is correct, 0.5 when the workflow
parsed but the answer is wrong. ``None`` means "no reward": the verifier failed, and a masked sample teaches the
policy nothing instead of teaching it a wrong zero. The optional cost penalty is our addition and off by default.
"""

from __future__ import annotations

from schemas.verify import Outcome, Verdict

UNPARSEABLE = 0.0  # paper: the three lists cannot be parsed
CORRECT = 1.0  # paper: the final answer is correct
WRONG = 0.5  # paper: parsed but wrong


def reward(
    parsed: bool, verdict: Verdict | None, cost: float = 0.0, cost_weight: float = 0.0
) -> float | None:
    """``parsed`` is whether the workflow parsed; ``verdict`` is None only when there was nothing to verify."""
    if not parsed:
        return UNPARSEABLE
    if verdict is None or verdict.outcome is Outcome.ERROR:
        return None
    base = CORRECT if verdict.outcome is Outcome.CORRECT else WRONG
    return base - cost_weight * cost


def pass_fraction(verdict: Verdict) -> float | None:
    """Per-test pass fraction for analysis (never used as reward: partial credit would pay for hard-coded samples)."""
    if verdict.passed is None or not verdict.total:
        return None
    return verdict.passed / verdict.total

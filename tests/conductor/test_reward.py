"""docs/method.md §3 reward, whole (conductor/reward.py): 0 unparseable, 1 correct, 0.5 wrong; a policy that wrote
nothing and infrastructure errors are masked (None); the learner's cost term and recursion scale; each with its
reason."""

from __future__ import annotations

from conductor.reward import judge, pass_fraction, policy_parsed, shape
from schemas.errors import ErrorCode, ErrorInfo
from schemas.solve import RoundRecord
from schemas.verify import Outcome, Verdict

BUDGET = ErrorInfo(code=ErrorCode.BUDGET_EXCEEDED, message="budget exceeded: calls")


def verdict(outcome: Outcome, passed: int | None = None, total: int | None = None) -> Verdict:
    error = ErrorInfo(code=ErrorCode.VERIFIER_ERROR, message="x") if outcome is Outcome.ERROR else None
    return Verdict(id="1", outcome=outcome, reason="", passed=passed, total=total, error=error)


def test_reward_table() -> None:
    assert judge(False, verdict(Outcome.CORRECT)).value == 0.0
    assert judge(False, None, BUDGET).value == 0.0  # unparseable whatever else happened
    assert judge(True, verdict(Outcome.CORRECT)).value == 1.0
    assert judge(True, verdict(Outcome.INCORRECT)).value == 0.5
    assert judge(True, verdict(Outcome.ERROR)).value is None
    assert judge(True, None).value is None
    assert judge(None, verdict(Outcome.CORRECT)).value is None  # the policy wrote nothing: nothing to judge
    masked = judge(True, verdict(Outcome.CORRECT), BUDGET)
    assert masked.value is None and "budget_exceeded" in masked.reason


def test_every_reward_says_why() -> None:
    assert judge(False, None).reason.startswith("unparseable")
    assert judge(True, verdict(Outcome.CORRECT)).reason == "correct"
    assert judge(True, verdict(Outcome.INCORRECT)).reason.startswith("wrong")
    assert judge(True, verdict(Outcome.ERROR)).reason.startswith("masked")


def test_the_learners_cost_term_and_recursion_scale() -> None:
    assert shape(1.0, cost_usd=2.0, cost_weight=0.1).value == 0.8
    assert shape(0.5, scale=0.25).value == 0.125
    assert shape(None, cost_usd=1.0, cost_weight=1.0).value is None
    assert shape(1.0, cost_usd=0.002, cost_weight=60.0, scale=0.25).reason == "0.25 x (1 - 60 x $0.0020)"


def test_policy_parsed_reads_the_rounds() -> None:
    ok = RoundRecord(round=0, policy="local:p")
    bad = RoundRecord(
        round=0, policy="local:p", error=ErrorInfo(code=ErrorCode.FORMAT_ERROR, message="lists")
    )
    rescued = RoundRecord(round=0, policy="moa", fallback_used=True, planner_attempts=3)
    silent = RoundRecord(round=0, policy="moa", fallback_used=True, planner_attempts=0)
    assert policy_parsed([ok]) is True
    assert policy_parsed([ok, bad]) is False
    assert (
        policy_parsed([rescued]) is False
    )  # every sample failed to parse: the fallback does not earn it a reward
    assert policy_parsed([silent]) is None


def test_pass_fraction_is_for_analysis_only() -> None:
    assert pass_fraction(verdict(Outcome.INCORRECT, 3, 4)) == 0.75
    assert pass_fraction(verdict(Outcome.CORRECT)) is None
    assert judge(True, verdict(Outcome.INCORRECT, 3, 4)).value == 0.5  # no partial credit

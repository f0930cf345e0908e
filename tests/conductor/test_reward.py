"""docs/method.md §3 reward, whole (conductor/reward.py): 0 unparseable, 1 correct, 0.5 wrong; a policy that wrote
nothing and infrastructure errors are masked (None); the learner's cost term and recursion scale; each with its
reason."""

from __future__ import annotations

import math

import pytest

from conductor.reward import cost_term, judge, pass_fraction, policy_parsed, shape
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


def test_the_log_cost_term_prices_spend_relative_to_a_floor() -> None:
    assert math.isclose(
        shape(1.0, cost_usd=1e-3, cost_weight=0.1, cost_form="log").value, 1 - 0.1 * math.log(100)
    )
    assert (
        shape(1.0, cost_usd=0.0, cost_weight=0.1, cost_form="log").value == 1.0
    )  # at or below the floor: free
    assert (
        shape(1.0, cost_usd=1e-3, cost_weight=0.1, cost_form="log").reason
        == "1 - 0.1 x ln($0.0010 / $0.000010)"
    )
    with pytest.raises(ValueError, match="cost form 'square'"):
        cost_term(1.0, 1.0, "square")


# Measured on the sim pool (docs/history/issue-18.md): (accuracy, $ a question) of the chains a Conductor
# chooses between.
FULL = {"alone": (0.880, 0.00016), "x2": (0.936, 0.00038), "x3": (0.959, 0.00066)}  # the domain's specialist
NO_SPECIALIST = {"alone": (0.70, 0.0018), "x2": (0.80, 0.0040), "x3": (0.844, 0.0064)}  # the frontier model


def _best(chains: dict[str, tuple[float, float]], weight: float, form: str) -> str:
    def value(acc: float, cost: float) -> float:  # the expected shaped reward: 1 right, 0.5 wrong
        return shape(acc + 0.5 * (1 - acc), cost_usd=cost, cost_weight=weight, cost_form=form).value or 0.0

    return max(chains, key=lambda name: value(*chains[name]))


def test_no_linear_weight_prefers_what_the_targets_need_and_a_log_weight_does() -> None:
    """The issue's targets want the specialist checking once on the full pool (the third call is not worth its
    price there) and the frontier model checking twice where no specialist is (it is): under a linear term every
    weight picks at most one of the two; under the log term a band of weights picks both."""
    wanted = ("x2", "x3")
    for weight in [w / 2 for w in range(0, 200)]:
        assert (_best(FULL, weight, "linear"), _best(NO_SPECIALIST, weight, "linear")) != wanted
    for weight in (0.022, 0.026, 0.030):
        assert (_best(FULL, weight, "log"), _best(NO_SPECIALIST, weight, "log")) == wanted


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

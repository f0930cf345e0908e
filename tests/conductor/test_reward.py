"""docs/method.md §3 reward: 0 unparseable, 1 correct, 0.5 wrong; infrastructure errors are masked (None)."""

from __future__ import annotations

from conductor.reward import pass_fraction, reward
from schemas.errors import ErrorCode, ErrorInfo
from schemas.verify import Outcome, Verdict


def verdict(outcome: Outcome, passed: int | None = None, total: int | None = None) -> Verdict:
    error = ErrorInfo(code=ErrorCode.VERIFIER_ERROR, message="x") if outcome is Outcome.ERROR else None
    return Verdict(id="1", outcome=outcome, reason="", passed=passed, total=total, error=error)


def test_reward_table() -> None:
    assert reward(False, verdict(Outcome.CORRECT)) == 0.0
    assert reward(False, None) == 0.0
    assert reward(True, verdict(Outcome.CORRECT)) == 1.0
    assert reward(True, verdict(Outcome.INCORRECT)) == 0.5
    assert reward(True, verdict(Outcome.ERROR)) is None
    assert reward(True, None) is None
    assert reward(True, verdict(Outcome.CORRECT), cost=2.0, cost_weight=0.1) == 0.8


def test_pass_fraction_is_for_analysis_only() -> None:
    assert pass_fraction(verdict(Outcome.INCORRECT, 3, 4)) == 0.75
    assert pass_fraction(verdict(Outcome.CORRECT)) is None
    assert reward(True, verdict(Outcome.INCORRECT, 3, 4)) == 0.5  # no partial credit

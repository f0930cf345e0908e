"""The training reward, whole and in one place (docs/method.md §3): what the executor attaches to every judged
solve and rollout, and what the learner hands to GRPO.

``judge`` is the paper's reward with our masking: 0 when the Conductor's three lists could not be parsed, 1 when the
final answer is correct, 0.5 when the workflow parsed but the answer is wrong, and ``None`` — "no reward" — when
nothing of the policy's was judged (a fallback wrote the workflow because the policy's backend never answered) or an
infrastructure fault (a worker failing after its retries, the budget, a deadline, the verifier) stopped the workflow
or its verification: a masked sample teaches the policy nothing instead of a wrong zero. ``policy_parsed`` says
from a task's rounds whether the policy's own completions parsed. ``shape`` applies what the learner adds: the
optional cost penalty (our addition, off by default; linear or relative, ``COST_FORMS``) and a recursion round's
scale (docs/method.md §5). Each returns the reward with its reason, for logs and reports.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from conductor.money import usd
from schemas.errors import ErrorCode, ErrorInfo
from schemas.solve import RoundRecord
from schemas.verify import Outcome, Verdict

UNPARSEABLE = 0.0  # paper: the three lists cannot be parsed
CORRECT = 1.0  # paper: the final answer is correct
WRONG = 0.5  # paper: parsed but wrong


@dataclass(frozen=True, slots=True)
class Reward:
    """``value`` is None when the sample is masked; ``reason`` says which rule decided it."""

    value: float | None
    reason: str


def judge(parsed: bool | None, verdict: Verdict | None, error: ErrorInfo | None = None) -> Reward:
    """``parsed``: whether the policy's own completions parsed (None: it wrote nothing to judge, see
    ``policy_parsed``); ``verdict``: the verifier's, None when there was nothing to verify or it was not reached;
    ``error``: what stopped the workflow or its verification, if anything."""
    if parsed is False:
        return Reward(UNPARSEABLE, "unparseable: the policy's lists did not parse")  # whatever else happened
    if parsed is None:
        return Reward(None, "masked: a fallback stood in for a policy that wrote nothing")
    if error is not None:
        return Reward(None, f"masked: {error.code}: {error.message}"[:300])
    if verdict is None:
        return Reward(None, "masked: nothing was verified")
    if verdict.outcome is Outcome.ERROR:
        return Reward(None, f"masked: the verifier could not judge: {verdict.reason}"[:300])
    if verdict.outcome is Outcome.CORRECT:
        return Reward(CORRECT, "correct")
    return Reward(WRONG, "wrong: parsed, answer not correct")


def policy_parsed(rounds: Sequence[RoundRecord]) -> bool | None:
    """Whether the policy's own completions parsed, which is what the reward judges (docs/method.md §3).

    False when a round's did not: a format error, or a fallback baseline that stood in after every sample the
    policy drew had failed to parse (``fallback_used`` with ``planner_attempts`` > 0: had one sample parsed, the
    planner would have used it). None when a fallback stood in for a policy that wrote nothing at all (its backend
    failed before the first sample): there is no completion of the policy's to judge. True otherwise, including a
    workflow that parsed on a resample and a baseline asked for by name (it is judged as the policy)."""
    judged: bool | None = True
    for r in rounds:
        if (r.error is not None and r.error.code == ErrorCode.FORMAT_ERROR) or (
            r.fallback_used and r.planner_attempts > 0
        ):
            return False
        if r.fallback_used:
            judged = None
    return judged


COST_FORMS = ("linear", "log")
"""How $ enters a shaped reward: ``linear`` (weight x $) or ``log`` (weight x ln($ / floor), the floor the price of a
call too cheap to tell apart from free). A linear term prices a dollar the same on every pool; on the sim pool no
weight then prefers both a specialist checking once on the full pool (its third call: +0.0115 reward for
+$0.00028, worth it below 41/$) and the frontier model checking twice on a pool without a specialist (+0.0225 for
+$0.0024, worth it below 9.4/$). A log term prices spend relative to what the view already costs: weights between
0.021 and 0.032 prefer both (docs/history/issue-18.md)."""


def cost_term(cost_usd: float, weight: float, form: str = "linear", floor_usd: float = 1e-5) -> float:
    """What ``shape`` subtracts for ``cost_usd`` spent (``COST_FORMS``)."""
    if form == "linear":
        return weight * cost_usd
    if form == "log":
        return weight * math.log(max(cost_usd, floor_usd) / floor_usd)
    raise ValueError(f"cost form {form!r}: expected one of {', '.join(COST_FORMS)}")


def shape(
    value: float | None,
    *,
    cost_usd: float = 0.0,
    cost_weight: float = 0.0,
    cost_form: str = "linear",
    cost_floor_usd: float = 1e-5,
    scale: float = 1.0,
) -> Reward:
    """The learner's reward from a judged one: minus the cost term (``cost_term``: ``cost_weight`` x $, or x ln($ /
    ``cost_floor_usd``)), times the round's ``scale``; a masked reward stays masked (never turned into a number
    here)."""
    if value is None:
        return Reward(None, "masked")
    shaped = scale * (value - cost_term(cost_usd, cost_weight, cost_form, cost_floor_usd))
    parts = [f"{value:g}"]
    if cost_weight and cost_form == "log":
        parts.append(f"- {cost_weight:g} x ln({usd(cost_usd)} / {usd(cost_floor_usd)})")
    elif cost_weight:
        parts.append(f"- {cost_weight:g} x {usd(cost_usd)}")
    if scale != 1.0:
        parts = [f"{scale:g} x ({' '.join(parts)})"]
    return Reward(shaped, " ".join(parts))


def pass_fraction(verdict: Verdict) -> float | None:
    """Per-test pass fraction for analysis (never used as reward: partial credit would pay for hard-coded samples)."""
    if verdict.passed is None or not verdict.total:
        return None
    return verdict.passed / verdict.total

"""The learner's Prometheus series (conductor/metrics.py) from what the pipeline reports: a stage's step and total,
GRPO's logged reward, a measured stage's held-out summary, and scored rollouts by outcome."""

from __future__ import annotations

from conductor import metrics
from schemas.errors import ErrorCode, ErrorInfo
from schemas.rollout import RolloutResult


def _value(name: str, **labels: str) -> float | None:
    return metrics.REGISTRY.get_sample_value(name, labels)


def test_progress_sets_step_total_and_rewards_per_run_and_stage():
    metrics.learner_progress("m-run", "grpo", 3, 10, {"reward": 0.625, "loss": 0.1})
    metrics.learner_progress(
        "m-run", "sft", 7, 8, {"reward": 0.9}
    )  # a supervised stage's "reward" is no GRPO's
    metrics.learner_progress(
        "m-run", "after_grpo", 1, 1, {"parse_rate": 0.5, "held_out": {"reward_mean": 0.75}}
    )
    assert _value("conductor_learner_step", run="m-run", stage="grpo") == 3
    assert _value("conductor_learner_steps", run="m-run", stage="grpo") == 10
    assert _value("conductor_learner_step", run="m-run", stage="sft") == 7
    assert _value("conductor_learner_reward", run="m-run") == 0.625
    assert _value("conductor_learner_held_out_reward", run="m-run", stage="after_grpo") == 0.75
    metrics.learner_progress(
        "m-run", "grpo", 4, 10, {"loss": 0.1}
    )  # a step logged without a reward keeps the last
    assert _value("conductor_learner_step", run="m-run", stage="grpo") == 4
    assert _value("conductor_learner_reward", run="m-run") == 0.625


def test_a_held_out_summary_without_a_reward_sets_nothing():
    metrics.learner_progress("m-none", "base", 1, 1, {"held_out": {"reward_mean": None}})
    metrics.learner_progress("m-none", "sft", 1, 1, {"held_out": 0.5})  # not the summary's shape
    assert _value("conductor_learner_held_out_reward", run="m-none", stage="base") is None
    assert _value("conductor_learner_held_out_reward", run="m-none", stage="sft") is None


def test_rollouts_count_by_outcome():
    results = [
        RolloutResult(id="a", parsed=True, reward=1.0),
        RolloutResult(id="b", parsed=True, reward=0.0),
        RolloutResult(id="c", parsed=False, reward=0.0),
        RolloutResult(
            id="d", parsed=True, reward=None, error=ErrorInfo(code=ErrorCode.UNAVAILABLE, message="x")
        ),
    ]
    metrics.learner_rollouts("m-roll", results)
    assert _value("conductor_learner_rollouts_total", run="m-roll", outcome="rewarded") == 2
    assert _value("conductor_learner_rollouts_total", run="m-roll", outcome="unparsed") == 1
    assert _value("conductor_learner_rollouts_total", run="m-roll", outcome="masked") == 1


def test_jobs_count_by_outcome():
    before = _value("conductor_learner_jobs_total", outcome="internal") or 0.0
    metrics.learner_job_finished(ErrorInfo(code=ErrorCode.INTERNAL, message="boom"))
    metrics.learner_job_finished(None)
    assert _value("conductor_learner_jobs_total", outcome="internal") == before + 1
    assert (_value("conductor_learner_jobs_total", outcome="ok") or 0) >= 1

"""Per-step training metrics as JSON lines, through TRL's public seams (a ``TrainerCallback`` and the reward function).

One line per optimizer step in ``<run>/metrics.jsonl``: the reward function's view of the step's rollouts (reward
mean/std over scored samples, masked count, parse-failure rate, steps per workflow, worker-selection histogram,
tokens and $ per rollout, handbacks), TRL's own logs of that step (loss, grad norm, learning rate, completion
lengths, clip ratios), and the step's wall time split three ways:

* generation: from the step's start to the first reward call (TRL samples, then scores);
* rollout: inside the reward function (NATS round trips: workers, verification);
* update: the rest of the step (log-probs, loss, backward, optimizer).

The split comes from timestamps at the seams, not from TRL's profiler (which only reports to experiment trackers).
"""

from __future__ import annotations

import json
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any

from conductor.pool import Pool
from services.learner.rewards import Scored


def summarize(scored: list[Scored]) -> dict[str, Any]:
    """The rollout metrics of a set of scored completions (a step, or an evaluation)."""
    n = len(scored)
    rewards = [s.reward for s in scored if s.reward is not None]
    raw = [s.result.reward for s in scored if s.result.reward is not None]
    workflows = [s.result for s in scored if s.result.parsed and not s.result.handback]
    workers = Counter(step.worker for r in workflows for step in r.steps)
    return {
        "rollouts": n,
        "reward_mean": statistics.fmean(rewards) if rewards else None,
        "reward_std": statistics.pstdev(rewards) if len(rewards) > 1 else 0.0,
        "raw_reward_mean": statistics.fmean(raw) if raw else None,
        "correct_rate": sum(r == 1.0 for r in raw) / len(raw) if raw else None,
        "masked": n - len(rewards),
        "parse_failure_rate": sum(not s.result.parsed for s in scored) / n if n else None,
        "handback_rate": sum(s.result.handback for s in scored) / n if n else None,
        "steps_per_workflow": statistics.fmean(len(r.steps) for r in workflows) if workflows else None,
        "workers": dict(sorted(workers.items())),
        "tokens_per_rollout": sum(s.result.usage.total_tokens for s in scored) / n if n else None,
        "usd_per_rollout": sum(s.result.usage.cost_usd for s in scored) / n if n else None,
        "second_rounds": sum(s.episode.round > 0 for s in scored),
    }


def specialists(pool: Pool) -> dict[str, str]:
    """Per domain, the sim worker most likely to answer alone (routing figures; empty for a pool without sim)."""
    best: dict[str, tuple[float, str]] = {}
    for w in pool.workers:
        for domain, p in w.sim.skill.items() if w.sim is not None else ():
            if p > best.get(domain, (-1.0, ""))[0]:
                best[domain] = (p, w.name)
    return {d: name for d, (_, name) in best.items()}


def routing(scored: list[Scored], experts: dict[str, str]) -> dict[str, Any]:
    """Per domain, of the parsed workflows on views that show the domain's specialist: the share naming it at any
    step and at the first; and the topology histogram (each workflow's access pattern, e.g. ``[] all``)."""
    share: dict[str, dict[str, float]] = {}
    for domain, name in experts.items():
        mine = [
            s.result
            for s in scored
            if s.episode.domain == domain and name in s.episode.pool and s.result.parsed and s.result.steps
        ]
        if mine:
            share[domain] = {
                "any_step": sum(any(st.worker == name for st in r.steps) for r in mine) / len(mine),
                "first_step": sum(r.steps[0].worker == name for r in mine) / len(mine),
            }
    shapes = Counter(
        " ".join("all" if st.access == "all" else str(st.access) for st in s.result.steps)
        for s in scored
        if s.result.parsed and s.result.steps
    )
    return {"specialist_share": share, "topologies": dict(shapes.most_common())}


def by_domain(scored: list[Scored]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for domain in sorted({s.episode.domain for s in scored}):
        rewards = [
            s.result.reward for s in scored if s.episode.domain == domain and s.result.reward is not None
        ]
        out[domain] = statistics.fmean(rewards) if rewards else None
    return out


def metrics_callback(path: Path, stage: str = "grpo"):
    """A ``transformers.TrainerCallback`` writing one JSON line per step; its ``observe`` is a reward observer.

    TRL logs a step's metrics after ``on_step_end`` (the Trainer calls ``on_log`` afterwards), so a step's line is
    completed by the logs that follow it and written when the next step begins or training ends."""
    from transformers import TrainerCallback

    class StepMetrics(TrainerCallback):
        def __init__(self) -> None:
            self.path = path
            self.pending: dict[str, Any] | None = None
            self._reset()

        def _reset(self) -> None:
            self.scored: list[Scored] = []
            self.t_start = time.perf_counter()
            self.t_rollout = 0.0
            self.t_first: float | None = None
            self.t_last: float | None = None

        def observe(self, scored: list[Scored], started: float, ended: float) -> None:
            self.scored.extend(scored)
            self.t_rollout += ended - started
            self.t_first = started if self.t_first is None else self.t_first
            self.t_last = ended

        def flush(self) -> None:
            if self.pending is not None:
                write_line(self.path, self.pending)
                self.pending = None

        def on_step_begin(self, args, state, control, **kwargs):
            self.flush()
            self._reset()

        def on_step_end(self, args, state, control, **kwargs):
            end = time.perf_counter()
            self.pending = {
                "stage": stage,
                "step": state.global_step,
                "time": time.time(),
                **summarize(self.scored),
                "generation_s": (self.t_first or end) - self.t_start,
                "rollout_s": self.t_rollout,
                "update_s": end - (self.t_last or end),
                "step_s": end - self.t_start,
                "trl": {},
            }

        def on_log(self, args, state, control, logs=None, **kwargs):
            if self.pending is not None:
                self.pending["trl"].update(
                    {k: v for k, v in (logs or {}).items() if isinstance(v, int | float)}
                )

        def on_train_end(self, args, state, control, **kwargs):
            self.flush()

    return StepMetrics()


def write_line(path: Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(record, default=str) + "\n")


def read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def rollout_log(path: Path):
    """A reward observer keeping every rollout (prompt inputs, completion, reward, policy version) for replay."""

    def observe(scored: list[Scored], *_: float) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as f:
            for s in scored:
                r = s.result
                record = {
                    "step": s.step,
                    "policy_version": s.policy_version,
                    "question": s.episode.question,
                    "domain": s.episode.domain,
                    "pool": s.episode.pool,
                    "round": s.episode.round,
                    "completion": s.completion,
                    "reward": s.reward,
                    "executor_reward": r.reward,
                    "parsed": r.parsed,
                    "parse_error": r.parse_error.message if r.parse_error else None,
                    "error": r.error.message if r.error else None,
                    "answer": r.answer,
                    "workers": [step.worker for step in r.steps],
                    "usd": r.usage.cost_usd,
                }
                f.write(json.dumps(record) + "\n")

    return observe

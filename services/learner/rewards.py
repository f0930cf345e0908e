"""The GRPO reward: TRL calls this with a batch of completions; the executors score them over NATS.

TRL's public seam (``GRPOTrainer(reward_funcs=[...])``): a synchronous callable receiving ``prompts``,
``completions`` and every extra dataset column as keyword arguments, returning one ``float | None`` per completion.
The only extra column is ``episode`` (services/learner/episodes.py), from which the ``Rollout`` is rebuilt.

Masking (docs/method.md §3, "Masked rewards"): a rollout the executor could not score (``reward=None``: the verifier
failed, a worker or budget error stopped the workflow) is returned as ``None``. TRL (1.16, ``GRPOTrainer.
_calculate_rewards`` / ``_generate_and_score_completions``) turns ``None`` into NaN; a row where *every* reward
function is NaN is "unscorable": it is left out of its group's mean and std (nanmean/nanstd) and its advantage is
forced to 0, so it moves the policy by nothing. That holds only because this is the *one* reward function — with a
second function TRL's nansum would turn the missing reward into that function's value — so the optional cost penalty
lives inside this function, never as a second one. With ``beta > 0`` the masked row still feels the KL term (a
regulariser, not a learning signal), and its tokens still count in the loss normaliser of ``dapo``.

A step with more masked rollouts than ``grpo.max_masked_fraction`` stops the run (``MaskedStormError``): a verifier
error storm should page someone, not quietly shrink the batch.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from conductor.reward import shape
from schemas.errors import ErrorCode, ErrorInfo
from schemas.rollout import Rollout, RolloutResult
from schemas.solve import Budget, SolveRequest
from services.learner.config import LearnerConfig
from services.learner.episodes import Episode, from_column
from services.learner.rollouts import RolloutError


class MaskedStormError(RolloutError):
    """Too many rollouts of one step could not be scored (a verifier or worker error storm)."""


class Scored(msgspec.Struct, frozen=True, kw_only=True):
    """One completion with its episode, the executor's result and the reward handed to TRL."""

    episode: Episode
    completion: str
    result: RolloutResult
    reward: float | None
    step: int
    policy_version: str


Observer = Callable[[list[Scored], float, float], None]
"""Told every scored batch with the ``time.perf_counter()`` span its scoring took (metrics, recursion, the log)."""
Scorer = Callable[[list[Rollout]], list[RolloutResult]]
"""Synchronous rollout scoring (``LoopThread.run(client.score(...))`` in a run; a plain function in tests)."""


def completion_text(completion: Any) -> str:
    """TRL passes a conversational completion as ``[{"role": "assistant", "content": ...}]``, else a string."""
    if isinstance(completion, list):
        return "".join(str(m.get("content", "")) for m in completion)
    return str(completion)


class ConductorReward:
    """The reward function object; its ``__name__`` is the metric name TRL logs under (``rewards/conductor``)."""

    __name__ = "conductor"

    def __init__(self, score: Scorer, config: LearnerConfig, observers: Sequence[Observer] = ()) -> None:
        self._score = score
        self._config = config
        self._observers = list(observers)
        self._calls = itertools.count()

    def add_observer(self, observer: Observer) -> None:
        self._observers.append(observer)

    def __call__(
        self,
        prompts: list[Any],
        completions: list[Any],
        episode: list[str],
        trainer_state: Any = None,
        **_: Any,
    ) -> list[float | None]:
        step = int(getattr(trainer_state, "global_step", 0) or 0)
        started = time.perf_counter()
        k = self._config.grpo.draws
        eps, texts = [from_column(e) for e in episode], [completion_text(c) for c in completions]
        draws = self.score([e for e in eps for _ in range(k)], [t for t in texts for _ in range(k)], step)
        scored = [averaged(draws[i : i + k]) for i in range(0, len(draws), k)]
        ended = time.perf_counter()
        for observe in self._observers:
            observe(scored, started, ended)
        rewards = [s.reward for s in scored]
        _check_storm(rewards, self._config.grpo.max_masked_fraction)
        return rewards

    def score(self, episodes: list[Episode], texts: list[str], step: int = 0) -> list[Scored]:
        """Score completions over the rollout path and shape their rewards (no observers: evaluation uses this)."""
        version = f"{self._config.name}@{step}"
        call = next(self._calls)
        rollouts = [
            self.rollout(f"{version}/{call}/{i}", ep, text, version)
            for i, (ep, text) in enumerate(zip(episodes, texts, strict=True))
        ]
        results = self._score(rollouts)
        g = self._config.grpo
        return [
            Scored(
                episode=ep,
                completion=t,
                result=r,
                step=step,
                policy_version=version,
                reward=shape(
                    r.reward,
                    cost_usd=r.usage.cost_usd,
                    cost_weight=g.cost_weight,
                    cost_form=g.cost_form,
                    cost_floor_usd=g.cost_floor_usd,
                    scale=ep.scale,
                ).value,
            )
            for ep, t, r in zip(episodes, texts, results, strict=True)
        ]

    def rollout(self, rid: str, ep: Episode, completion: str, version: str) -> Rollout:
        ro = self._config.rollout
        request = SolveRequest(
            question=ep.question,
            pool=list(ep.pool),
            max_steps=self._config.data.max_steps,
            domain=ep.domain,
            reference=ep.reference,
            budget=Budget(max_cost_usd=ro.max_cost_usd) if ro.max_cost_usd else None,
            cache=ro.cache,
            progress=False,
        )
        return Rollout(
            id=rid,
            completion=completion,
            request=request,
            round=ep.round,
            previous=ep.previous,
            policy_version=version,
        )


def averaged(draws: Sequence[Scored]) -> Scored:
    """One completion's draws as one sample (config ``grpo.draws``): the mean of its shaped rewards, masked draws
    left out (masked when every draw is); its result is the first scored draw's, which observers (the rollout log,
    recursion hand-offs) see with the mean reward."""
    if len(draws) == 1:
        return draws[0]
    kept = [d.reward for d in draws if d.reward is not None]
    first = next((d for d in draws if d.reward is not None), draws[0])
    return msgspec.structs.replace(first, reward=sum(kept) / len(kept) if kept else None)


def _check_storm(rewards: list[float | None], limit: float) -> None:
    masked = sum(r is None for r in rewards)
    if rewards and masked / len(rewards) > limit:
        raise MaskedStormError(
            ErrorInfo(
                code=ErrorCode.VERIFIER_ERROR,
                message=f"{masked} of {len(rewards)} rollouts could not be scored (limit {limit:.0%}); stopping "
                "so the run can resume once the verifiers or workers recover",
            )
        )

"""Recursion training (docs/method.md §5, "Recursion training: credit assignment"): which first rounds get a forced
second round, and how a scored first round becomes a second-round episode.

The paper: a forced recursive call for half of each batch, first-round rewards x 0.25, rewards normalised across
rounds. Ours, within TRL's public seams (a dataset stream and a reward function):

* Per step, ``round(fraction x questions_per_step)`` of the first-round questions are *recursion* questions: their
  group of G first-round completions is rewarded ``first_round_scale x`` its own reward (0.25 x 1/0.5/0).
* After that group is scored, ONE of its completions that produced an answer (uniformly among them) is handed to
  a second round: the episode's ``previous`` holds that completion and its final response (the first rollout's
  answer), and the second-round prompt comes from ``conductor.prompt.recursion_messages``. The second round's G
  completions get the full reward of the *final* answer (after a new workflow, or the first answer if handed back).
* The second round is sampled in a later step (the stream reads this buffer; the data loader may already hold the
  next batch, so up to two steps later): its context was written by a slightly older policy, which is fine because
  the context is prompt, not a gradient target. Only the second-round tokens are trained with the final reward.
* "Normalised across rounds": advantages are divided by the standard deviation over the whole step, both rounds
  together (TRL ``scale_rewards = "batch"``), so the 0.25 survives; a per-group std would cancel it exactly
  (``config.check`` refuses that combination).
"""

from __future__ import annotations

import random
import threading
from collections import deque

from services.learner.episodes import Episode, next_round
from services.learner.rewards import Scored
from tasks.finals import step_answers


class RecursionBuffer:
    """Second-round episodes waiting to be sampled; filled by the reward function, drained by the stream
    (two threads at most: the trainer's and a data-loader's)."""

    def __init__(self, *, seed: int = 0, capacity: int = 1024) -> None:
        self._ready: deque[Episode] = deque(maxlen=capacity)
        self._lock = threading.Lock()
        self._rng = random.Random(seed)

    def __len__(self) -> int:
        with self._lock:
            return len(self._ready)

    def pop(self) -> Episode | None:
        with self._lock:
            return self._ready.popleft() if self._ready else None

    def observe(self, scored: list[Scored], *_: float) -> None:
        """Reward-function observer: hand one answered completion of each recursion group to a second round."""
        for group in _groups([s for s in scored if s.episode.recurse]):
            handoff = self.choose(group)
            if handoff is not None:
                with self._lock:
                    self._ready.append(handoff)

    def choose(self, group: list[Scored]) -> Episode | None:
        answered = [s for s in group if s.result.parsed and s.result.answer]
        if not answered:
            return None  # nothing to recurse on: an unparseable first round has no final response
        pick = self._rng.choice(answered)
        answers = step_answers(pick.result.steps, pick.episode.domain)
        return next_round(pick.episode, pick.completion, pick.result.answer or "", answers)


def _groups(scored: list[Scored]) -> list[list[Scored]]:
    """Completions of the same prompt (question, view, round), in first-seen order."""
    groups: dict[tuple[str, tuple[str, ...], int], list[Scored]] = {}
    for s in scored:
        groups.setdefault((s.episode.question, tuple(s.episode.pool), s.episode.round), []).append(s)
    return list(groups.values())

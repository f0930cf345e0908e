"""Three-round cascades on a replay pool's answer matrix (issue 33): the family beyond the two-round ceiling.

A two-round cascade (cascade.py) looks at the first round's answers once: it hands back, or one worker answers
afresh. Without o1-mini, no two-round cascade reaches Claude-3.5-Sonnet's accuracy at half its $ on the held-out
questions, even one chosen with their answers in hand (docs/results.md, "Replay"). A third round tiers the
escalation itself::

    [a + b]   they agree -> b's answer stands
              else       -> c answers alone
                              c agrees with a or b -> c's answer stands
                              else                 -> d answers afresh, and its answer stands

With ``d = None`` c's answer stands whatever it says: a two-round cascade. With the ``own`` behaviour model every
such rule is exactly a function of the answer matrix, so its right answers and $ are computed, not sampled (as in
cascade.py). ``fronts`` lists one set's efficient rules, ``merged`` joins them with the two-round family's front,
and ``cascade.within`` picks the combination over the sets under a $ budget (scripts/replay_ceiling.py).

Served, a rule is three rounds of a Conductor: the pair, then (shown the pair's agreement line) hand back or the
tie-breaker alone, then (shown ``conductor.prompt.across_rounds``: whether the tie-breaker's answer matches an
earlier step's) hand back or the fourth worker afresh. ``cascade.choose(..., rounds=3)`` picks the rules per set
(``extend`` adds them to the two-round fronts) and ``cascade.rows`` writes the supervised rows of all three rounds
from ``ThreeRound.episodes``, each prompt built as the executor builds it.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from conductor.answers import agreement, same_answer
from conductor.pool import WorkerSpec
from conductor.prompt import across_rounds
from conductor.workflow import render_completion
from schemas.plan import StepAnswer, Workflow
from services.learner.cascade import (
    KIND,
    Cell,
    Front,
    Matrix,
    SetFronts,
    Tables,
    decision,
    evaluate,
    label,
    named,
    second_completion,
)
from services.learner.episodes import Episode, first_round, next_round
from services.learner.search import SOLVE
from tasks.problem import Problem


@dataclass(frozen=True, slots=True)
class ThreeRound:
    """``[a + b]``; where they do not agree ``c`` alone; where ``c`` agrees with neither, ``d`` (None: ``c`` stands)."""

    a: str
    b: str
    c: str
    d: str | None

    def label(self) -> str:
        last = self.d if self.d is not None else f"{self.c}'s answer stands"
        return f"[{self.a} + {self.b}] then, unless they agree, {self.c}; if it agrees with neither, {last}"

    def play(self, cells: Mapping[str, Cell]) -> tuple[float, float, bool, str]:
        """(right, $, escalated, state) on one question, as ``cascade.play`` answers it: escalated when the tie-breaker
        was called; the state is the pair's agreement, then what the third round is shown."""
        a, b, c = cells[self.a], cells[self.b], cells[self.c]
        cost = a.cost + b.cost
        state = agreement([a.answer, b.answer])
        if state == "agree":
            return b.correct, cost, False, state
        cost += c.cost
        across = _across(a, b, c)
        if self.d is None or across == "matches":
            return c.correct, cost, True, f"{state}, {across}"
        d = cells[self.d]
        return d.correct, cost + d.cost, True, f"{state}, {across}"

    def episodes(
        self,
        problem: Problem,
        cells: Mapping[str, Cell],
        view: Sequence[str],
        workers: Sequence[WorkerSpec],
        strongest: int,
    ) -> list[tuple[str, Episode, str]]:
        """(group, prompt's episode, completion) of each round the rule plays on ``problem``: the first; the second,
        grouped by the pair's agreement; the third where the second called the tie-breaker, grouped by what it is
        shown. Each later episode is built from the recorded answers as the executor builds it."""
        a, b, c = (view.index(w) for w in (self.a, self.b, self.c))
        ep = first_round(problem, list(view))
        text1 = self.first_completion(problem, view, workers, strongest)
        out = [("first", ep, text1)]
        pair = [
            StepAnswer(step=0, model_id=a, answer=cells[self.a].answer),
            StepAnswer(step=1, model_id=b, answer=cells[self.b].answer),
        ]
        second = next_round(ep, text1, cells[self.b].response, pair)
        state = agreement([cells[self.a].answer, cells[self.b].answer])
        if state == "agree":
            return [*out, (state, second, second_completion(state, None, workers))]
        text2 = second_completion(state, c, workers)
        third = next_round(
            second,
            text2,
            cells[self.c].response,
            [StepAnswer(step=0, model_id=c, answer=cells[self.c].answer)],
        )
        across = across_rounds(third.previous)
        assert across is not None  # two earlier rounds, each with its step answers
        action = None if self.d is None or across == "matches" else view.index(self.d)
        return [
            *out,
            (state, second, text2),
            (f"then {across}", third, decision(THIRD[across], action, workers)),
        ]

    def first_completion(
        self, problem: Problem, view: Sequence[str], workers: Sequence[WorkerSpec], strongest: int
    ) -> str:
        """Round 1: the question's kind, the view's strongest worker, the pair, and what comes if it differs."""
        a, b, c = (view.index(w) for w in (self.a, self.b, self.c))
        why = (
            f"This is {KIND.get(problem.benchmark, 'a question')}. The strongest model here is "
            f"{label(workers[strongest])}, Model {strongest}. {named([a, b], workers)}; they answer it "
            f"independently; if their answers differ, {named([c], workers)} breaks the tie"
        )
        if self.d is not None:
            why += f", and if it sides with neither, Model {view.index(self.d)} decides"
        wf = Workflow(model_id=[a, b], subtasks=[SOLVE, SOLVE], access_list=[[], []])
        return render_completion(why + ".", wf)


THIRD = {
    "matches": "The tie-breaker's answer matches an earlier step's",
    "new": "The tie-breaker's answer matches no earlier step's",
    "none": "The tie-breaker gave no final answer",
}
"""What a third round's completion says it was shown (``conductor.prompt.across_rounds``), before its decision."""


def _across(a: Cell, b: Cell, c: Cell) -> str:
    """What ``conductor.prompt.across_rounds`` shows the third round (the same comparison): the tie-breaker's answer
    against the pair's."""
    if c.answer is None:
        return "none"
    return "matches" if same_answer(c.answer, a.answer) or same_answer(c.answer, b.answer) else "new"


def outcome(rule: Any, matrix: Matrix, ids: Sequence[str]) -> tuple[float, float]:
    """(right answers, $) of either family's rule summed over ``ids`` (``cascade.evaluate``'s sums)."""
    o = evaluate(rule, matrix, ids)
    return o.reward, o.cost


def extend(sf: SetFronts, matrix: Matrix) -> SetFronts:
    """``sf`` with each set's front merged with the three-round rules' on the same questions and workers."""
    merged_fronts = {
        name: merged(sf.fronts[name], fronts(Tables.of(matrix, ids, sf.ordered)))
        for name, ids in sf.ids_by_set.items()
    }
    return dataclasses.replace(sf, fronts=merged_fronts)


def fronts(t: Tables) -> Front:
    """One set's efficient three-round rules over ``t``'s workers: every ordered first pair, every third worker and
    every fourth (or none); (right answers, $ summed, rule), cheapest first."""
    names, k = t.workers, len(t.workers)
    reward, cost, same = t.reward, t.cost, t.same
    points: list[tuple[float, float, ThreeRound]] = []
    for a, b in itertools.permutations(range(k), 2):
        agree = same[:, a, b]
        first_right = float(reward[agree, b].sum())
        first_cost = float(cost[:, a].sum() + cost[:, b].sum())
        rest = ~agree
        for c in range(k):
            if c in (a, b):
                continue
            kept = rest & (same[:, c, a] | same[:, c, b])
            escalated = rest & ~kept
            right = first_right + float(reward[kept, c].sum())
            spent = first_cost + float(cost[rest, c].sum())
            points.append(
                (
                    right + float(reward[escalated, c].sum()),
                    spent,
                    ThreeRound(names[a], names[b], names[c], None),
                )
            )
            right_d = reward[escalated].sum(axis=0)  # each worker's right answers where it would be asked
            cost_d = cost[escalated].sum(axis=0)
            for d in range(k):
                if d not in (a, b, c):  # asking a, b or c again repeats its recorded answer
                    rule = ThreeRound(names[a], names[b], names[c], names[d])
                    points.append((right + float(right_d[d]), spent + float(cost_d[d]), rule))
    return efficient(points)


def efficient(points: Sequence[tuple[float, float, object]]) -> Front:
    """The points no other beats on both right answers and $, cheapest first (equal $: the more right one)."""
    out: Front = []
    for right, spent, rule in sorted(points, key=lambda x: (x[1], -x[0])):
        if not out or right > out[-1][0] + 1e-9:
            out.append((right, spent, rule))
    return out


def merged(two: Front, three: Front) -> Front:
    """Both families' efficient rules on one set, as one front."""
    return efficient([*two, *three])

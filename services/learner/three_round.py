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

What serving one would take, not built: a Conductor that plans three rounds, and a recursion prompt that says
whether the latest round's answer agrees with an earlier round's (conductor/prompt.py states each round's own
agreement only). This module measures whether that is worth building.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from conductor.answers import agreement
from services.learner.cascade import Cascade, Cell, Front, Matrix, Tables, play


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

    def play(self, cells: Mapping[str, Cell]) -> tuple[float, float]:
        """(right, $) on one question."""
        a, b, c = cells[self.a], cells[self.b], cells[self.c]
        cost = a.cost + b.cost
        if agreement([a.answer, b.answer]) == "agree":
            return b.correct, cost
        cost += c.cost
        if self.d is None or "agree" in (agreement([c.answer, a.answer]), agreement([c.answer, b.answer])):
            return c.correct, cost
        d = cells[self.d]
        return d.correct, cost + d.cost


def outcome(rule: Cascade | ThreeRound, matrix: Matrix, ids: Sequence[str]) -> tuple[float, float]:
    """(right answers, $) of either family's rule summed over ``ids``."""
    right = cost = 0.0
    for pid in ids:
        if isinstance(rule, ThreeRound):
            r, c = rule.play(matrix[pid])
        else:
            r, c, _, _ = play(rule, matrix[pid])
        right, cost = right + r, cost + c
    return right, cost


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

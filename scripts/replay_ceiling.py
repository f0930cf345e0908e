"""The ceiling of the cascade families on the replay pools' held-out questions, and what a rule chosen without them
is expected to score.

    python -m scripts.replay_ceiling [--budgets 0.5,0.55,0.6,0.64] [--split test] [--rounds 2,3] [--cv 5]

The answer matrix is the cascade stage's (conductor/app/replay_matrix.py: the services' message builder, replay
provider, prices and verifier, in this process) for the recipe ``smollm2-replay``'s questions. For each of its views
(the 12 models; the 11 without o1-mini), each family and each $ budget (× the view's strongest single worker's):

- **ceiling**: the most accurate combination of one rule per set **chosen on the ``--split`` questions themselves**
  — what no rule learned elsewhere can beat on them. Family 2 is ``services.learner.cascade``'s widest (every first
  round of one to three workers, escalation to any); family 3 adds ``services.learner.three_round``'s rules (a cheap
  pair, a third worker where they differ, a fourth where the third agrees with neither). A budget a family cannot
  meet at the strongest worker's accuracy says the target is out of its reach on these recorded answers.
- **cross-validated** (``--cv K``): the public questions (train and test splits together) cut into K folds per set;
  rules chosen on K−1 folds under the budget, scored on the fold left out, summed over the folds (twice, two
  seeds), beside the view's strongest worker on all of them (the worker the target names) on the same folds. That
  is the expected score of the rule the same selection would pick on all of them, on questions it has not seen —
  the measure for a policy trained on every public question and measured on others.
Issue 33's figures are in docs/results.md, "Replay".
"""

from __future__ import annotations

import argparse
import asyncio
import random
from collections.abc import Sequence
from typing import Any

from conductor.app.replay_matrix import offline_matrix
from services.learner import cascade, three_round
from services.learner.recipes import load_recipe
from services.learner.stream import load_run_pool, shares
from tasks.problem import Problem


def _fronts(
    matrix: cascade.Matrix, problems: Sequence[Problem], view: Sequence[str], families: Sequence[int]
) -> dict[int, cascade.SetFronts]:
    """The view's efficient rules per set for each family: the two-round one's, and those merged with the
    three-round rules' (the two-round search, the slow part, runs once for both)."""
    two = cascade.set_fronts(matrix, problems, view, cheap=len(view))
    out = {2: two}
    if 3 in families:
        out[3] = three_round.extend(two, matrix)
    return out


def _pick(
    sf: cascade.SetFronts, budget: float, baseline: str | None = None
) -> tuple[float, float, dict[str, Any]]:
    """(right answers, $, rule per set) of the best combination within ``budget`` × the $ of ``baseline`` (default:
    the strongest worker on these questions)."""
    sets = sorted(sf.fronts)
    cap = budget * sf.singles[baseline or sf.strongest].mean_cost * len(sf.every)
    right, spent, rules = cascade.within([sf.fronts[s] for s in sets], cap, budget)
    return right, spent, dict(zip(sets, rules, strict=True))


def ceilings(
    matrix: cascade.Matrix,
    problems: Sequence[Problem],
    view: Sequence[str],
    budgets: Sequence[float],
    families: Sequence[int] = (2,),
) -> dict[int, list[dict[str, Any]]]:
    """Per family and budget: the family's best combination on these questions, beside the view's strongest."""
    out: dict[int, list[dict[str, Any]]] = {}
    for rounds, sf in _fronts(matrix, problems, view, families).items():
        strongest = sf.singles[sf.strongest]
        rows = out[rounds] = []
        for budget in budgets:
            try:
                right, spent, rules = _pick(sf, budget)
            except cascade.BudgetError as e:  # nothing at all costs that little
                rows.append({"budget": budget, "error": str(e)})
                continue
            n = len(sf.every)
            rows.append(
                {
                    "budget": budget,
                    "strongest": sf.strongest,
                    "strongest_accuracy": round(strongest.accuracy, 4),
                    "accuracy": round(right / n, 4),
                    "cost_ratio": round(spent / n / strongest.mean_cost, 4),
                    "sets": {s: rule.label() for s, rule in rules.items()},
                }
            )
    return {r: out[r] for r in families}


def cross_validated(
    matrix: cascade.Matrix,
    problems: Sequence[Problem],
    view: Sequence[str],
    budgets: Sequence[float],
    families: Sequence[int],
    *,
    folds: int = 5,
    seeds: Sequence[int] = (0, 1),
) -> dict[tuple[int, float], dict[str, float]]:
    """Per (family, budget): rules chosen on the other folds, scored on each fold (module docstring). The budget and
    the comparison are the view's strongest worker on all ``problems`` — the worker a target names (o1-mini,
    Claude-3.5-Sonnet) — scored on the same held-out questions."""
    sums: dict[tuple[int, float], list[float]] = {(r, b): [0.0] * 4 for r in families for b in budgets}
    n = 0
    ids = [p.id for p in problems if p.id in matrix]
    baseline = max(view, key=lambda w: (three_round.outcome(cascade.Cascade((w,), ()), matrix, ids)[0], w))
    for seed in seeds:
        fold_of = _folds(problems, folds, seed)
        for k in range(folds):
            train = [p for p in problems if fold_of[p.id] != k]
            held = [p for p in problems if fold_of[p.id] == k and p.id in matrix]
            by_set = {
                name: [p.id for p in held if p.benchmark == name] for name in {p.benchmark for p in held}
            }
            every = [p.id for p in held]
            n += len(every)
            for rounds, sf in _fronts(matrix, train, view, families).items():
                strong = three_round.outcome(cascade.Cascade((baseline,), ()), matrix, every)
                for budget in budgets:
                    _, _, rules = _pick(sf, budget, baseline)
                    got = [
                        three_round.outcome(rule, matrix, by_set.get(name, []))
                        for name, rule in rules.items()
                    ]
                    acc = sums[(rounds, budget)]
                    acc[0] += sum(r for r, _ in got)
                    acc[1] += sum(c for _, c in got)
                    acc[2] += strong[0]
                    acc[3] += strong[1]
    return {
        key: {
            "accuracy": round(right / n, 4),
            "strongest_accuracy": round(strong_right / n, 4),
            "cost_ratio": round(spent / strong_spent, 4),
            "questions": n // len(seeds),
        }
        for key, (right, spent, strong_right, strong_spent) in sums.items()
    }


def _folds(problems: Sequence[Problem], folds: int, seed: int) -> dict[str, int]:
    """Each question's fold: every set dealt out in turn after a seeded shuffle, so each fold holds each set."""
    out: dict[str, int] = {}
    for name in sorted({p.benchmark for p in problems}):
        ids = sorted(p.id for p in problems if p.benchmark == name)
        random.Random(f"{seed}:{name}").shuffle(ids)
        out.update({pid: i % folds for i, pid in enumerate(ids)})
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budgets", default="0.5,0.55,0.6,0.64", help="$ budgets, × the strongest worker's")
    parser.add_argument("--split", default="test", choices=("train", "test"))
    parser.add_argument("--rounds", default="2,3", help="families: 2, 3 or both")
    parser.add_argument("--cv", type=int, default=0, help="folds of the cross-validated estimate (0: none)")
    args = parser.parse_args(argv)
    budgets = [float(b) for b in args.budgets.split(",")]
    families = [int(r) for r in args.rounds.split(",")]
    config = load_recipe("smollm2-replay").stages[0].config
    pool = load_run_pool(config)
    splits = ("train", "test") if args.cv else (args.split,)
    problems = [p for split in splits for share in shares(config, split) for p in share.problems]
    names = sorted({w for view in config.data.views for w in view})
    matrix, masked = asyncio.run(offline_matrix(problems, pool, names))
    print(f"{len(matrix)} questions of {'+'.join(splits)} ({masked} left out: a cell could not be judged)")
    held = [p for share in shares(config, args.split) for p in share.problems]
    for view in config.data.views:
        for rounds, rows in ceilings(matrix, held, view, budgets, families).items():
            _print_ceilings(rows, len(view), rounds)
        if args.cv:
            for (rounds, budget), cv in cross_validated(
                matrix, problems, view, budgets, families, folds=args.cv
            ).items():
                print(
                    f"  {len(view)} models, cross-validated, {rounds} rounds, $ <= {budget:.2f}: "
                    f"{100 * cv['accuracy']:.2f}% at {cv['cost_ratio']:.3f} (its strongest worker "
                    f"{100 * cv['strongest_accuracy']:.2f}%; "
                    f"{cv['questions']} questions, {args.cv} folds, 2 seeds)"
                )


def _print_ceilings(rows: Sequence[dict[str, Any]], workers: int, rounds: int) -> None:
    for row in rows:
        head = f"{workers} models, {rounds} rounds, $ <= {row['budget']:.2f}"
        if "error" in row:
            print(f"{head}: {row['error']}")
            continue
        print(
            f"{head} x {row['strongest']}'s: {100 * row['accuracy']:.2f}% at {row['cost_ratio']:.3f} "
            f"(it: {100 * row['strongest_accuracy']:.2f}%)"
        )
        for name, label in row["sets"].items():
            print(f"    {name}: {label}")


if __name__ == "__main__":
    main()

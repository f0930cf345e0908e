"""The ceiling of the two-round cascades on the replay pools' held-out questions: the most accurate cascade at a $
budget, **chosen on the held-out answers themselves** — what no rule learned from the training questions can beat.

    python -m scripts.replay_ceiling [--budgets 0.5,0.55,0.6,0.64] [--split test]

The answer matrix is the cascade stage's (conductor/app/replay_matrix.py: the services' message builder, replay
provider, prices and verifier, in this process), for the held-out split of the recipe ``smollm2-replay``. For each
of the recipe's views (the 12 models; the 11 without o1-mini) and each budget, ``services.learner.cascade.choose``
searches the widest family it knows — every first round of one to three of the view's workers (not only the six
cheapest), escalation to any worker, one efficient cascade per set combined under the budget — and prints its
accuracy and $ beside the view's strongest worker's. A budget the family cannot meet at the strongest worker's
accuracy there says the target is out of reach of any two-round cascade on these recorded answers, whoever picks it.
Issue 33's figures are in docs/results.md, "Replay".
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence
from typing import Any

from conductor.app.replay_matrix import offline_matrix
from services.learner import cascade
from services.learner.recipes import load_recipe
from services.learner.stream import load_run_pool, shares
from tasks.problem import Problem


def ceilings(
    matrix: cascade.Matrix, problems: Sequence[Problem], view: Sequence[str], budgets: Sequence[float]
) -> list[dict[str, Any]]:
    """Per budget: the best cascade on these questions (any escalation target, every first round of up to three)."""
    out = []
    for budget in budgets:
        try:
            found = cascade.choose(matrix, problems, view, budget=budget, cheap=len(view), select="budget")
        except cascade.BudgetError as e:  # nothing at all costs that little
            out.append({"budget": budget, "error": str(e)})
            continue
        f = found.figures
        out.append(
            {
                "budget": budget,
                "strongest": f["strongest"],
                "strongest_accuracy": f["strongest_accuracy"],
                "accuracy": f["accuracy"],
                "cost_ratio": f["cost_ratio"],
                "sets": {s: v["cascade"] for s, v in f["sets"].items()},
            }
        )
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budgets", default="0.5,0.55,0.6,0.64", help="$ budgets, × the strongest worker's")
    parser.add_argument("--split", default="test", choices=("train", "test"))
    args = parser.parse_args(argv)
    budgets = [float(b) for b in args.budgets.split(",")]
    config = load_recipe("smollm2-replay").stages[0].config
    pool = load_run_pool(config)
    problems = [p for share in shares(config, args.split) for p in share.problems]
    names = sorted({w for view in config.data.views for w in view})
    matrix, masked = asyncio.run(offline_matrix(problems, pool, names))
    print(f"{len(matrix)} {args.split} questions ({masked} left out: a cell could not be judged)")
    for view in config.data.views:
        for row in ceilings(matrix, problems, view, budgets):
            if "error" in row:
                print(f"{len(view)} models, $ <= {row['budget']}: {row['error']}")
                continue
            print(
                f"{len(view)} models, $ <= {row['budget']:.2f} x {row['strongest']}'s: "
                f"{100 * row['accuracy']:.2f}% at {row['cost_ratio']:.3f} "
                f"(it: {100 * row['strongest_accuracy']:.2f}%)"
            )
            for name, label in row["sets"].items():
                print(f"    {name}: {label}")


if __name__ == "__main__":
    main()

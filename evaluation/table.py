"""The paper's table from finished items: accuracy mean ± standard error over repeats per benchmark, the average,
tokens and $ per question, steps per workflow (docs/method.md §4, §7) — and ``results.json`` / ``results.csv``.

Accuracy of one repeat is correct / items of that repeat (a failed or unscorable item counts as not correct, as the
paper's reward gives it nothing). The mean and standard error are over repeats (SE = sample standard deviation /
√repeats; none with a single repeat). The average of a repeat is the mean over benchmarks of that repeat's
accuracies, so its SE is over repeats too. Costs are means over every item of every repeat; a strategy's average
cost is the mean of its per-benchmark means ("avg of the benchmarks", as the paper reports cost). Each benchmark's
task version (tasks/registry.py) is recorded beside its figures: in ``results.json``, each row and ``results.csv``.
"""

from __future__ import annotations

import csv
import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path

import msgspec
from rich.table import Table

from conductor.money import usd
from conductor.policies import PolicyRecord
from evaluation import routers
from evaluation.records import ItemResult

AVERAGE = "average"


class Cell(msgspec.Struct, frozen=True, kw_only=True):
    mean: float
    se: float | None  # None with one repeat
    per_repeat: list[float]


class Row(msgspec.Struct, frozen=True, kw_only=True):
    strategy: str
    benchmark: str  # or "average"
    accuracy: Cell
    items: int  # item results behind the row (all repeats)
    tokens_per_question: float
    cost_per_question: float
    calls_per_question: float
    steps_per_workflow: float
    failures: int  # items with no scorable answer (task error or verifier error)
    version: str = ""  # the benchmark's task version; "" for the average
    escalated: float = 0.0  # share of items where a round after the first called a worker (issue 33)


class Results(msgspec.Struct, frozen=True, kw_only=True):
    benchmarks: list[str]
    strategies: list[str]
    repeats: int
    rows: list[Row]
    worker_steps: dict[str, dict[str, dict[str, int]]]  # benchmark -> strategy -> worker -> steps
    steps_histogram: dict[str, dict[int, int]]  # strategy -> steps in a workflow -> workflows
    # benchmark -> strategy -> its items' workflows in worker names round by round (ItemResult.shape) -> items
    shapes: dict[str, dict[str, dict[str, int]]] = {}
    meta: dict[str, str] = {}
    versions: dict[str, str] = {}  # benchmark -> its task version (tasks/registry.py)
    # The embedded planner's Conductor (conductor/policies.py): what the `conductor` rows ran; None with running
    # services, whose planner chose its own.
    policy: PolicyRecord | None = None
    # strategy -> RouterBench's AIQ of the single workers' points plus its own (``with_aiq``); {} without them
    aiq: dict[str, float] = {}
    aiq_workers: float | None = None  # the single workers' points alone: RouterBench's "zero router"

    def row(self, strategy: str, benchmark: str) -> Row | None:
        return next((r for r in self.rows if r.strategy == strategy and r.benchmark == benchmark), None)


def mean_se(values: Sequence[float]) -> Cell:
    mean = statistics.fmean(values) if values else 0.0
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else None
    return Cell(mean=mean, se=se, per_repeat=list(values))


def _per_repeat(items: Sequence[ItemResult]) -> dict[int, float]:
    groups: dict[int, list[bool]] = defaultdict(list)
    for it in items:
        groups[it.repeat].append(it.correct)
    return {r: sum(v) / len(v) for r, v in sorted(groups.items())}


def _row(strategy: str, benchmark: str, items: Sequence[ItemResult], version: str = "") -> Row:
    n = max(len(items), 1)
    workflows = [s for it in items for s in it.workflow_steps]
    return Row(
        strategy=strategy,
        benchmark=benchmark,
        accuracy=mean_se(list(_per_repeat(items).values())),
        items=len(items),
        tokens_per_question=sum(it.tokens for it in items) / n,
        cost_per_question=sum(it.cost_usd for it in items) / n,
        calls_per_question=sum(it.calls for it in items) / n,
        steps_per_workflow=statistics.fmean(workflows) if workflows else 0.0,
        failures=sum(1 for it in items if it.outcome in {"failed", "error"}),
        version=version,
        escalated=sum(it.escalated for it in items) / n,
    )


def _average(strategy: str, rows: list[Row], by_bench: dict[str, list[ItemResult]]) -> Row:
    """Per repeat, the mean over benchmarks (only repeats every benchmark has); costs: the mean of the means."""
    repeats = [_per_repeat(items) for items in by_bench.values()]
    common = sorted(set.intersection(*(set(r) for r in repeats))) if repeats else []
    per_repeat = [statistics.fmean(r[k] for r in repeats) for k in common]
    mean_of = lambda attr: statistics.fmean(getattr(r, attr) for r in rows) if rows else 0.0  # noqa: E731
    return Row(
        strategy=strategy,
        benchmark=AVERAGE,
        accuracy=mean_se(per_repeat),
        items=sum(r.items for r in rows),
        tokens_per_question=mean_of("tokens_per_question"),
        cost_per_question=mean_of("cost_per_question"),
        calls_per_question=mean_of("calls_per_question"),
        steps_per_workflow=mean_of("steps_per_workflow"),
        failures=sum(r.failures for r in rows),
        escalated=mean_of("escalated"),
    )


def summarize(
    items: Sequence[ItemResult],
    benchmarks: Sequence[str],
    strategies: Sequence[str],
    meta: dict[str, str] | None = None,
    versions: dict[str, str] | None = None,
) -> Results:
    grouped: dict[tuple[str, str], list[ItemResult]] = defaultdict(list)
    for it in items:
        grouped[(it.strategy, it.benchmark)].append(it)
    rows: list[Row] = []
    for s in strategies:
        by_bench = {b: grouped[(s, b)] for b in benchmarks if grouped.get((s, b))}
        own = [_row(s, b, v, (versions or {}).get(b, "")) for b, v in by_bench.items()]
        rows.extend(own)
        if own:
            rows.append(_average(s, own, by_bench))
    workers: dict[str, dict[str, dict[str, int]]] = {b: {} for b in benchmarks}
    histogram: dict[str, Counter[int]] = {}
    shapes: dict[str, dict[str, dict[str, int]]] = {}
    for (s, b), group in grouped.items():
        workers.setdefault(b, {})[s] = dict(Counter(w for it in group for w in it.workers))
        histogram.setdefault(s, Counter()).update(n for it in group for n in it.workflow_steps)
        shapes.setdefault(b, {})[s] = dict(Counter(it.shape for it in group).most_common())
    return Results(
        benchmarks=list(benchmarks),
        strategies=list(strategies),
        repeats=max((it.repeat for it in items), default=-1) + 1,
        rows=rows,
        worker_steps=workers,
        steps_histogram={s: dict(sorted(h.items())) for s, h in histogram.items()},
        shapes=shapes,
        meta=dict(meta or {}),
        versions={b: (versions or {})[b] for b in benchmarks if (versions or {}).get(b)},
    )


def with_aiq(results: Results) -> Results:
    """``results`` with RouterBench's AIQ (evaluation/routers.py ``aiq``, accuracy in [0, 1] over the run's cost
    range) of the ``single:NAME`` rows' hull — RouterBench's zero router — and, per strategy, of that hull with the
    strategy's point added: how far the strategy lifts the plane the workers alone span. Unchanged without two
    single workers or without a cost range."""
    points = {
        s: (row.cost_per_question, row.accuracy.mean)
        for s in results.strategies
        if (row := results.row(s, AVERAGE)) is not None
    }
    fixed = [p for s, p in points.items() if s.startswith("single:")]
    costs = [c for c, _ in points.values()]
    if len(fixed) < 2 or not costs or max(costs) <= min(costs):
        return results
    lo, hi = min(costs), max(costs)
    return msgspec.structs.replace(
        results,
        aiq={s: routers.aiq([*fixed, p], lo, hi) for s, p in points.items()},
        aiq_workers=routers.aiq(fixed, lo, hi),
    )


def pct(cell: Cell) -> str:
    """``72.35 ± 1.20`` (percent); ``72.35`` with one repeat."""
    return f"{100 * cell.mean:.2f}" + ("" if cell.se is None else f" ± {100 * cell.se:.2f}")


def version_line(results: Results) -> str:
    """``math500 v1 · sim v1``: the task version of each benchmark, for the table's caption and the report."""
    return " · ".join(f"{b} v{v}" for b, v in results.versions.items())


def rich_table(results: Results, title: str = "Accuracy (%), mean ± SE over repeats") -> Table:
    versions = version_line(results)
    captions = [f"task versions: {versions}"] if versions else []
    if results.aiq_workers is not None:
        captions.append(f"AIQ: the workers alone {results.aiq_workers:.4f}; each row: the workers plus it")
    table = Table(title=title, caption=" · ".join(captions) or None)
    aiq = ("AIQ",) if results.aiq else ()
    later = ("escalated",) if any(r.escalated for r in results.rows) else ()
    for col in ("strategy", *results.benchmarks, "Average", "tokens/q", "$/q", "steps/wf", *later, *aiq):
        table.add_column(col, justify="left" if col == "strategy" else "right")
    for s in results.strategies:
        avg = results.row(s, AVERAGE)
        if avg is None:
            continue
        cells = [pct(r.accuracy) if (r := results.row(s, b)) else "—" for b in results.benchmarks]
        table.add_row(
            s,
            *cells,
            pct(avg.accuracy),
            f"{avg.tokens_per_question:,.0f}",
            usd(avg.cost_per_question),
            f"{avg.steps_per_workflow:.2f}",
            *([f"{100 * avg.escalated:.0f}%"] if later else []),
            *([f"{results.aiq[s]:.4f}"] if s in results.aiq else ["—"] if results.aiq else []),
        )
    return table


CSV_COLUMNS = (
    "strategy",
    "benchmark",
    "accuracy_mean",
    "accuracy_se",
    "repeats",
    "items",
    "tokens_per_question",
    "cost_per_question",
    "calls_per_question",
    "steps_per_workflow",
    "failures",
    "version",
    "escalated",
)


def write(results: Results, out_dir: Path) -> None:
    """``results.json`` (everything) and ``results.csv`` (one line per strategy × benchmark, then its average)."""
    (out_dir / "results.json").write_bytes(
        msgspec.json.format(msgspec.json.encode(results), indent=2) + b"\n"
    )
    with (out_dir / "results.csv").open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(CSV_COLUMNS)
        for r in results.rows:
            se = "" if r.accuracy.se is None else f"{r.accuracy.se:.6f}"
            w.writerow(
                [
                    r.strategy,
                    r.benchmark,
                    f"{r.accuracy.mean:.6f}",
                    se,
                    len(r.accuracy.per_repeat),
                    r.items,
                    f"{r.tokens_per_question:.1f}",
                    f"{r.cost_per_question:.8f}",
                    f"{r.calls_per_question:.3f}",
                    f"{r.steps_per_workflow:.3f}",
                    r.failures,
                    r.version,
                    f"{r.escalated:.4f}",
                ]
            )

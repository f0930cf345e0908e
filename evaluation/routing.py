"""The routers as strategies of ``conductor eval``: which single answers a run needs, and the router rows composed
from them (evaluation/routers.py has the rules).

``--strategy routers`` (or ``router:KIND``, beside any other strategy) adds ``single:NAME`` for every worker of the
run's pool on the evaluated split, and the same on the benchmark's *train* split (repeat 0; ``--train-limit``
items) for calibration — ordinary jobs, through the running services, in ``items.jsonl`` and resumable like any.
When the run is done each router's item is composed from those graded answers (exact: no call of these routers
sees another's output) and joins the table, the report and the cost–accuracy plane; composed items are derived,
so they are not written to ``items.jsonl`` and a rerun composes them again.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

import msgspec

from evaluation import routers
from evaluation.errors import EvalError
from evaluation.records import ItemResult
from evaluation.routers import Choice, Question, RouterSpec
from schemas.solve import RoundRecord, SolveResult
from schemas.usage import Usage, UsageSummary
from tasks import registry
from tasks.problem import Problem

TRAIN_SPLIT = "train"


def split_spec(spec: str, workers: Sequence[str]) -> tuple[list[str], list[RouterSpec]]:
    """The comma-separated ``--strategy`` value -> (the other strategies' names, the routers named)."""
    others: list[str] = []
    found: list[RouterSpec] = []
    for part in (p.strip() for p in spec.split(",")):
        if part == "routers" or part.startswith("router:"):
            found.extend(r for r in routers.parse_router(part, workers) if r not in found)
        elif part:
            others.append(part)
    return others, found


def named(spec: str) -> bool:
    """Whether a ``--strategy`` value names a router (before the pool is known: the run then needs train questions)."""
    return any(p.strip() == "routers" or p.strip().startswith("router:") for p in spec.split(","))


def train_label(benchmark: str) -> str:
    """The label of the split that calibrates the routers scored on ``benchmark``."""
    key, split = registry.parse_label(benchmark)
    entry = registry.entry(key)
    if TRAIN_SPLIT not in entry.splits:
        raise EvalError(
            f"the routers calibrate on {key}'s {TRAIN_SPLIT!r} split, and {key} has only: {', '.join(entry.splits)}"
        )
    if split == TRAIN_SPLIT:
        raise EvalError(f"the routers calibrate on {benchmark}: score them on another split of {key}")
    return registry.label(key, TRAIN_SPLIT)


def calibration(problems: Mapping[str, Sequence[Problem]], *, hub: bool = False) -> dict[str, list[Problem]]:
    """Each evaluated benchmark's train questions, by train label, less any question also evaluated (a fixture's
    splits may be the same file); a benchmark left without train questions is an error."""
    found: dict[str, list[Problem]] = {}
    for name, evaluated in problems.items():
        label = train_label(name)
        seen = {p.id for p in evaluated} | {normal(p.question) for p in evaluated}
        kept = [
            p
            for p in registry.load_benchmark(label, hub=hub)
            if p.id not in seen and normal(p.question) not in seen
        ]
        if not kept:
            raise EvalError(
                f"{label} has no question apart from those evaluated in {name}: nothing to calibrate on"
            )
        found[label] = kept
    return found


def normal(text: str) -> str:
    return " ".join(text.split()).lower()


def final_answer(item: ItemResult) -> str | None:
    """The answer a vote or a cascade compares: the verifier's extracted final answer; for code without one, the
    whole response with its spacing collapsed (two programs agree when written alike); None when the worker stated
    none."""
    verdict = item.result.verdict
    if verdict is not None and verdict.extracted is not None:
        return verdict.extracted
    if item.domain == "code" and item.result.answer:
        return " ".join(item.result.answer.split())
    return None


def questions(
    items: Sequence[ItemResult], workers: Sequence[str], set_of: Mapping[str, str], repeat: int
) -> tuple[list[Question], dict[tuple[str, str], dict[str, ItemResult]], int]:
    """(questions every worker answered in ``repeat``, their items by (benchmark, id) then worker, the number of
    questions left out because a worker's answer is missing). ``set_of``: benchmark label -> the set it counts in."""
    by_key: dict[tuple[str, str], dict[str, ItemResult]] = defaultdict(dict)
    for it in items:
        worker = it.strategy.removeprefix("single:")
        if (
            it.repeat == repeat
            and it.benchmark in set_of
            and it.strategy.startswith("single:")
            and worker in workers
        ):
            by_key[(it.benchmark, it.item)][worker] = it
    complete = {k: v for k, v in by_key.items() if len(v) == len(workers)}
    found = [
        Question(
            id=item_id,
            set=set_of[bench],
            text=answers[workers[0]].question,
            answers={
                w: routers.Answer(correct=it.correct, final=final_answer(it), cost=it.cost_usd)
                for w, it in answers.items()
            },
        )
        for (bench, item_id), answers in complete.items()
    ]
    return found, complete, len(by_key) - len(complete)


def compose(
    specs: Sequence[RouterSpec],
    items: Sequence[ItemResult],
    workers: Sequence[str],
    train_of: Mapping[str, str],
) -> tuple[list[ItemResult], dict[str, str]]:
    """Every router's items for every evaluated question of every repeat, and a line per router saying what it
    chose on train (for the results' meta). ``train_of``: evaluated benchmark -> its train label."""
    train, _, missing_train = questions(items, workers, {t: b for b, t in train_of.items()}, 0)
    fitted = routers.fit(specs, train, workers)
    meta = {label: choice for label, choice in fitted.chosen.items()}
    meta["routers calibrated on"] = f"{len(train)} train questions × {len(workers)} workers" + (
        f" ({missing_train} left out: a worker's answer missing)" if missing_train else ""
    )
    composed: list[ItemResult] = []
    for repeat in sorted({it.repeat for it in items if it.benchmark in train_of}):
        evaluated, by_key, _ = questions(items, workers, {b: b for b in train_of}, repeat)
        for q in evaluated:
            answers = by_key[(q.set, q.id)]
            for label, route in fitted.routers.items():
                composed.append(routed(label, route(q), answers))
    return composed, meta


def routed(label: str, choice: Choice, answers: Mapping[str, ItemResult]) -> ItemResult:
    """A router's item: the answer (and verdict) of the worker it returned, the calls it made as one workflow."""
    chosen = answers[choice.answered_by]
    called = [answers[w] for w in dict.fromkeys(choice.called)]
    steps = [s for it in called for r in it.result.workflows for s in r.steps]
    steps = [msgspec.structs.replace(s, index=i) for i, s in enumerate(steps)]
    result = SolveResult(
        task_id=f"{label}:{chosen.result.task_id}",
        answer=chosen.result.answer,
        workflows=[RoundRecord(round=0, policy=label, steps=steps)],
        usage=_usage([it.result.usage for it in called]),
        verdict=chosen.result.verdict,
        error=chosen.result.error,
    )
    return msgspec.structs.replace(
        chosen, strategy=label, result=result, reason=f"{choice.answered_by}: {chosen.reason}"
    )


def _usage(parts: Sequence[UsageSummary]) -> UsageSummary:
    by_worker: dict[str, Usage] = {}
    for part in parts:
        for w, u in part.by_worker.items():
            by_worker[w] = by_worker.get(w, Usage()) + u
    return UsageSummary(
        by_worker=by_worker,
        planner=sum((p.planner for p in parts), Usage()),
        total=sum((p.total for p in parts), Usage()),
    )

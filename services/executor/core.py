"""Run a task: validate, plan, execute the workflow's steps, recurse, verify, account usage — the one code path
for production solves and (later) training rollouts.

Steps run in workflow order semantically; a step starts as soon as every step it may see has finished, so
independent steps (access ``[]``) overlap in time without changing any worker's inputs.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence

import msgspec
import structlog

from conductor.pool import Pool, WorkerSpec
from schemas.errors import ErrorCode, ErrorInfo
from schemas.plan import PlanReply, PlanRequest, PriorRound, Workflow
from schemas.solve import (
    Budget,
    ProgressEvent,
    RoundRecord,
    SolveRequest,
    SolveResult,
    StepRecord,
)
from schemas.usage import Usage, UsageSummary
from schemas.verify import Outcome, Reference, TextReference, Verdict, VerifyBatch, VerifyRequest
from schemas.work import WorkReply, WorkRequest
from services.executor.config import ExecutorSettings
from services.executor.messages import PREVIOUS_ROUND_SUBTASK, build_messages, granted_steps
from services.executor.transport import Transport

log = structlog.get_logger("conductor.executor")

# PAPER.md §3: 1 correct, 0.5 parsed but wrong, 0 unparseable. Verifier infrastructure errors are not scored.
REWARD_CORRECT = 1.0
REWARD_WRONG = 0.5
REWARD_UNPARSEABLE = 0.0


def bad_request(message: str, field: str) -> ErrorInfo:
    return ErrorInfo(code=ErrorCode.BAD_REQUEST, message=message, field=field)


def validate(req: SolveRequest, pool: Pool, settings: ExecutorSettings) -> ErrorInfo | None:
    """Semantic checks the schema cannot express; each failure names the field."""
    if not req.question.strip():
        return bad_request("question must not be empty", "question")
    if len(req.question) > settings.max_question_chars:
        return bad_request(f"question exceeds {settings.max_question_chars} characters", "question")
    if req.task_id is not None and not _valid_task_id(req.task_id):
        return bad_request("task_id must be 1-128 characters of letters, digits, '-', '_' or '.'", "task_id")
    if req.pool is not None:
        if not req.pool:
            return bad_request("pool must name at least one worker", "pool")
        known = set(pool.names())
        for i, name in enumerate(req.pool):
            if name not in known:
                return bad_request(f"unknown worker {name!r}; known: {sorted(known)}", f"pool[{i}]")
        if len(set(req.pool)) != len(req.pool):
            return bad_request("pool names a worker twice", "pool")
    if req.max_steps is not None and not 1 <= req.max_steps <= settings.max_steps_cap:
        return bad_request(f"max_steps must be within 1..{settings.max_steps_cap}", "max_steps")
    if not 0 <= req.max_rounds <= settings.max_rounds_cap:
        return bad_request(f"max_rounds must be within 0..{settings.max_rounds_cap}", "max_rounds")
    if req.budget is not None:
        for name in ("max_calls", "max_tokens", "max_cost_usd", "max_wall_s"):
            value = getattr(req.budget, name)
            if value is not None and value <= 0:
                return bad_request("budget limits must be positive", f"budget.{name}")
    return None


def _valid_task_id(task_id: str) -> bool:
    # task ids become NATS subject tokens and KV keys: keep them to a safe alphabet
    return 0 < len(task_id) <= 128 and all(c.isalnum() or c in "-_." for c in task_id) and ".." not in task_id


def as_reference(ref: str | Reference, domain: str | None) -> Reference:
    if not isinstance(ref, str):
        return ref
    kind = {"math": "math", "mcq": "mcq"}.get(domain or "", "auto")
    return TextReference(answer=ref, kind=kind)  # type: ignore[arg-type]


def reward_for(verdict: Verdict | None, parsed: bool) -> float | None:
    """PAPER.md §3; ``None`` when the verifier failed, so training masks the sample instead of learning a zero."""
    if not parsed:
        return REWARD_UNPARSEABLE
    if verdict is None or verdict.outcome == Outcome.ERROR:
        return None
    return REWARD_CORRECT if verdict.outcome == Outcome.CORRECT else REWARD_WRONG


class BudgetMeter:
    """Counts what a task has spent; ``exceeded`` names the first limit crossed."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.started = time.monotonic()
        self.usage = Usage()

    def add(self, usage: Usage) -> None:
        self.usage = self.usage + usage

    def exceeded(self) -> str | None:
        b, u = self.budget, self.usage
        if b.max_calls is not None and u.calls >= b.max_calls:
            return f"max_calls={b.max_calls} reached"
        if b.max_tokens is not None and u.total_tokens >= b.max_tokens:
            return f"max_tokens={b.max_tokens} reached ({u.total_tokens})"
        if b.max_cost_usd is not None and u.cost_usd >= b.max_cost_usd:
            return f"max_cost_usd={b.max_cost_usd} reached ({u.cost_usd:.6f})"
        if b.max_wall_s is not None and time.monotonic() - self.started >= b.max_wall_s:
            return f"max_wall_s={b.max_wall_s} reached"
        return None

    def remaining_wall(self) -> float | None:
        if self.budget.max_wall_s is None:
            return None
        return max(0.0, self.budget.max_wall_s - (time.monotonic() - self.started))


def merge_budget(default: Budget, req: Budget | None) -> Budget:
    if req is None:
        return default
    return Budget(
        max_calls=req.max_calls if req.max_calls is not None else default.max_calls,
        max_tokens=req.max_tokens if req.max_tokens is not None else default.max_tokens,
        max_cost_usd=req.max_cost_usd if req.max_cost_usd is not None else default.max_cost_usd,
        max_wall_s=req.max_wall_s if req.max_wall_s is not None else default.max_wall_s,
    )


class RoundOutcome:
    """The result of running one workflow: its step records, its final response or the error that stopped it."""

    def __init__(self, steps: list[StepRecord], answer: str | None, error: ErrorInfo | None) -> None:
        self.steps = steps
        self.answer = answer
        self.error = error


class Executor:
    def __init__(self, pool: Pool, settings: ExecutorSettings, transport: Transport) -> None:
        self.pool = pool
        self.settings = settings
        self.transport = transport

    async def solve(self, req: SolveRequest) -> SolveResult:
        started = time.monotonic()
        task_id = req.task_id or uuid.uuid4().hex
        error = validate(req, self.pool, self.settings)
        if error is not None:
            return SolveResult(task_id=task_id, error=error)
        with structlog.contextvars.bound_contextvars(task_id=task_id):
            result = await self._solve(req, task_id)
        result = _with_latency(result, time.monotonic() - started)
        await self._progress(ProgressEvent(task_id=task_id, kind="done", error=result.error))
        return result

    async def _solve(self, req: SolveRequest, task_id: str) -> SolveResult:
        workers = self.pool.subset(req.pool)
        cards = self.pool.cards(workers)
        max_steps = req.max_steps or self.settings.default_max_steps
        meter = BudgetMeter(merge_budget(self.settings.default_budget, req.budget))
        rounds: list[RoundRecord] = []
        previous: list[PriorRound] = []
        answer: str | None = None
        error: ErrorInfo | None = None
        by_worker: dict[str, Usage] = {}
        planner_usage = Usage()

        for rnd in range(req.max_rounds + 1):
            structlog.contextvars.bind_contextvars(round=rnd)
            if (reason := meter.exceeded()) is not None:
                error = _budget_error(reason)
                break
            plan = await self.transport.plan(
                PlanRequest(
                    task_id=task_id,
                    question=req.question,
                    workers=cards,
                    max_steps=max_steps,
                    domain=req.domain,
                    round=rnd,
                    previous=previous,
                    policy=req.policy,
                ),
                timeout=self.settings.plan_timeout_s,
            )
            planner_usage = planner_usage + plan.usage
            record = _round_record(rnd, plan)
            if plan.error is not None or plan.workflow is None:
                rounds.append(record)
                error = plan.error or ErrorInfo(code=ErrorCode.PLANNER_ERROR, message="planner sent no workflow")
                break
            if plan.handback:
                rounds.append(record)
                break
            await self._progress(
                ProgressEvent(task_id=task_id, kind="planned", round=rnd, steps_planned=len(plan.workflow))
            )
            outcome = await self._run_round(req, task_id, rnd, workers, plan.workflow, answer, meter)
            for step in outcome.steps:
                by_worker[step.worker] = by_worker.get(step.worker, Usage()) + step.usage
            rounds.append(_replace_steps(record, outcome))
            if outcome.error is not None:
                error = outcome.error
                answer = answer if answer is not None else _best_so_far(outcome.steps)
                break
            answer = outcome.answer
            previous = [*previous, PriorRound(completion=plan.completion, final_response=answer or "")]
        structlog.contextvars.unbind_contextvars("round")

        verdict, reward = await self._verify(req, task_id, answer, parsed=_parsed(rounds))
        total = sum(by_worker.values(), Usage()) + planner_usage
        return SolveResult(
            task_id=task_id,
            answer=answer,
            workflows=rounds,
            usage=UsageSummary(by_worker=by_worker, planner=planner_usage, total=total),
            verdict=verdict,
            reward=reward,
            error=error,
        )

    async def _run_round(
        self,
        req: SolveRequest,
        task_id: str,
        rnd: int,
        workers: Sequence[WorkerSpec],
        wf: Workflow,
        previous_answer: str | None,
        meter: BudgetMeter,
    ) -> RoundOutcome:
        n = len(wf)
        done: list[asyncio.Future[StepRecord]] = [asyncio.get_running_loop().create_future() for _ in range(n)]
        stop = asyncio.Event()
        stop_error: list[ErrorInfo] = []

        async def run_step(i: int) -> None:
            deps = granted_steps(i, wf.access_list[i])
            records = [await done[j] for j in deps]
            if stop.is_set() or any(r.error is not None for r in records):
                done[i].set_result(_skipped(i, wf, workers))
                return
            history = [(r.subtask, r.response) for r in records]
            if previous_answer is not None and wf.access_list[i] == "all":
                history.insert(0, (PREVIOUS_ROUND_SUBTASK, previous_answer))
            if (reason := meter.exceeded()) is not None:
                stop_error.append(_budget_error(reason))
                stop.set()
                done[i].set_result(_skipped(i, wf, workers))
                return
            record = await self._call_worker(req, task_id, rnd, i, wf, workers, history, meter)
            if record.error is not None and not stop.is_set():
                stop_error.append(record.error)
                stop.set()
            done[i].set_result(record)

        tasks = [asyncio.create_task(run_step(i)) for i in range(n)]
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
        steps = [f.result() for f in done]
        if stop_error:
            return RoundOutcome(steps, None, stop_error[0])
        return RoundOutcome(steps, steps[-1].response, None)

    async def _call_worker(
        self,
        req: SolveRequest,
        task_id: str,
        rnd: int,
        i: int,
        wf: Workflow,
        workers: Sequence[WorkerSpec],
        history: list[tuple[str, str]],
        meter: BudgetMeter,
    ) -> StepRecord:
        worker = workers[wf.model_id[i]]
        timeout = self.settings.work_timeout_s
        remaining = meter.remaining_wall()
        if remaining is not None:
            timeout = min(timeout, max(remaining, 0.001))
        reply = await self.transport.work(
            WorkRequest(
                worker=worker.name,
                messages=build_messages(req.question, wf.subtasks[i], history),
                task_id=task_id,
                round=rnd,
                step=i,
                cache=req.cache,
            ),
            timeout=timeout,
        )
        meter.add(reply.usage)
        record = _step_record(i, wf, worker.name, reply)
        await self._progress(
            ProgressEvent(
                task_id=task_id,
                kind="step_done",
                round=rnd,
                step=i,
                worker=worker.name,
                subtask=wf.subtasks[i],
                response_preview=reply.text[:200],
                usage=reply.usage,
                error=reply.error,
            )
        )
        return record

    async def _verify(
        self, req: SolveRequest, task_id: str, answer: str | None, *, parsed: bool
    ) -> tuple[Verdict | None, float | None]:
        if req.reference is None:
            return None, None
        if answer is None:
            # Nothing to verify: no workflow ran to completion. Unparseable -> reward 0 (PAPER.md §3).
            return None, (REWARD_UNPARSEABLE if not parsed else None)
        batch = VerifyBatch(
            items=[
                VerifyRequest(
                    id=task_id,
                    response=answer,
                    reference=as_reference(req.reference, req.domain),
                    question=req.question,
                    domain=req.domain,
                )
            ]
        )
        result = await self.transport.verify(batch, timeout=self.settings.verify_timeout_s)
        if result.error is not None or len(result.verdicts) != 1:
            err = result.error or ErrorInfo(code=ErrorCode.VERIFIER_ERROR, message="verifier returned no verdict")
            verdict = Verdict(id=task_id, outcome=Outcome.ERROR, reason=err.message, error=err)
            return verdict, None
        verdict = result.verdicts[0]
        return verdict, reward_for(verdict, parsed)

    async def _progress(self, event: ProgressEvent) -> None:
        # Progress is best effort by design: a lost event never fails a task.
        try:
            await self.transport.progress(event)
        except Exception as exc:  # noqa: BLE001 - logged, and the task goes on
            log.warning("progress event not published", kind=event.kind, error=repr(exc))


def _best_so_far(steps: list[StepRecord]) -> str | None:
    """When a round stops early, the latest completed step's response is the best answer it produced."""
    done = [s for s in steps if s.error is None and s.response]
    return done[-1].response if done else None


def _parsed(rounds: list[RoundRecord]) -> bool:
    return not any(r.error is not None and r.error.code == ErrorCode.FORMAT_ERROR for r in rounds)


def _budget_error(reason: str) -> ErrorInfo:
    return ErrorInfo(code=ErrorCode.BUDGET_EXCEEDED, message=f"budget exceeded: {reason}")


def _round_record(rnd: int, plan: PlanReply) -> RoundRecord:
    return RoundRecord(
        round=rnd,
        policy=plan.policy,
        reasoning=plan.reasoning,
        completion=plan.completion,
        handback=plan.handback,
        fallback_used=plan.fallback_used,
        planner_attempts=plan.attempts,
        planner_usage=plan.usage,
        error=plan.error,
    )


def _replace_steps(record: RoundRecord, outcome: RoundOutcome) -> RoundRecord:
    return msgspec.structs.replace(record, steps=outcome.steps, error=outcome.error)


def _step_record(i: int, wf: Workflow, worker: str, reply: WorkReply) -> StepRecord:
    return StepRecord(
        index=i,
        model_id=wf.model_id[i],
        worker=worker,
        subtask=wf.subtasks[i],
        access=wf.access_list[i],
        response=reply.text,
        usage=reply.usage,
        latency_s=reply.latency_s,
        cached=reply.cached,
        error=reply.error,
    )


def _skipped(i: int, wf: Workflow, workers: Sequence[WorkerSpec]) -> StepRecord:
    return StepRecord(
        index=i,
        model_id=wf.model_id[i],
        worker=workers[wf.model_id[i]].name,
        subtask=wf.subtasks[i],
        access=wf.access_list[i],
        error=ErrorInfo(code=ErrorCode.SKIPPED, message="step not run: an earlier step failed or the budget ran out"),
    )


def _with_latency(result: SolveResult, latency: float) -> SolveResult:
    return msgspec.structs.replace(result, latency_s=latency)

"""Run a task: plan, execute the workflow's steps, recurse, verify, account usage — the one code path for
production solves and training rollouts, with an optional checkpoint after every step so a redelivered task
resumes without repeating finished worker calls.

Solves and rollouts differ only in where a round's workflow comes from (``WorkflowSource``): the planner over NATS
for a solve (``PlannerSource``), the learner's completion parsed as written for a rollout
(``services/executor/rollouts.py``). Running the steps, recursing, verifying and the reward are shared.

A round's steps run in workflow order semantically (``steps.py``); a step starts as soon as every step it may see
has finished, so independent steps (access ``[]``) overlap in time without changing any worker's inputs.

Nothing handed to the executor is acted on unchecked: a round's workflow, whatever its source, is checked against
the task's pool view and step cap before a step runs (``validation.workflow_error``); a stored checkpoint is resumed
only if it is this task's, for the submitted request, with a valid plan and records (``checkpoints.py``); a verdict
must answer the item asked (``verifying.py``) and a worker's reply the worker asked (``steps.py``).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from pathlib import Path
from typing import Protocol

import msgspec
import structlog

from conductor import tracing
from conductor.liveness import current_deadline, expired
from conductor.logging import bound_contextvars
from conductor.pool import Pool
from conductor.reward import judge, policy_parsed
from schemas.errors import ErrorCode, ErrorInfo
from schemas.plan import PlanReply, PlanRequest, PriorRound, Workflow
from schemas.solve import ProgressEvent, RoundRecord, SolveRequest, SolveResult, StepRecord
from schemas.tasks import TaskCheckpoint, task_key
from schemas.usage import Usage, UsageSummary
from schemas.verify import Verdict
from services.executor.budget import BudgetMeter, merge_budget
from services.executor.cancels import Cancel
from services.executor.checkpoints import checkpoint_error
from services.executor.config import ExecutorSettings
from services.executor.recording import record_served
from services.executor.steps import RoundOutcome, StepCaller, best_so_far, run_round
from services.executor.transport import Transport
from services.executor.validation import rounds_allowed, step_cap, validate, workflow_error
from services.executor.verifying import as_reference, task_verdict
from tasks.finals import step_answers

log = structlog.get_logger("conductor.executor")

Checkpointer = Callable[[TaskCheckpoint], Awaitable[None]]


def usage_summary(rounds: Sequence[RoundRecord]) -> UsageSummary:
    """Usage is derived from the records, never counted twice: per worker from steps, planner from rounds."""
    by_worker: dict[str, Usage] = {}
    planner = Usage()
    for rnd in rounds:
        planner = planner + rnd.planner_usage
        for step in rnd.steps:
            by_worker[step.worker] = by_worker.get(step.worker, Usage()) + step.usage
    return UsageSummary(
        by_worker=by_worker, planner=planner, total=sum(by_worker.values(), Usage()) + planner
    )


class WorkflowSource(Protocol):
    """Where a round's workflow comes from: the one thing a solve and a rollout do differently. It answers what the
    planner would be asked (a ``PlanRequest``: question, pool view as numbered cards, step cap, round, earlier
    rounds) with a ``PlanReply``; a reply's ``error`` stops the task, an empty workflow hands the answer back."""

    verify_unparsed: bool
    """Verify the standing answer even when the policy's completion did not parse: a solve's user still gets a
    verdict on the answer they are given; a rollout's reward is 0 whatever the verdict, so the verifier is spared."""

    async def workflow(self, ask: PlanRequest) -> PlanReply: ...


class PlannerSource:
    """Solves: the planner samples the policy, resamples format failures and may let a fallback baseline plan."""

    verify_unparsed = True

    def __init__(self, transport: Transport, timeout: float) -> None:
        self.transport = transport
        self.timeout = timeout

    async def workflow(self, ask: PlanRequest) -> PlanReply:
        return await self.transport.plan(ask, timeout=self.timeout)


class TaskState:
    """A task's progress in memory; ``checkpoint()`` is its durable form.

    ``rounds`` are finished rounds; ``current`` is the round in progress (its steps finished so far, in any order)
    with ``workflow`` its plan. ``previous`` holds earlier rounds given from outside (a rollout of a recursive
    call): the last one's final response is the answer standing until a new workflow replaces it.
    """

    def __init__(self, task_id: str, request: SolveRequest, previous: Sequence[PriorRound] = ()) -> None:
        self.task_id = task_id
        self.request = request
        self.rounds: list[RoundRecord] = []
        self.current: RoundRecord | None = None
        self.workflow: Workflow | None = None
        self.previous: list[PriorRound] = list(previous)
        self.answer: str | None = previous[-1].final_response if previous else None
        self.wall_offset_s = 0.0
        self.deliveries = 1
        self.errors: list[ErrorInfo] = []
        self.started_at: float | None = None
        self.failing_since: float | None = None
        self.failing_progress = 0

    @classmethod
    def resume(cls, cp: TaskCheckpoint, request: SolveRequest) -> TaskState:
        """The task as ``cp`` left it, running the submitted ``request`` (never the checkpoint's copy of it); check
        ``cp`` first (``Executor.resumable``)."""
        state = cls(cp.task_id, request)
        rounds = list(cp.rounds)
        if cp.workflow is not None and rounds:
            state.current, state.workflow = rounds.pop(), cp.workflow
        state.rounds = rounds
        state.previous = list(cp.previous)
        state.answer = cp.answer
        state.wall_offset_s = cp.wall_s
        state.deliveries = cp.deliveries + 1
        state.errors = list(cp.errors)
        state.started_at = cp.started_at
        state.failing_since, state.failing_progress = cp.failing_since, cp.failing_progress
        return state

    def all_rounds(self) -> list[RoundRecord]:
        return [*self.rounds, self.current] if self.current is not None else list(self.rounds)

    def checkpoint(self, elapsed_s: float) -> TaskCheckpoint:
        return TaskCheckpoint(
            task_id=self.task_id,
            request=self.request,
            rounds=self.all_rounds(),
            workflow=self.workflow,
            previous=list(self.previous),  # copies: a checkpointer may keep the struct while the task goes on
            answer=self.answer,
            spent=usage_summary(self.all_rounds()).total,
            wall_s=elapsed_s,
            deliveries=self.deliveries,
            errors=list(self.errors),
            started_at=self.started_at,
            failing_since=self.failing_since,
            failing_progress=self.failing_progress,
        )

    def add_step(self, record: StepRecord) -> None:
        assert self.current is not None
        self.current = msgspec.structs.replace(self.current, steps=[*self.current.steps, record])


class Executor:
    def __init__(self, pool: Pool, settings: ExecutorSettings, transport: Transport) -> None:
        self.pool = pool
        self.settings = settings
        self.transport = transport

    async def solve(
        self,
        req: SolveRequest,
        *,
        tenant: str | None = None,
        resume: TaskCheckpoint | None = None,
        checkpoint: Checkpointer | None = None,
        durable: bool = False,
        started_at: float | None = None,
        cancel: Cancel | None = None,
    ) -> SolveResult:
        """Run a task to its result. ``resume`` continues a checkpointed task if it may be resumed for ``req``
        (``resumable``; else the task starts afresh from ``req``); ``checkpoint`` is called with the
        task's state after every plan and every finished step (serialised, never concurrently). ``durable`` marks a
        task that can be redelivered, so its worker calls are made idempotent by (task, round, step).
        ``started_at`` (unix seconds) is when the task first started, in an earlier delivery perhaps: wall-time
        budgets and ``latency_s`` count from it. ``cancel``, once set by the task's owner (services/executor/
        cancels.py), stops it like a spent budget: no further call starts, the result carries what ran.
        ``tenant``: whose task it is (the subject it came on, docs/tenancy.md): its progress goes to that tenant's
        subjects and its worker calls are keyed by ``<tenant>.<task_id>``, so equal ids of two tenants never meet."""
        started = time.monotonic()
        task_id = req.task_id or (resume.task_id if resume else None) or uuid.uuid4().hex
        error = validate(req, self.pool, self.settings)
        if error is not None:
            return SolveResult(task_id=task_id, error=error)
        resume = self.resumable(resume, req)
        state = TaskState.resume(resume, req) if resume is not None else TaskState(task_id, req)
        if started_at is not None:
            state.started_at = started_at
            state.wall_offset_s = max(0.0, time.time() - started_at)
        source = PlannerSource(self.transport, self.settings.plan_timeout_s)
        result = await self.execute(
            state,
            source,
            started=started,
            checkpoint=checkpoint,
            durable=durable,
            cancel=cancel,
            tenant=tenant,
        )
        if self.settings.record_path and req.reference is not None:  # serve-to-learn (executor/recording.py)
            reference = as_reference(req.reference, req.domain)
            await record_served(Path(self.settings.record_path), req, result, self.pool, reference)
        return result

    def resumable(self, cp: TaskCheckpoint | None, req: SolveRequest) -> TaskCheckpoint | None:
        """``cp`` when it may be resumed for the delivered ``req`` (services/executor/checkpoints.py); else None,
        with a warning: the task then starts afresh from ``req``, the authoritative request. None too when ``req``
        itself is invalid (its typed error is the task's result; there is nothing to resume)."""
        if cp is None or validate(req, self.pool, self.settings) is not None:
            return None
        view = [w.name for w in self.pool.subset(req.pool)]
        error = checkpoint_error(
            cp, req, view, max_steps=step_cap(req, self.settings), settings=self.settings
        )
        if error is None:
            return cp
        log.warning(
            "checkpoint refused; starting afresh from the submitted request",
            task_id=req.task_id,
            field=error.field,
            reason=error.message,
        )
        return None

    async def execute(
        self,
        state: TaskState,
        source: WorkflowSource,
        *,
        started: float | None = None,
        first_round: int = 0,
        checkpoint: Checkpointer | None = None,
        durable: bool = False,
        cancel: Cancel | None = None,
        tenant: str | None = None,
    ) -> SolveResult:
        """Run a validated task whose workflows come from ``source`` — the path solves and rollouts share.
        ``first_round`` numbers the first round run here (a rollout of the n-th recursive call runs round n);
        ``started`` (monotonic) is when this delivery began, for ``latency_s``; unset: now."""
        started = time.monotonic() if started is None else started
        task_id = state.task_id
        run = _TaskRun(
            self,
            state,
            source,
            checkpoint,
            durable=durable,
            first_round=first_round,
            cancel=cancel,
            tenant=tenant,
        )
        with (
            bound_contextvars(task_id=task_id),
            tracing.span("task", attributes={"conductor.task_id": task_id, "conductor.durable": durable}),
        ):
            result = await run.run()
        result = msgspec.structs.replace(result, latency_s=time.monotonic() - started + state.wall_offset_s)
        await run.emit(ProgressEvent(task_id=task_id, kind="done", error=result.error))
        return result

    async def progress(self, tenant: str | None, event: ProgressEvent) -> None:
        # Progress is best effort by design: a lost event never fails a task.
        try:
            await self.transport.progress(tenant, event)
        except Exception as exc:
            log.warning("progress event not published", kind=event.kind, error=repr(exc))


class _Progress:
    """Where one task's progress events go: its tenant's subject, unless its request turned them off (``on``).

    The step caller holds this, not a bound method of ``_TaskRun``, which holds the step caller: without that
    reference cycle a finished task (its state, records and request) is freed by reference counting the moment it
    ends, instead of waiting for the garbage collector, which the tuned thresholds run rarely
    (conductor/app/process.py): at 5,000 tasks in flight such garbage grew the executor by ~5 MiB a second."""

    __slots__ = ("ex", "on", "tenant")

    def __init__(self, ex: Executor, tenant: str | None, on: bool) -> None:
        self.ex, self.tenant, self.on = ex, tenant, on

    async def __call__(self, event: ProgressEvent) -> None:
        if self.on:
            await self.ex.progress(self.tenant, event)


class _TaskRun:
    """One delivery of one task. Nothing it owns refers back to it (``_Progress``)."""

    def __init__(
        self,
        ex: Executor,
        state: TaskState,
        source: WorkflowSource,
        checkpoint: Checkpointer | None,
        *,
        durable: bool,
        first_round: int = 0,
        cancel: Cancel | None = None,
        tenant: str | None = None,
    ) -> None:
        self.ex = ex
        self.tenant = tenant
        self._progress = _Progress(ex, tenant, state.request.progress)
        # The worker-call ledger's name for the task (services/worker_adapter/ledger.py): the tenant's own.
        self.call_id = task_key(tenant, state.task_id) if tenant else state.task_id
        self.source = source
        self.first_round = first_round
        self.durable = durable
        self.state = state
        self.req = state.request
        self.workers = ex.pool.subset(self.req.pool)
        self.meter = BudgetMeter(
            merge_budget(merge_budget(ex.settings.default_budget, ex.pool.budget), self.req.budget),
            spent=_budget_spent(state.all_rounds()),
            wall_offset_s=state.wall_offset_s,
        )
        self._checkpoint = checkpoint
        self._save_lock = asyncio.Lock() if checkpoint is not None else None
        self.deadline = (
            current_deadline()
        )  # the solve's requester's, when it sent one (conductor/liveness.py)
        self.cancel = cancel or Cancel()
        self.steps = StepCaller(
            transport=ex.transport,
            pool=ex.pool,
            req=self.req,
            workers=self.workers,
            task_id=state.task_id,
            call_id=self.call_id,
            durable=durable,
            work_timeout_s=ex.settings.work_timeout_s,
            meter=self.meter,
            emit=self._progress,
        )

    def _halt(self) -> ErrorInfo | None:
        """Why no further paid call may start: its owner cancelled the task, a budget ran out, or the requester's
        deadline passed (an abandoned solve: nobody will read its result, so nothing more is spent on it)."""
        if (cancelled := self.cancel.error()) is not None:
            return cancelled
        if (reason := self.meter.exceeded()) is not None:
            return _budget_error(reason)
        if expired(self.deadline):
            return ErrorInfo(
                code=ErrorCode.TIMEOUT, message="the requester's deadline passed; no further calls made"
            )
        return None

    async def emit(self, event: ProgressEvent) -> None:
        """The one place a task's progress events go out, unless its request turned them off."""
        await self._progress(event)

    async def save(self) -> None:
        if self._checkpoint is None or self._save_lock is None:
            return
        async with self._save_lock:
            await self._checkpoint(self.state.checkpoint(self.meter.elapsed()))

    async def run(self) -> SolveResult:
        """Plan (or take) and run each round in turn until one stops the task, then verify the standing answer.
        One coroutine for both (each task in flight holds every frame of its await chain)."""
        st, req = self.state, self.req
        error: ErrorInfo | None = None
        rnd = self.first_round + len(st.rounds)
        while rnd <= self.first_round + rounds_allowed(req, st.rounds or [st.current], self.ex.settings):
            structlog.contextvars.bind_contextvars(round=rnd)
            if st.workflow is None:
                error, stop = await self._plan_round(rnd)
                if stop:
                    break
            assert st.workflow is not None and st.current is not None
            outcome = await self._run_round(rnd, st.workflow)
            finished = msgspec.structs.replace(st.current, steps=outcome.steps, error=outcome.error)
            st.rounds.append(finished)
            st.current, st.workflow = None, None
            if outcome.error is not None:
                error = outcome.error
                st.answer = st.answer if st.answer is not None else best_so_far(outcome.steps)
                break
            st.answer = outcome.answer
            st.previous.append(
                PriorRound(
                    completion=finished.completion,
                    final_response=st.answer or "",
                    answers=step_answers(outcome.steps, req.domain),
                )
            )
            await self.save()
            rnd += 1
        structlog.contextvars.unbind_contextvars("round")
        parsed = policy_parsed(st.rounds)
        wanted = self.cancel.reason is None and (parsed is not False or self.source.verify_unparsed)
        verdict = await self._verify() if wanted else None  # a cancelled task's verdict has no reader
        if isinstance(verdict, ErrorInfo):  # the verifier is down: no verdict yet, the task is retried later
            error, verdict = verdict, None
        return SolveResult(
            task_id=st.task_id,
            answer=st.answer,
            workflows=st.rounds,
            usage=usage_summary(st.rounds),
            verdict=verdict,
            reward=judge(parsed, verdict, error).value,
            error=error,
        )

    def _ask(self, rnd: int) -> PlanRequest:
        """What this round's workflow depends on, as the planner would be asked it."""
        st, req = self.state, self.req
        return PlanRequest(
            task_id=st.task_id,
            question=req.question,
            workers=self.ex.pool.cards(self.workers),
            max_steps=step_cap(req, self.ex.settings),
            domain=req.domain,
            round=rnd,
            previous=st.previous,
            policy=req.policy,
        )

    async def _plan_round(self, rnd: int) -> tuple[ErrorInfo | None, bool]:
        """Get this round's workflow from the source. Returns (error, stop)."""
        st = self.state
        if (halt := self._halt()) is not None:
            return halt, True
        ask = self._ask(rnd)
        plan = await self.source.workflow(ask)
        self.meter.add_planner(plan.usage)
        if (
            plan.error is None
            and plan.workflow is not None
            and (invalid := workflow_error(plan, ask)) is not None
        ):
            log.warning("workflow refused", policy=plan.policy, reason=invalid.message)
            plan = msgspec.structs.replace(plan, workflow=None, error=invalid)
        record = _round_record(rnd, plan)
        if plan.error is not None or plan.workflow is None:
            st.rounds.append(record)
            return plan.error or ErrorInfo(
                code=ErrorCode.PLANNER_ERROR, message="planner sent no workflow"
            ), True
        if plan.handback:
            st.rounds.append(record)
            return None, True
        st.current, st.workflow = record, plan.workflow
        await self.save()
        await self.emit(
            ProgressEvent(task_id=st.task_id, kind="planned", round=rnd, steps_planned=len(plan.workflow))
        )
        return None, False

    def _run_round(self, rnd: int, wf: Workflow) -> Coroutine[None, None, RoundOutcome]:
        """``run_round``'s coroutine itself, not one awaiting it: one frame fewer held by every task in flight."""
        assert self.state.current is not None
        return run_round(
            rnd,
            wf,
            finished=self.state.current.steps,
            previous_answer=self.state.answer if rnd > 0 else None,
            caller=self.steps,
            halt=self._halt,
            step_done=self._step_done,
            saves=self._checkpoint is not None,
        )

    async def _step_done(self, record: StepRecord) -> None:
        self.state.add_step(record)
        await self.save()

    async def _verify(self) -> Verdict | ErrorInfo | None:
        """The verdict on the standing answer (services/executor/verifying.py ``task_verdict``)."""
        return await task_verdict(
            self.ex.transport, self.ex.settings, self.state.task_id, self.req, self.state.answer
        )


def _budget_spent(rounds: Sequence[RoundRecord]) -> Usage:
    summary = usage_summary(rounds)
    return msgspec.structs.replace(summary.total, calls=summary.total.calls - summary.planner.calls)


def _budget_error(reason: str) -> ErrorInfo:
    return ErrorInfo(code=ErrorCode.BUDGET_EXCEEDED, message=f"budget exceeded: {reason}")


def _round_record(rnd: int, plan: PlanReply) -> RoundRecord:
    return RoundRecord(
        round=rnd,
        policy=plan.policy,
        reasoning=plan.reasoning,
        completion=plan.completion,
        handback=plan.handback,
        card_rounds=plan.rounds,
        fallback_used=plan.fallback_used,
        planner_attempts=plan.attempts,
        planner_usage=plan.usage,
        error=plan.error,
        rejected=plan.rejected,
        policy_error=plan.policy_error,
    )

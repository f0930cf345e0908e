"""Run one round's workflow: each step starts as soon as every step it may see has finished, one worker call a step.

Steps run in workflow order semantically, so independent steps (access ``[]``) overlap in time without changing any
worker's inputs. The first failed step stops the round: the steps after it that have not started are recorded as
skipped, and so is every step that would start once no further paid call may (``halt``: a cancel, a spent budget,
an expired deadline). A worker's reply is believed only if it answers the worker asked (``_answering``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import structlog
from opentelemetry.trace import StatusCode

from conductor import metrics, tracing
from conductor.pool import Pool, WorkerSpec
from schemas.errors import ErrorCode, ErrorInfo
from schemas.plan import Workflow
from schemas.solve import ProgressEvent, SolveRequest, StepRecord
from schemas.work import WorkReply, WorkRequest
from services.executor.budget import BudgetMeter
from services.executor.messages import PREVIOUS_ROUND_SUBTASK, build_messages, granted_steps
from services.executor.transport import Transport

log = structlog.get_logger("conductor.executor")


class RoundOutcome:
    """The result of running one workflow: its step records, its final response or the error that stopped it."""

    def __init__(self, steps: list[StepRecord], answer: str | None, error: ErrorInfo | None) -> None:
        self.steps = steps
        self.answer = answer
        self.error = error


@dataclass(frozen=True, slots=True)
class StepCaller:
    """One task's worker calls: ``call_id`` keys them in the worker-call ledger (idempotent when ``durable``), each
    call's usage goes to ``meter`` and its ``step_done`` event to ``emit``."""

    transport: Transport
    pool: Pool
    req: SolveRequest
    workers: Sequence[WorkerSpec]
    task_id: str
    call_id: str
    durable: bool
    work_timeout_s: float
    meter: BudgetMeter
    emit: Callable[[ProgressEvent], Awaitable[None]]

    async def call(self, rnd: int, i: int, wf: Workflow, history: list[tuple[str, str]]) -> StepRecord:
        """One coroutine for the whole step (each task in flight holds one per frame of its await chain)."""
        worker = self.workers[wf.model_id[i]]
        step = (
            {"conductor.round": rnd, "conductor.step": i, "conductor.worker": worker.name}
            if tracing.enabled()
            else None  # not built, nor kept in this frame for the call's length, when tracing is off
        )
        with tracing.span(f"step {rnd}.{i}", attributes=step) as span:
            timeout = self.work_timeout_s
            remaining = self.meter.remaining_wall()
            if remaining is not None:
                timeout = min(timeout, max(remaining, 0.001))
            started = time.monotonic()
            reply = await self.transport.work(
                WorkRequest(
                    worker=worker.name,
                    messages=build_messages(
                        self.req.question, wf.subtasks[i], history, answer_format=self._answer_format(i, wf)
                    ),
                    task_id=self.call_id,
                    round=rnd,
                    step=i,
                    cache=self.req.cache,
                    idempotent=self.durable,
                ),
                timeout=timeout,
            )
            reply = _answering(reply, worker.name)
            metrics.step_finished(worker.name, reply.error, time.monotonic() - started)
            self.meter.add(reply.usage)
            await self.emit(
                ProgressEvent(
                    task_id=self.task_id,
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
            if span is not None and reply.error is not None:
                span.set_status(StatusCode.ERROR, reply.error.code)
            return _step_record(i, wf, worker.name, reply)

    def _answer_format(self, i: int, wf: Workflow) -> str | None:
        """The step's answer-format instruction: the pool's choice for the task's domain (conductor/answer_format.py)."""
        final = i == len(wf) - 1
        return self.pool.answer_format.for_step(
            self.req.domain, self.req.question, wf.subtasks[i], final=final
        )


async def run_round(
    rnd: int,
    wf: Workflow,
    *,
    finished: Sequence[StepRecord],
    previous_answer: str | None,
    caller: StepCaller,
    halt: Callable[[], ErrorInfo | None],
    step_done: Callable[[StepRecord], Awaitable[None]],
    saves: bool = True,
) -> RoundOutcome:
    """Run ``wf``'s steps but those ``finished`` before a restart (not run again). A step whose access is ``all``
    sees ``previous_answer`` (the earlier round's) first; each successful step is handed to ``step_done``.

    Each step runs as a task of its own, so that independent steps overlap and the next step's call overlaps
    ``step_done``'s checkpoint write (``saves``). A chain (each step sees the one before, so none can overlap)
    whose ``step_done`` writes nothing runs its steps one after another in this task: the same order and the same
    inputs, without a task per step, and a step's progress event leaves in one write with the next step's call."""
    chained = not saves and _chained(wf)
    state = _Round(wf, caller, halt, previous_answer, futures=not chained)
    for rec in finished:
        state.settle(rec.index, rec)

    async def run_step(i: int) -> None:
        assert state.done is not None
        if state.records[i] is not None:  # finished before a restart
            return
        seen = [await state.done[j] for j in granted_steps(i, wf.access_list[i])]
        if (history := state.begin(i, seen)) is not None:
            record = await caller.call(rnd, i, wf, history)
            if state.end(i, record):
                await step_done(record)

    if chained:
        for i in range(len(wf)):  # run_step's steps in this coroutine: no task, future or frame per step
            if state.records[i] is not None:
                continue
            seen = _all_recorded([state.records[j] for j in granted_steps(i, wf.access_list[i])])
            if (history := state.begin(i, seen)) is None:
                continue
            record = await caller.call(rnd, i, wf, history)
            if state.end(i, record):
                await step_done(record)
    else:
        tasks = [asyncio.create_task(run_step(i)) for i in range(len(wf))]
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
    steps = [r for r in state.records if r is not None]
    if state.stop_error is not None:
        return RoundOutcome(steps, None, state.stop_error)
    return RoundOutcome(steps, steps[-1].response, None)


class _Round:
    """One round's steps while it runs: their records, the error that stopped the round, and, when its steps run as
    tasks and wait for each other, a future per step (a chain finds each earlier step in ``records``)."""

    __slots__ = ("caller", "done", "halt", "previous_answer", "records", "stop_error", "wf")

    def __init__(
        self,
        wf: Workflow,
        caller: StepCaller,
        halt: Callable[[], ErrorInfo | None],
        previous_answer: str | None,
        *,
        futures: bool,
    ) -> None:
        self.wf, self.caller, self.halt, self.previous_answer = wf, caller, halt, previous_answer
        self.records: list[StepRecord | None] = [None] * len(wf)
        loop = asyncio.get_running_loop()
        self.done = [loop.create_future() for _ in range(len(wf))] if futures else None
        self.stop_error: ErrorInfo | None = None

    def settle(self, i: int, record: StepRecord) -> None:
        self.records[i] = record
        if self.done is not None:
            self.done[i].set_result(record)

    def begin(self, i: int, seen: list[StepRecord]) -> list[tuple[str, str]] | None:
        """Step ``i``'s history (``seen``: the records of the steps it sees), or None when it is skipped (so
        recorded): an earlier step failed, or no further paid call may start."""
        wf = self.wf
        if self.stop_error is not None or any(r.error is not None for r in seen):
            self.settle(i, _skipped(i, wf, self.caller.workers))
            return None
        if (stopped := self.halt()) is not None:
            self.stop_error = stopped
            self.settle(i, _skipped(i, wf, self.caller.workers))
            return None
        history = [(r.subtask, r.response) for r in seen]
        if self.previous_answer is not None and wf.access_list[i] == "all":
            history.insert(0, (PREVIOUS_ROUND_SUBTASK, self.previous_answer))
        return history

    def end(self, i: int, record: StepRecord) -> bool:
        """Record step ``i``'s call; whether it succeeded (then it goes to ``step_done``)."""
        if record.error is not None and self.stop_error is None:
            self.stop_error = record.error
        self.settle(i, record)
        return record.error is None


def _all_recorded(seen: list[StepRecord | None]) -> list[StepRecord]:
    """In a chain, every step a step sees ran (or was skipped) before it."""
    assert all(r is not None for r in seen)
    return [r for r in seen if r is not None]


def _chained(wf: Workflow) -> bool:
    """Whether every step sees the step before it: no two steps of ``wf`` can run at once."""
    return all(a == "all" or i - 1 in a for i, a in enumerate(wf.access_list) if i > 0)


def best_so_far(steps: list[StepRecord]) -> str | None:
    """When a round stops early, the latest completed step's response is the best answer it produced."""
    done = [s for s in steps if s.error is None and s.response]
    return done[-1].response if done else None


def _answering(reply: WorkReply, worker: str) -> WorkReply:
    """``reply`` if it answers a call to ``worker``. A reply naming another worker (misrouted, or forged by another
    client on the bus) is not believed: the step fails with a retryable ``worker_error`` (a durable task is
    redelivered and the call made again), and none of the reply's text or usage is kept. Error replies may name no
    worker (a responder that could not decode the request answers with an empty name) and are kept as they are."""
    if reply.error is not None or reply.worker == worker:
        return reply
    log.warning("worker reply for another worker refused", asked=worker, answered=reply.worker)
    error = ErrorInfo(
        code=ErrorCode.WORKER_ERROR,
        message=f"a reply in the name of worker {reply.worker!r} answered a call to {worker!r}; not believed",
        field="worker",
        retryable=True,
    )
    return WorkReply(worker=worker, error=error)


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
        error=ErrorInfo(
            code=ErrorCode.SKIPPED,
            message="step not run: an earlier step failed, the budget ran out or the task was stopped",
        ),
    )

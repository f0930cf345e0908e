"""Whether a stored checkpoint may be resumed for the task that was delivered: the submitted request is authoritative.

A checkpoint is read back from a KV bucket, so it is input like any other: a bug, an older writer or anyone with
write access to the bucket could have written it. Resumed as it stood, one replaced the submitted question (and
reference) with its own, and a plan or step record in it could hang the task or crash it with an ``IndexError``.

A checkpoint is resumed only when it is what this executor would have written for this task:

- its ``task_id`` is the task's and its ``request`` equals the delivered one (the decoded structs, field by field);
- its plan of the round in progress passes the same check as a fresh plan (``conductor.workflow``: indices inside
  the pool view, access only to earlier steps, the task's step cap, no empty plan), and its step records are steps
  of that plan: each index once and within the plan, with the plan's model id, subtask and access, the worker the
  view numbers so, and no error (failed steps are never saved);
- its finished rounds are numbered 0, 1, ... (at most ``max_rounds + 1``), each a complete run of steps
  ``0..n-1`` on workers of the view; the earlier rounds shown to a recursive call (``previous``) and the standing
  ``answer`` are exactly what those records produced.

Anything else is refused with a typed error (``internal``, naming the part at fault) that the caller logs before
starting the task afresh from the submitted request: a checkpoint that cannot be trusted in part cannot be trusted
at all. Starting afresh costs the planner call and repeats steps (a durable task's repeated steps are replayed by the
worker-adapter's call ledger when the new plan asks for the same calls). These checks make a checkpoint consistent,
not authentic: a writer who forges a consistent one (its own answer as a step's response) is kept out by the bus's
permissions — only executors may write checkpoints.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from conductor.workflow import WorkflowFormatError, validate_workflow
from schemas.errors import ErrorCode, ErrorInfo
from schemas.plan import PriorRound, Workflow
from schemas.solve import RoundRecord, SolveRequest, StepRecord
from schemas.tasks import TaskCheckpoint
from services.executor.config import ExecutorSettings
from services.executor.validation import rounds_allowed
from tasks.finals import step_answers


def refused(field: str, message: str) -> ErrorInfo:
    return ErrorInfo(code=ErrorCode.INTERNAL, message=f"checkpoint refused: {message}", field=field)


def checkpoint_error(
    cp: TaskCheckpoint,
    req: SolveRequest,
    view: Sequence[str],
    *,
    max_steps: int,
    settings: ExecutorSettings,
) -> ErrorInfo | None:
    """Why ``cp`` may not be resumed for the delivered ``req`` on the pool ``view`` (its workers' names, numbered as
    the Conductor sees them) with the task's step cap; None when it may."""
    if req.task_id is not None and cp.task_id != req.task_id:
        return refused("task_id", f"it belongs to task {cp.task_id!r}")
    if cp.request != req:
        return refused("request", "its request differs from the submitted one")
    allowed = rounds_allowed(req, cp.rounds, settings)
    if len(cp.rounds) > allowed + 1:
        return refused("rounds", f"{len(cp.rounds)} rounds for a task of at most {allowed + 1}")
    for i, rnd in enumerate(cp.rounds):
        if rnd.round != i:
            return refused(f"rounds[{i}].round", f"round {rnd.round} recorded in place {i}")
    if cp.workflow is None:
        return _finished_error(cp.rounds, cp, view, max_steps)
    if not cp.rounds:
        return refused("workflow", "a plan without the record of its round")
    return _finished_error(cp.rounds[:-1], cp, view, max_steps) or _current_error(
        cp.rounds[-1], cp.workflow, view, max_steps
    )


def _current_error(rnd: RoundRecord, wf: Workflow, view: Sequence[str], max_steps: int) -> ErrorInfo | None:
    """The round in progress: its plan is valid and its records are finished steps of that plan."""
    try:
        validate_workflow(wf, n_workers=len(view), max_steps=max_steps)
    except WorkflowFormatError as exc:
        return refused("workflow", str(exc))
    if rnd.error is not None or rnd.handback:
        return refused(f"rounds[{rnd.round}]", "the round in progress is recorded as ended")
    seen: set[int] = set()
    for k, rec in enumerate(rnd.steps):
        where = f"rounds[{rnd.round}].steps[{k}]"
        if not 0 <= rec.index < len(wf) or rec.index in seen:
            return refused(f"{where}.index", f"step {rec.index} is not a step of the plan, or recorded twice")
        seen.add(rec.index)
        i = rec.index
        planned = (wf.model_id[i], wf.subtasks[i], wf.access_list[i])
        if (rec.model_id, rec.subtask, rec.access) != planned:
            return refused(where, f"the record of step {i} is not the plan's step {i}")
        if (error := _record_error(rec, where, view)) is not None:
            return error
    return None


def _finished_error(
    rounds: Sequence[RoundRecord], cp: TaskCheckpoint, view: Sequence[str], max_steps: int
) -> ErrorInfo | None:
    """Finished rounds: each ran steps 0..n-1 to the end, and ``previous`` and ``answer`` are what they produced."""
    produced: list[PriorRound] = []
    for rnd in rounds:
        where = f"rounds[{rnd.round}]"
        if rnd.error is not None or rnd.handback or not 0 < len(rnd.steps) <= max_steps:
            return refused(
                where, "a finished round of a running task ran between 1 and max_steps steps to the end"
            )
        for k, rec in enumerate(rnd.steps):
            if rec.index != k:
                return refused(f"{where}.steps[{k}].index", f"step {rec.index} recorded in place {k}")
            if (error := _record_error(rec, f"{where}.steps[{k}]", view)) is not None:
                return error
        answers = step_answers(rnd.steps, cp.request.domain)
        produced.append(
            PriorRound(completion=rnd.completion, final_response=rnd.steps[-1].response, answers=answers)
        )
    # a checkpoint written before schema 13 shows no step answers: the same rounds without them
    older = [msgspec.structs.replace(p, answers=[]) for p in produced]
    if list(cp.previous) not in (produced, older):
        return refused("previous", "the earlier rounds shown to the Conductor are not the recorded ones")
    if cp.answer != (produced[-1].final_response if produced else None):
        return refused("answer", "the standing answer is not the last round's final response")
    return None


def _record_error(rec: StepRecord, where: str, view: Sequence[str]) -> ErrorInfo | None:
    if rec.error is not None:
        return refused(f"{where}.error", "a failed step is never saved")
    if not 0 <= rec.model_id < len(view) or rec.worker != view[rec.model_id]:
        return refused(
            f"{where}.worker", f"model {rec.model_id} is not worker {rec.worker!r} in the task's pool view"
        )
    return None

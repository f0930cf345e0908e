"""Serve-to-learn: served tasks that carry a reference append their workers' answers to a replay table.

Off unless ``CONDUCTOR_RECORD_PATH`` names a file (docs/replay.md, "Record your own pool"). Only solves are
recorded — rollouts never — and only when the request carries a reference, so every record can be graded. Of a
task's steps, those that saw no earlier answer are recorded (a step that saw others answered a different prompt
than the question alone); each with the exact prompt the executor built for it, its text and its billed usage.
One task is one record (``set`` = ``served``, ``id`` = the task id), appended as one gzip member
(tasks/recording.py), so several executors may share the file.

Privacy: the file holds what users asked and what the models answered, verbatim (not the tenant or any key). It is
written with mode 0600; whoever turns it on owns its retention. A failed write is logged and never fails the task.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import structlog

from conductor.pool import Pool
from schemas.solve import RoundRecord, SolveRequest, SolveResult, StepRecord
from schemas.verify import Reference
from services.executor.messages import build_messages, granted_steps
from tasks.recording import Answer, Record, RecordError, answer, append_member, record

SERVED_SET = "served"

log = structlog.get_logger("conductor.executor")


def answered_alone(rnd: RoundRecord, step: StepRecord) -> bool:
    """Whether the step's prompt was the question and its own subtask alone (services/executor/core.py: integer
    access grants this round's steps; ``all`` in a later round also grants the previous round's answer)."""
    return not granted_steps(step.index, step.access) and (rnd.round == 0 or step.access != "all")


def _answers(req: SolveRequest, result: SolveResult, pool: Pool) -> list[tuple[str, Answer]]:
    found = []
    for rnd in result.workflows:
        for step in rnd.steps:
            if step.error is not None or not answered_alone(rnd, step):
                continue
            final = step.index == len(rnd.steps) - 1
            fmt = pool.answer_format.for_step(req.domain, req.question, step.subtask, final=final)
            [message] = build_messages(req.question, step.subtask, [], answer_format=fmt)
            usage = step.usage
            got = answer(
                step.response,
                message.content,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cost_usd=usage.cost_usd,
            )
            found.append((step.worker, got))
    return found


def served_record(
    req: SolveRequest, result: SolveResult, pool: Pool, reference: Reference | None
) -> Record | None:
    """The task's record, or None: no reference, or no step that answered the question alone."""
    if reference is None:
        return None
    answers = _answers(req, result, pool)
    if not answers:
        return None
    return record(
        set_name=SERVED_SET,
        item_id=result.task_id,
        question=req.question,
        reference=reference,
        domain=req.domain,
        answers=answers,
    )


async def record_served(
    path: Path, req: SolveRequest, result: SolveResult, pool: Pool, reference: Reference | None
) -> None:
    """Append the task's record (``reference``: the request's, typed), off the event loop; best effort: a failure
    is a warning, the task's result stands."""
    rec = served_record(req, result, pool, reference)
    if rec is None:
        return
    try:
        await asyncio.to_thread(append_member, path, rec)
    except (OSError, RecordError) as exc:
        log.warning("served answers not recorded", path=str(path), task_id=result.task_id, error=repr(exc))

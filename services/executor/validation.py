"""Semantic checks on what the executor is handed that the schema cannot express: a solve request (each failure
names the field) and a workflow from the planner (checked again here, whoever wrote it).

The schema's bounds (``schemas/solve.py``: non-blank question, non-empty pool, ``max_steps`` >= 1, ``max_rounds``
>= 0, positive budget limits) are checked when the request is decoded (``conductor.endpoints.serve``, the durable
intake), before it gets here; what is left depends on this deployment (its pool and caps) or on more than one field.
"""

from __future__ import annotations

from collections.abc import Sequence

from conductor.pool import Pool
from conductor.workflow import WorkflowFormatError, validate_workflow
from schemas.errors import ErrorCode, ErrorInfo
from schemas.plan import PlanReply, PlanRequest
from schemas.solve import RoundRecord, SolveRequest
from services.executor.config import ExecutorSettings

TASK_ID_RULE = "task_id must be 1-128 ASCII letters, digits, '-', '_' or '.' (no '..', no '.' at either end)"


def bad_request(message: str, field: str) -> ErrorInfo:
    return ErrorInfo(code=ErrorCode.BAD_REQUEST, message=message, field=field)


def validate(req: SolveRequest, pool: Pool, settings: ExecutorSettings) -> ErrorInfo | None:
    """Semantic checks the schema cannot express; each failure names the field."""
    if len(req.question) > settings.max_question_chars:
        return bad_request(f"question exceeds {settings.max_question_chars} characters", "question")
    if req.task_id is not None and not valid_task_id(req.task_id):
        return bad_request(TASK_ID_RULE, "task_id")
    if req.pool is not None and (error := validate_pool(req.pool, pool)) is not None:
        return error
    if req.max_steps is not None and req.max_steps > settings.max_steps_cap:
        return bad_request(f"max_steps must be within 1..{settings.max_steps_cap}", "max_steps")
    if req.max_rounds > settings.max_rounds_cap:
        return bad_request(f"max_rounds must be within 0..{settings.max_rounds_cap}", "max_rounds")
    return None


def validate_pool(names: list[str], pool: Pool) -> ErrorInfo | None:
    """A pool view: each name a worker of this deployment, each once. The error names the entry at fault (the
    second mention of a repeated worker), since a view's order is its numbering."""
    known = set(pool.names())
    for i, name in enumerate(names):
        if name not in known:
            return bad_request(f"unknown worker {name!r}; known: {sorted(known)}", f"pool[{i}]")
        if name in names[:i]:
            return bad_request(f"pool names worker {name!r} twice", f"pool[{i}]")
    return None


def valid_task_id(task_id: str) -> bool:
    """Task ids become NATS subject tokens and KV keys: ASCII letters, digits and ``-_.`` only (``str.isalnum``
    alone would let through letters like ``é`` that a KV key refuses)."""
    return (
        0 < len(task_id) <= 128
        and all((c.isascii() and c.isalnum()) or c in "-_." for c in task_id)
        and ".." not in task_id
        and not task_id.startswith(".")
        and not task_id.endswith(".")
    )


def step_cap(req: SolveRequest, settings: ExecutorSettings) -> int:
    """The most steps one of the task's workflows may have: the request's ``max_steps`` or the deployment's default,
    never above the deployment's cap."""
    return min(req.max_steps or settings.default_max_steps, settings.max_steps_cap)


def rounds_allowed(
    req: SolveRequest, records: Sequence[RoundRecord | None], settings: ExecutorSettings
) -> int:
    """The recursion rounds after the first a task may run: the request's ``max_rounds``, or those its first plan's
    policy card asks for (``RoundRecord.card_rounds``: a policy trained to decide from the first round's results,
    issue 33), whichever is more — never above the deployment's cap. ``records``: the task's rounds so far, or the
    round in progress when none has finished (``None`` before the first plan)."""
    first = next((r for r in records if r is not None), None)
    wanted = min(first.card_rounds, settings.max_rounds_cap) if first is not None else 0
    return max(req.max_rounds, wanted)


def workflow_error(plan: PlanReply, ask: PlanRequest) -> ErrorInfo | None:
    """Why the executor will not run ``plan.workflow``, checked against what was asked (the pool view's size, the
    step cap, and three empty lists only on a recursion round) by the one definition of a valid workflow
    (``conductor.workflow``). The planner parses the policy's text with the same rules, so a workflow that fails here
    is a planner of other rules, a bug or a forgery; running it would hang (access to a later step), wrap around
    (``model_id`` -1), fail deep inside (99) or pay for more steps than allowed.

    Deterministic, so never retried. The code says whose text it is: a model policy's own sample (a
    ``format_error``: its reward is 0, docs/method.md §3) or a baseline's or the fallback's (a ``planner_error``:
    the planner's bug, no reward of its own)."""
    assert plan.workflow is not None
    try:
        validate_workflow(
            plan.workflow, n_workers=len(ask.workers), max_steps=ask.max_steps, allow_empty=bool(ask.previous)
        )
    except WorkflowFormatError as exc:
        sampled = (
            plan.attempts > 0 and not plan.fallback_used
        )  # baselines report 0 attempts (services/planner)
        return ErrorInfo(
            code=ErrorCode.FORMAT_ERROR if sampled else ErrorCode.PLANNER_ERROR,
            message=f"the workflow of policy {plan.policy!r} fails the executor's check: {exc}",
        )
    return None

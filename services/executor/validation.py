"""Semantic checks on a solve request that the schema cannot express; each failure names the field.

The schema's bounds (``schemas/solve.py``: non-blank question, non-empty pool, ``max_steps`` >= 1, ``max_rounds``
>= 0, positive budget limits) are checked when the request is decoded (``conductor.endpoints.serve``, the durable
intake), before it gets here; what is left depends on this deployment (its pool and caps) or on more than one field.
"""

from __future__ import annotations

from conductor.pool import Pool
from schemas.errors import ErrorCode, ErrorInfo
from schemas.solve import SolveRequest
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

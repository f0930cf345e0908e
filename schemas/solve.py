"""The public solve API: a question in, the answer and the workflows that produced it out.

Clients send JSON (``SolveRequest``) to ``conductor.solve`` and get JSON (``SolveResult``) back. Step progress is
published on ``conductor.progress.<task_id>``.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from schemas import SCHEMA_VERSION
from schemas.errors import ErrorInfo
from schemas.plan import Access
from schemas.usage import Usage, UsageSummary
from schemas.verify import Reference, Verdict

SOLVE_SUBJECT = "conductor.solve"
"""Request/reply: ``SolveRequest`` JSON in, ``SolveResult`` JSON out. Queue group ``executor``."""

PROGRESS_SUBJECT_PREFIX = "conductor.progress"


def progress_subject(task_id: str) -> str:
    """Per-task progress subject; subscribe to ``conductor.progress.*`` for all tasks."""
    return f"{PROGRESS_SUBJECT_PREFIX}.{task_id}"


class Budget(msgspec.Struct, frozen=True, kw_only=True):
    """Per-task limits; None means unlimited. The executor stops and returns the best answer so far."""

    max_calls: int | None = None
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    max_wall_s: float | None = None


class SolveRequest(msgspec.Struct, frozen=True, kw_only=True):
    question: str
    task_id: str | None = None  # generated when absent; also the dedup key for durable intake
    pool: list[str] | None = None  # subset of worker names; None = the whole configured pool
    max_steps: int | None = None  # None = the deployment default (5, PAPER.md §1)
    max_rounds: int = 0  # recursion rounds after the first (PAPER.md §5)
    domain: str | None = None  # answer-format hint: "math", "mcq", "code", "general", ...
    reference: str | Reference | None = None  # ground truth; when given the result carries a verdict
    policy: str | None = None  # planner policy override, e.g. "single", "moa"
    budget: Budget | None = None
    cache: bool = False
    # Publish progress events on conductor.progress.<task_id> (a few per step); batch clients and training rollouts,
    # which never watch them, turn them off and save the executor that work.
    progress: bool = True


class StepRecord(msgspec.Struct, frozen=True, kw_only=True):
    index: int
    model_id: int  # the ordinal the Conductor wrote
    worker: str  # the pool name it maps to
    subtask: str
    access: Access
    response: str = ""
    usage: Usage = Usage()
    latency_s: float = 0.0
    cached: bool = False
    error: ErrorInfo | None = None


class RoundRecord(msgspec.Struct, frozen=True, kw_only=True):
    round: int
    policy: str
    reasoning: str = ""
    completion: str = ""
    steps: list[StepRecord] = []
    handback: bool = False  # the Conductor returned three empty lists: previous answer kept
    fallback_used: bool = False
    planner_attempts: int = 1
    planner_usage: Usage = Usage()
    error: ErrorInfo | None = None


class SolveResult(msgspec.Struct, frozen=True, kw_only=True):
    task_id: str
    answer: str | None = None
    workflows: list[RoundRecord] = []
    usage: UsageSummary = UsageSummary()
    verdict: Verdict | None = None
    reward: float | None = None  # PAPER.md §3 reward when a reference was given (None if verification failed)
    error: ErrorInfo | None = None
    latency_s: float = 0.0
    schema_version: int = SCHEMA_VERSION


ProgressKind = Literal["accepted", "planned", "step_started", "step_done", "round_done", "done"]


class ProgressEvent(msgspec.Struct, frozen=True, kw_only=True):
    task_id: str
    kind: ProgressKind
    round: int = 0
    step: int | None = None
    worker: str | None = None
    subtask: str | None = None
    steps_planned: int | None = None
    response_preview: str | None = None
    usage: Usage | None = None
    error: ErrorInfo | None = None

"""Planner subject: a question and a pool view in, a Conductor workflow out."""

from __future__ import annotations

from typing import Literal

import msgspec

from schemas.errors import ErrorInfo
from schemas.usage import Usage

PLAN_SUBJECT = "conductor.plan"
"""Request/reply: ``PlanRequest`` in, ``PlanReply`` out. Queue group ``planner``."""

Access = Literal["all"] | list[int]
"""One step's access: every earlier step (``"all"``) or the listed earlier step indices (``[]`` = none)."""


class WorkerCard(msgspec.Struct, frozen=True, kw_only=True):
    """How one pool member is shown to the Conductor: an ordinal and operator-written metadata."""

    index: int
    description: str
    name: str | None = None  # shown only when the pool is configured to reveal names (PAPER.md §1)


class Workflow(msgspec.Struct, frozen=True, kw_only=True):
    """The three equal-length lists the Conductor writes. Zero steps means "hand the answer back" (recursion)."""

    model_id: list[int]
    subtasks: list[str]
    access_list: list[Access]

    def __len__(self) -> int:
        return len(self.model_id)


class PriorRound(msgspec.Struct, frozen=True, kw_only=True):
    """What a recursive call sees of an earlier round: its own completion and the final response it produced."""

    completion: str
    final_response: str


class PlanRequest(msgspec.Struct, frozen=True, kw_only=True):
    task_id: str
    question: str
    workers: list[WorkerCard]
    max_steps: int = 5
    domain: str | None = None
    round: int = 0
    previous: list[PriorRound] = []  # non-empty on recursion rounds
    policy: str | None = None  # override the configured policy by name, e.g. "moa" (a baseline)


class PlanReply(msgspec.Struct, frozen=True, kw_only=True):
    policy: str  # which policy produced the workflow (backend or baseline name)
    completion: str = ""  # the raw Conductor text (reasoning + lists); rendered text for baselines
    reasoning: str = ""
    workflow: Workflow | None = None
    attempts: int = 1  # samples drawn, including resamples after format failures
    fallback_used: bool = False  # the configured fallback planner wrote this workflow
    format_failures: list[str] = []  # the reason of each rejected sample
    usage: Usage = Usage()
    error: ErrorInfo | None = None
    policy_error: ErrorInfo | None = None  # the backend failure the fallback stood in for (fallback_used=True)

    @property
    def handback(self) -> bool:
        """Three empty lists: return the previous round's answer unchanged."""
        return self.workflow is not None and len(self.workflow) == 0

"""Planner subject: a question and a pool view in, a Conductor workflow out."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from schemas.contract import RequestReply
from schemas.errors import ErrorInfo
from schemas.usage import Usage

PLAN_SUBJECT = "conductor.plan"
"""Request/reply: ``PlanRequest`` in, ``PlanReply`` out. Queue group ``planner``."""

Access = Literal["all"] | list[Annotated[int, Meta(ge=0)]]
"""One step's access: every earlier step (``"all"``) or the listed earlier step indices (``[]`` = none)."""


class WorkerCard(msgspec.Struct, frozen=True, kw_only=True):
    """How one pool member is shown to the Conductor: an ordinal and operator-written metadata."""

    index: Annotated[
        int, Meta(ge=0, description="The ordinal the Conductor sees; cards are numbered 0..n-1.")
    ]
    description: Annotated[str, Meta(description="Operator-written metadata: what this worker is good at.")]
    name: str | None = None  # shown only when the pool is configured to reveal names (docs/method.md §1)


class Workflow(msgspec.Struct, frozen=True, kw_only=True):
    """The three equal-length lists the Conductor writes. Zero steps means "hand the answer back" (recursion)."""

    model_id: list[int]
    subtasks: list[str]
    access_list: list[Access]

    def __len__(self) -> int:
        return len(self.model_id)


class StepAnswer(msgspec.Struct, frozen=True, kw_only=True):
    """One step's final answer as a recursion round shows it (docs/method.md §5): short, so the Conductor can compare
    the steps' answers at a glance and decide whether to hand back or escalate."""

    step: Annotated[int, Meta(ge=0)]
    model_id: Annotated[int, Meta(ge=0)]  # the ordinal the Conductor wrote for that step
    answer: str | None = None  # the step's final answer, compacted; None when it stated none


class PriorRound(msgspec.Struct, frozen=True, kw_only=True):
    """What a recursive call sees of an earlier round: its own completion, the final response it produced and each
    step's final answer (schema 13; empty in payloads written before it)."""

    completion: str
    final_response: str
    answers: list[StepAnswer] = []


class PlanRequest(msgspec.Struct, frozen=True, kw_only=True):
    task_id: str
    question: Annotated[
        str, Meta(min_length=1, pattern=r"\S", description="Must contain a non-space character.")
    ]
    workers: Annotated[
        list[WorkerCard], Meta(min_length=1, description="The pool view, numbered 0..n-1 in order.")
    ]
    max_steps: Annotated[int, Meta(ge=1, description="Up to the planner's CONDUCTOR_MAX_STEPS_CAP.")] = 5
    domain: str | None = None
    round: Annotated[int, Meta(ge=0)] = 0
    previous: list[PriorRound] = []  # non-empty on recursion rounds
    policy: str | None = None  # override the configured policy by name, e.g. "moa" (a baseline)


REJECTED_TEXT_CHARS = 2000
"""How much of a rejected sample's text is kept: enough to see what the policy wrote, bounded per sample."""


class RejectedSample(msgspec.Struct, frozen=True, kw_only=True):
    """A policy sample the planner could not use, kept so that a fallback's cause can be read afterwards."""

    reason: str  # the format failure ("missing_lists: ...", "(cut off at max_tokens)" when generation was)
    text: str = ""  # the sample's first REJECTED_TEXT_CHARS characters


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
    policy_error: ErrorInfo | None = (
        None  # the backend failure the fallback stood in for (fallback_used=True)
    )
    rejected: list[RejectedSample] = []  # each unparseable sample: its reason and the start of its text
    # Schema 13: the recursion rounds after the first that the serving policy's card asks for (a policy trained to
    # decide from the first round's results, issue 33); the executor runs that many when the request asks fewer.
    rounds: Annotated[int, Meta(ge=0, le=8)] = 0

    @property
    def handback(self) -> bool:
        """Three empty lists: return the previous round's answer unchanged."""
        return self.workflow is not None and len(self.workflow) == 0


PLAN: RequestReply[PlanRequest, PlanReply] = RequestReply(
    subject=PLAN_SUBJECT,
    queue="planner",
    title="plan",
    request=PlanRequest,
    reply=PlanReply,
    description="Internal (executor -> planner): a question and the pool as numbered cards in, the Conductor's "
    "workflow (three equal-length lists) or a baseline's out; format failures are resampled, then a fallback plans.",
    error_reply=lambda info, _request: PlanReply(policy="", error=info),
)

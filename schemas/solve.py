"""The public solve API: a question in, the answer and the workflows that produced it out.

Every subject of it names the tenant — the NATS user a client connects as, which alone may use that tenant's
subjects (conductor/access.py, docs/tenancy.md): a tenant sends JSON (``SolveRequest``) to
``conductor.solve.<tenant>`` and gets JSON (``SolveResult``) back; step progress is published on
``conductor.progress.<tenant>.<task_id>``; the tenant may stop its task with a ``CancelRequest`` on
``conductor.cancel.<tenant>.<task_id>``.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from schemas import SCHEMA_VERSION
from schemas.contract import Event, RequestReply
from schemas.errors import ErrorInfo
from schemas.plan import Access, RejectedSample
from schemas.usage import Usage, UsageSummary
from schemas.verify import Reference, Verdict

TENANT_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
"""A tenant's name: one subject token (and a NATS user name), so ``conductor.results.<tenant>.>`` is its own."""
_TENANT = re.compile(TENANT_PATTERN)


def valid_tenant(name: str) -> bool:
    return bool(_TENANT.match(name))


SOLVE_SUBJECT = "conductor.solve"
"""Request/reply on ``conductor.solve.<tenant>``: ``SolveRequest`` JSON in, ``SolveResult`` JSON out. Queue group
``executor``. (The family's root: metrics label it with this.)"""


def solve_subject(tenant: str) -> str:
    """Where ``tenant`` sends its solves (``SOLVE``)."""
    return f"{SOLVE_SUBJECT}.{tenant}"


PROGRESS_SUBJECT_PREFIX = "conductor.progress"


def progress_subject(tenant: str, task_id: str) -> str:
    """Per-task progress subject (``PROGRESS``); a tenant may subscribe to ``conductor.progress.<tenant>.>``."""
    return f"{PROGRESS_SUBJECT_PREFIX}.{tenant}.{task_id}"


CANCEL_SUBJECT_PREFIX = "conductor.cancel"


def cancel_subject(tenant: str, task_id: str) -> str:
    """Where a task's tenant asks for it to stop (``CANCEL``)."""
    return f"{CANCEL_SUBJECT_PREFIX}.{tenant}.{task_id}"


PositiveInt = Annotated[int, Meta(gt=0)]
PositiveFloat = Annotated[float, Meta(gt=0)]
NonBlank = Annotated[
    str, Meta(min_length=1, pattern=r"\S", description="Must contain a non-space character.")
]


class Budget(msgspec.Struct, frozen=True, kw_only=True):
    """Per-task limits; None means unlimited. The executor stops and returns the best answer so far."""

    max_calls: Annotated[PositiveInt | None, Meta(description="Worker calls.")] = None
    max_tokens: Annotated[PositiveInt | None, Meta(description="Tokens, worker and planner, in and out.")] = (
        None
    )
    max_cost_usd: Annotated[PositiveFloat | None, Meta(description="Cost in USD, worker and planner.")] = None
    max_wall_s: Annotated[
        PositiveFloat | None, Meta(description="Wall time in seconds, across redeliveries.")
    ] = None


class SolveRequest(msgspec.Struct, frozen=True, kw_only=True):
    question: Annotated[NonBlank, Meta(description="The question to answer.")]
    task_id: Annotated[
        str | None,
        Meta(
            description="Generated when absent; the dedup key of durable intake. 1-128 ASCII letters, digits, "
            "'-', '_' or '.' (no '..', no '.' at either end)."
        ),
    ] = None
    pool: Annotated[
        Annotated[list[str], Meta(min_length=1)] | None,
        Meta(description="Subset of the pool's worker names, each once; unset: the whole configured pool."),
    ] = None
    max_steps: Annotated[
        Annotated[int, Meta(ge=1)] | None,
        Meta(description="Most steps per workflow, up to the deployment's cap; unset: its default (5)."),
    ] = None  # docs/method.md §1: at most 5 steps
    max_rounds: Annotated[
        int,
        Meta(ge=0, description="Recursion rounds after the first, up to the deployment's cap (default 4)."),
    ] = 0  # docs/method.md §5
    domain: Annotated[
        str | None, Meta(description='Answer-format hint: "math", "mcq", "code", "general", ...')
    ] = None
    reference: Annotated[
        str | Reference | None,
        Meta(description="Ground truth; when given the result carries a verdict and reward."),
    ] = None
    policy: Annotated[
        str | None,
        Meta(description='Planner policy override: "moa", "single:2", "refine:3", "conductor", ...'),
    ] = None
    budget: Budget | None = None
    cache: Annotated[bool, Meta(description="Opt in to the content-addressed worker-call cache.")] = False
    # Publish progress events on conductor.progress.<task_id> (a few per step); batch clients and training rollouts,
    # which never watch them, turn them off and save the executor that work.
    progress: Annotated[
        bool, Meta(description="Publish progress events on conductor.progress.<task_id>.")
    ] = True
    # Schema 8 named here the role that may cancel the task. Since schema 9 the task's tenant (the subject it was
    # sent on) cancels it, and this field is ignored; it stays so that old requests still decode (rule 3).
    owner: Annotated[
        Annotated[str, Meta(pattern=TENANT_PATTERN)] | None,
        Meta(
            description="Deprecated, ignored since schema 9: a task is cancelled by its tenant, with a "
            "CancelRequest on conductor.cancel.<tenant>.<task_id>."
        ),
    ] = None
    # Schema 13: which of its API keys the gateway runs the task for. The executor echoes it into the result, and
    # the gateway reads back only a result that names the key it asked for (docs/tenancy.md).
    key: Annotated[
        str | None,
        Meta(
            description="The gateway's API key name the task is for; echoed in the result. Clients leave it unset."
        ),
    ] = None


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
    # Schema 13: the rounds after the first that the planning policy's card asks for (PlanReply.rounds)
    card_rounds: int = 0
    fallback_used: bool = False
    planner_attempts: int = 1
    planner_usage: Usage = Usage()
    error: ErrorInfo | None = None
    # Why a fallback planned (fallback_used): each policy sample it could not use, and the policy backend's
    # failure (its HTTP status and message) when the backend wrote nothing.
    rejected: list[RejectedSample] = []
    policy_error: ErrorInfo | None = None


class SolveResult(msgspec.Struct, frozen=True, kw_only=True):
    task_id: str
    answer: Annotated[
        str | None, Meta(description="The last step's response of the last round that ran.")
    ] = None
    workflows: Annotated[
        list[RoundRecord], Meta(description="One record per round: the plan and its steps.")
    ] = []
    usage: Annotated[
        UsageSummary, Meta(description="Tokens, cost and calls: per worker, planner, total.")
    ] = UsageSummary()
    verdict: Annotated[Verdict | None, Meta(description="Set when the request carried a reference.")] = None
    reward: Annotated[
        float | None,
        Meta(
            description="Training reward of the policy's own completion (1 correct, 0.5 wrong, 0 unparseable, also "
            "when a fallback planned after every sample failed to parse); unset when it cannot be known."
        ),
    ] = None  # docs/method.md §3: unset without a reference, when a failure stopped the workflow or its verification,
    # or when a fallback stood in for a policy backend that wrote nothing
    error: Annotated[ErrorInfo | None, Meta(description="Why there is no (complete) answer.")] = None
    latency_s: float = 0.0
    schema_version: Annotated[int, Meta(description="The schema version of the writer.")] = SCHEMA_VERSION
    # Schema 13: whose result this is, written by the executor. A reader treats a stored result or result event
    # naming another tenant (or key) than its own as absent: nats-server can be made to store a foreign message
    # under a tenant's key (a reply subject aimed there), and only the executor writes these fields.
    tenant: Annotated[
        str | None, Meta(description="The task's tenant, written by the executor (schema 13).")
    ] = None
    key: Annotated[
        str | None, Meta(description="The gateway API key name of the task, when it has one (schema 13).")
    ] = None


def belongs(result: SolveResult, tenant: str, task_id: str, key: str | None = None) -> bool:
    """Whether a stored result (or result event) is the one the executor wrote for ``tenant``'s ``task_id`` (and
    the gateway's ``key``): anything else found under that name was put there by someone else and is not believed."""
    return result.tenant == tenant and result.task_id == task_id and (key is None or result.key == key)


SOLVE: RequestReply[SolveRequest, SolveResult] = RequestReply(
    subject=SOLVE_SUBJECT + ".{tenant}",
    queue="executor",
    title="solve",
    request=SolveRequest,
    reply=SolveResult,
    description="The public solve API: a JSON SolveRequest in, a JSON SolveResult out (answer, workflows, usage, "
    "verdict). Bad input gets a result whose error names the field. Progress events: "
    "conductor.progress.<tenant>.<task_id>.",
    parameters={
        "tenant": "The NATS user sending the solve: only that user may publish here (conductor/access.py)."
    },
    error_reply=lambda info, request: SolveResult(
        task_id=(request.task_id or "") if request else "", error=info
    ),
)


class CancelRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Stop a running task: no further plan or worker call starts for it (one already running finishes and is
    paid for); its result, carrying what ran and its usage with the error ``cancelled``, goes where it always goes
    (the solve's reply, or the results bucket and event of a durable task).

    Unknown fields are refused (schema 13): any JSON object with a ``task_id`` — another tenant's result aimed at a
    cancel subject as a reply — would otherwise decode as a cancel. ``tenant``, when given, must be the subject's."""

    task_id: str
    reason: Annotated[str, Meta(max_length=500, description="Why, for the result's error message.")] = ""
    tenant: Annotated[
        Annotated[str, Meta(pattern=TENANT_PATTERN)] | None,
        Meta(description="The sender's tenant (schema 13); when set, it must be the subject's."),
    ] = None


CANCEL: Event[CancelRequest] = Event(
    title="cancel",
    address=CANCEL_SUBJECT_PREFIX + ".{tenant}.{task_id}",
    payload=CancelRequest,
    description="Stop a running task (the gateway sends it when its HTTP client hangs up). Heard by every executor; "
    "the one running the task starts no further call and answers with what ran. Best effort (core NATS): "
    "a sender repeats it until the task's result is in. A cancel for a task not started yet is remembered for a while.",
    parameters={
        "tenant": "The task's tenant (the NATS user that sent it): only that user may publish here "
        "(conductor/access.py).",
        "task_id": "The task's id.",
    },
)

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


PROGRESS: Event[ProgressEvent] = Event(
    title="progress",
    address=PROGRESS_SUBJECT_PREFIX + ".{tenant}.{task_id}",
    payload=ProgressEvent,
    description="One event per planned round and finished step, then `done`. Best effort (core NATS). Only the "
    "task's tenant may subscribe here.",
    parameters={
        "tenant": "The task's tenant (the NATS user that sent it).",
        "task_id": "The task's id (SolveRequest.task_id or generated).",
    },
)

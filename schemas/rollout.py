"""Rollout subject: the learner's completions in, rewards out (docs/method.md §3-§6).

A rollout is one Conductor completion the learner sampled, scored end to end: the executor parses it, runs its
workflow's worker calls and asks the verifier, by the same code path as a solve — but it never resamples and never
falls back, because the reward must judge the policy's own text. An unparseable completion scores 0 and its parse
error comes back with it; a verifier failure comes back as ``reward=None`` so the trainer masks the sample instead
of learning a wrong zero.

The policy never sees the reference: it travels here, from the learner to the executor, and from there only to the
verifier.

Two ways in (docs/learner.md, "Where rollouts run"). Pulled, the default: each rollout of a batch is a work item
(``RolloutItem``) on ``conductor.rollout.work.<run>``, kept by the JetStream work-queue stream ``CONDUCTOR_ROLLOUTS``,
and an executor fetches only as many items as it has free rollout slots, so a batch spreads over the replicas by
their free capacity; each item's ``RolloutOutcome`` comes back on ``conductor.rollout.results.<run>``, the run being
the sender's own token. Placed: the whole batch is one request on ``conductor.rollout``, which the queue group hands
to a random replica whatever its load (kept for executors older than the work queue).
"""

from __future__ import annotations

from typing import Annotated, TypeVar

import msgspec
from msgspec import UNSET, Meta, UnsetType

from schemas.contract import Event, RequestReply
from schemas.errors import ErrorInfo
from schemas.plan import PriorRound
from schemas.solve import Budget, NonBlank, SolveRequest, StepRecord
from schemas.usage import Usage
from schemas.verify import Reference, Verdict

T = TypeVar("T")

ROLLOUT_SUBJECT = "conductor.rollout"
"""Request/reply: ``RolloutBatch`` in, ``RolloutBatchResult`` out. Queue group ``executor``."""

MAX_ROLLOUTS_PER_BATCH = 256
"""A batch is one request: the paper's step is 4 questions x 64 rollouts = 256 (docs/method.md §4). A group is
usually split over several batches so that it fans out across executor replicas."""


class Rollout(msgspec.Struct, frozen=True, kw_only=True):
    """One sampled completion to score, and the solve it amounts to.

    ``request`` (schema 14) is that solve: the question the policy was shown; ``pool``, the view it saw in its order
    — ordinal ``i`` in the completion means ``request.pool[i]`` (a random k-subset of the deployment's workers,
    renumbered, docs/method.md §6); the reference, given to the verifier only; the domain, step cap, budget and
    cache. A rollout is one round of it (``round`` numbers the recursive call, ``previous`` the rounds it was shown)
    whose workflow is the completion, without progress events: so the request's ``max_rounds`` is 0 and its
    ``policy`` unset. ``solve`` is the request as the executor runs it.

    Rollouts written before schema 14 carry the solve's fields at the top level instead (``question``, ``pool``,
    ``reference``, ``domain``, ``max_steps``, ``budget``, ``cache``); they still decode (rule 3) and ``solve`` reads
    them the same way. A rollout giving both forms, or neither, is refused on decode."""

    id: Annotated[str, Meta(min_length=1, max_length=256, description="The learner's id for this sample.")]
    completion: Annotated[str, Meta(description="The policy's completion text, scored as written.")]
    request: Annotated[
        SolveRequest | None,
        Meta(
            description="The solve this rollout amounts to (schema 14): its pool is the view the policy saw, in its "
            "order, its reference goes to the verifier only; max_rounds 0, no policy."
        ),
    ] = None
    round: Annotated[int, Meta(ge=0, description="0 for a first call; n for the n-th recursive call.")] = 0
    previous: Annotated[
        list[PriorRound], Meta(description="Earlier rounds' completions and final responses (recursion).")
    ] = []
    policy_version: Annotated[
        str, Meta(description="Recorded with the result; never changes the scoring.")
    ] = ""
    # The schema-13 form of the solve, kept so that its rollouts still decode (absent: ``UNSET``, not encoded);
    # none is given with ``request``.
    question: Annotated[NonBlank, Meta(description="Schema 13 form of request.question.")] | UnsetType = UNSET
    pool: (
        Annotated[
            list[Annotated[str, Meta(min_length=1)]],
            Meta(min_length=1, description="Schema 13 form of request.pool."),
        ]
        | UnsetType
    ) = UNSET
    reference: (
        Annotated[str | Reference, Meta(description="Schema 13 form of request.reference.")] | UnsetType
    ) = UNSET
    domain: Annotated[str | None, Meta(description="Schema 13 form of request.domain.")] | UnsetType = UNSET
    max_steps: (
        Annotated[Annotated[int, Meta(ge=1)] | None, Meta(description="Schema 13 form of request.max_steps.")]
        | UnsetType
    ) = UNSET
    budget: Annotated[Budget | None, Meta(description="Schema 13 form of request.budget.")] | UnsetType = (
        UNSET
    )
    cache: Annotated[bool, Meta(description="Schema 13 form of request.cache.")] | UnsetType = UNSET

    def __post_init__(self) -> None:
        if (problem := _form_problem(self)) is not None:
            raise ValueError(problem)

    @property
    def solve(self) -> SolveRequest:
        """The solve this rollout amounts to, in either form: one round, no progress events (nobody watches them)."""
        if self.request is not None:
            return msgspec.structs.replace(self.request, progress=False)
        assert not isinstance(self.question, UnsetType) and not isinstance(self.pool, UnsetType)
        assert not isinstance(self.reference, UnsetType)  # both checked by __post_init__
        return SolveRequest(
            question=self.question,
            pool=list(self.pool),
            max_steps=_given(self.max_steps, None),
            max_rounds=0,
            domain=_given(self.domain, None),
            reference=self.reference,
            budget=_given(self.budget, None),
            cache=_given(self.cache, False),
            progress=False,
        )


_SCHEMA_13_FIELDS = ("question", "pool", "reference", "domain", "max_steps", "budget", "cache")


def _given(value: T | UnsetType, default: T) -> T:
    """A schema-13 field's value, or what an absent one meant then."""
    return default if isinstance(value, UnsetType) else value


def _form_problem(r: Rollout) -> str | None:
    """Why ``r`` is neither form of a rollout: the solve in ``request`` (schema 14), or in the top-level fields."""
    if r.request is None:
        missing = [f for f in ("question", "pool", "reference") if isinstance(getattr(r, f), UnsetType)]
        return (
            f"a rollout needs its request (schema 14), or {', '.join(missing)} (schema 13)"
            if missing
            else None
        )
    given = [f for f in _SCHEMA_13_FIELDS if not isinstance(getattr(r, f), UnsetType)]
    if given:
        return f"{given[0]} is given both in request and at the top level (schema 13 form); give request only"
    if r.request.pool is None:
        return "request.pool: a rollout names the view the policy saw, in its order"
    if r.request.reference is None:
        return "request.reference: a rollout is scored against its reference"
    if r.request.max_rounds or r.request.policy is not None:
        return "request: a rollout is one round whose workflow is its completion (max_rounds 0, no policy)"
    return None


class RolloutBatch(msgspec.Struct, frozen=True, kw_only=True):
    rollouts: Annotated[list[Rollout], Meta(min_length=1, max_length=MAX_ROLLOUTS_PER_BATCH)]


class RolloutResult(msgspec.Struct, frozen=True, kw_only=True):
    """What one rollout earned. ``reward`` is 1 / 0.5 / 0 (docs/method.md §3), ``None`` when it cannot be known
    (the verifier failed, or an infrastructure error stopped the workflow): the trainer masks it."""

    id: str
    reward: float | None = None
    parsed: bool = False
    parse_error: Annotated[
        ErrorInfo | None,
        Meta(description="Why the completion did not parse (format_error, reason in message)."),
    ] = None
    handback: bool = False  # a recursive call returned three empty lists: the previous answer stands
    answer: str | None = None
    verdict: Verdict | None = None
    steps: list[StepRecord] = []
    usage: Usage = Usage()
    error: Annotated[
        ErrorInfo | None,
        Meta(description="An infrastructure failure (worker, verifier, budget); reward unset."),
    ] = None
    latency_s: float = 0.0
    policy_version: str = ""


class RolloutBatchResult(msgspec.Struct, frozen=True, kw_only=True):
    results: list[RolloutResult] = []  # in the batch's order
    error: ErrorInfo | None = None


ROLLOUT: RequestReply[RolloutBatch, RolloutBatchResult] = RequestReply(
    subject=ROLLOUT_SUBJECT,
    queue="executor",
    title="rollout",
    request=RolloutBatch,
    reply=RolloutBatchResult,
    description="Training (learner -> executor): Conductor completions with their questions, pool views and "
    "references in; per completion the reward (1 correct, 0.5 wrong, 0 unparseable, unset when unverifiable), "
    "parse error, verdict, steps, usage and answer out. Same parse -> worker calls -> verify path as a solve, "
    "without resampling or fallback.",
    error_reply=lambda info, _request: RolloutBatchResult(error=info),
)


ROLLOUTS_STREAM = "CONDUCTOR_ROLLOUTS"
"""The work-queue stream of rollout items (memory storage: rollouts are not durable, a lost one is sent again)."""
ROLLOUTS_CONSUMER = "executor"
"""The executors' one durable pull consumer on it: each replica asks it for as many items as it has free slots."""


class RolloutItem(msgspec.Struct, frozen=True, kw_only=True):
    """One rollout as a work item. ``key`` is the sender's, unique per send (a retried batch gets new keys), and
    comes back with the outcome; ``deadline`` (unix seconds) is when the sender stops waiting: an item fetched after
    it is dropped unrun, one running at it is cancelled."""

    key: Annotated[str, Meta(min_length=1, max_length=256, description="The sender's id for this item.")]
    rollout: Rollout
    deadline: Annotated[float | None, Meta(description="Unix seconds; unset: no deadline.")] = None


class RolloutOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """What became of one item: its ``result`` (a masked one, ``reward`` unset, when it could not be scored), or
    ``error`` when the rollout was refused before anything ran (a bad request: the sender's bug, as for a batch)."""

    key: str
    result: RolloutResult | None = None
    error: ErrorInfo | None = None


ROLLOUT_WORK: Event[RolloutItem] = Event(
    title="rollout_work",
    address="conductor.rollout.work.{run}",
    payload=RolloutItem,
    description="Training (learner -> executor), pulled: one rollout per message on the JetStream work-queue "
    f"stream {ROLLOUTS_STREAM}; executors fetch only as many as they have free rollout slots (durable pull "
    f"consumer {ROLLOUTS_CONSUMER!r}) and answer on conductor.rollout.results.<run>. An item whose executor is lost "
    "is redelivered to another replica once its in-progress acknowledgements stop.",
    parameters={"run": "The sending client's token (one per rollout client): where its outcomes go."},
)

ROLLOUT_RESULTS: Event[RolloutOutcome] = Event(
    title="rollout_results",
    address="conductor.rollout.results.{run}",
    payload=RolloutOutcome,
    description="Training (executor -> learner): each pulled rollout's result, or the typed error that refused it, "
    "by item key. Only executors publish here; the sender keeps the first outcome per key and drops any other.",
    parameters={"run": "The token of the client that sent the items."},
)

"""Score the learner's rollouts (``conductor.rollout``): each completion runs the solve path, its workflow taken from
the completion as written instead of from the planner.

A rollout never resamples and never falls back: the reward must judge the policy's own text (docs/method.md §3).
So the completion goes through the one parser (``conductor.workflow.parse_completion``) against the pool view the
policy saw, and an unparseable one is a result — reward 0, its format error with the reason — not a failure, with
no worker called. A batch is checked whole before anything runs (a bad batch is the caller's bug: one typed
``bad_request`` naming ``rollouts[k].<field>``); then its rollouts run concurrently under the replica's rollout
slots, and a rollout that fails for any other reason is still a result, with ``reward=None`` so training masks it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import msgspec
import structlog

from conductor.endpoints import internal_error
from conductor.pool import Pool
from conductor.workflow import WorkflowFormatError, parse_completion
from schemas.errors import ErrorCode, ErrorInfo
from schemas.plan import PlanReply, PlanRequest
from schemas.rollout import Rollout, RolloutBatch, RolloutBatchResult, RolloutResult
from schemas.solve import SolveResult
from schemas.verify import Outcome
from services.executor.config import ExecutorSettings
from services.executor.core import Executor, TaskState
from services.executor.validation import bad_request, validate

log = structlog.get_logger("conductor.executor.rollouts")

ROLLOUT_POLICY = "rollout"
"""``RoundRecord.policy`` of a round whose workflow is the learner's completion."""


class GivenCompletion:
    """The workflow source of a rollout: the learner's completion, parsed exactly as the planner parses a sample
    (same pool size, step cap and hand-back rule), once."""

    verify_unparsed = False

    def __init__(self, completion: str) -> None:
        self.completion = completion

    async def workflow(self, ask: PlanRequest) -> PlanReply:
        try:
            parsed = parse_completion(
                self.completion,
                n_workers=len(ask.workers),
                max_steps=ask.max_steps,
                allow_empty=bool(ask.previous),
            )
        except WorkflowFormatError as exc:
            error = ErrorInfo(code=ErrorCode.FORMAT_ERROR, message=str(exc))  # "<reason>: <what is wrong>"
            return PlanReply(policy=ROLLOUT_POLICY, completion=self.completion, error=error)
        return PlanReply(
            policy=ROLLOUT_POLICY,
            completion=self.completion,
            reasoning=parsed.reasoning,
            workflow=parsed.workflow,
        )


def validate_batch(batch: RolloutBatch, pool: Pool, settings: ExecutorSettings) -> ErrorInfo | None:
    """The first rollout a solve's checks or the recursion rules refuse, its field named ``rollouts[k].<field>``;
    or a repeated id (results are matched to samples by it)."""
    seen: set[str] = set()
    for k, r in enumerate(batch.rollouts):
        error = check_rollout(r, pool, settings)
        if error is None and r.id in seen:
            error = bad_request(f"rollout id {r.id!r} appears twice in the batch", "id")
        if error is not None:
            return msgspec.structs.replace(error, field=f"rollouts[{k}].{error.field}")
        seen.add(r.id)
    return None


def check_rollout(r: Rollout, pool: Pool, settings: ExecutorSettings) -> ErrorInfo | None:
    """What a solve's checks or the recursion rules refuse in one rollout, its field named as the rollout gives it:
    ``request.<field>`` in a rollout carrying its request, ``<field>`` in one of schema 13."""
    if (error := validate(r.solve, pool, settings)) is not None:
        located = f"request.{error.field}" if r.request is not None and error.field else error.field
        return msgspec.structs.replace(error, field=located)
    return _recursion_error(r, settings)


def _recursion_error(r: Rollout, settings: ExecutorSettings) -> ErrorInfo | None:
    """A recursive call (round n > 0) saw earlier rounds; a first call saw none (docs/method.md §5)."""
    if r.round > settings.max_rounds_cap:
        return bad_request(f"round must be within 0..{settings.max_rounds_cap}", "round")
    if r.round > 0 and not r.previous:
        return bad_request("a recursive call (round > 0) needs the earlier rounds it was shown", "previous")
    if r.round == 0 and r.previous:
        return bad_request(
            "earlier rounds given for a first call; set round to the recursive call's number", "round"
        )
    return None


async def score(executor: Executor, r: Rollout) -> RolloutResult:
    """One rollout through the shared solve path (``Executor.execute``), its workflow from the completion. Its task
    id is the learner's rollout id: a pool that draws afresh per task (``vary_by_task``) then draws the same for the
    same rollout in every run, so a run is reproducible from its seeds (the learner's ids are unique within a run,
    and a rollout is never a durable task, whose id would key the worker-call ledger)."""
    state = TaskState(f"rollout-{r.id}", r.solve, previous=r.previous)
    with structlog.contextvars.bound_contextvars(rollout_id=r.id):
        result = await executor.execute(state, GivenCompletion(r.completion), first_round=r.round)
    return as_result(r, result)


def as_result(r: Rollout, res: SolveResult) -> RolloutResult:
    """The rollout's view of its one round. A format failure is the sample's score (``parse_error``), not an
    ``error``; ``error`` is set exactly when ``reward`` is None."""
    record = res.workflows[-1] if res.workflows else None
    stopped = record.error if record is not None else None
    parse_error = stopped if stopped is not None and stopped.code == ErrorCode.FORMAT_ERROR else None
    parsed = record is not None and parse_error is None
    return RolloutResult(
        id=r.id,
        reward=res.reward,
        parsed=parsed,
        parse_error=parse_error,
        handback=record is not None and record.handback,
        answer=res.answer if parsed else None,
        verdict=res.verdict,
        steps=list(record.steps) if record is not None else [],
        usage=res.usage.total,
        error=None if parse_error is not None else _unscored(res),
        latency_s=res.latency_s,
        policy_version=r.policy_version,
    )


def _unscored(res: SolveResult) -> ErrorInfo | None:
    """Why a parsed rollout has no reward: what stopped its workflow or verification, or a verdict of ``error``."""
    if res.error is not None:
        return res.error
    verdict = res.verdict
    if verdict is not None and verdict.outcome is Outcome.ERROR:
        return verdict.error or ErrorInfo(code=ErrorCode.VERIFIER_ERROR, message=verdict.reason)
    return None


class Rollouts:
    """Runs rollouts on one executor; ``capacity`` bounds the rollouts running at once across every batch and work
    item this replica serves, so several batches of one group share the pool's capacity instead of multiplying it.

    ``free`` is what a puller may fetch (services/executor/rollout_queue.py): the slots neither running nor
    promised. A rollout counts from the moment its ``Claim`` is made — synchronously, before it waits for a slot —
    so work already taken is never fetched for twice."""

    def __init__(self, executor: Executor, concurrency: int) -> None:
        self.executor = executor
        self.capacity = concurrency
        self._slots = asyncio.Semaphore(concurrency)
        self._held = 0
        self._on_free: list[Callable[[], None]] = []

    @property
    def free(self) -> int:
        return max(self.capacity - self._held, 0)

    def when_free(self, notify: Callable[[], None]) -> None:
        """Call ``notify`` whenever a claimed slot is given back."""
        self._on_free.append(notify)

    def claim(self) -> Claim:
        self._held += 1
        return Claim(self)

    def _release(self) -> None:
        self._held -= 1
        for notify in self._on_free:
            notify()

    def check(self, r: Rollout) -> ErrorInfo | None:
        """What a solve's checks or the recursion rules refuse in one rollout (its field named), if anything."""
        return check_rollout(r, self.executor.pool, self.executor.settings)

    async def run(self, batch: RolloutBatch) -> RolloutBatchResult:
        ex = self.executor
        if (error := validate_batch(batch, ex.pool, ex.settings)) is not None:
            return RolloutBatchResult(error=error)
        results = await asyncio.gather(*(self.one(r, self.claim()) for r in batch.rollouts))
        return RolloutBatchResult(results=list(results))

    async def one(self, r: Rollout, claim: Claim) -> RolloutResult:
        async with claim:
            return await self.score(r)

    async def score(self, r: Rollout) -> RolloutResult:
        """One rollout, its slot already held. A rollout that raises is one masked sample, not a failed batch: a bad
        rollout is data, not a crash."""
        try:
            return await score(self.executor, r)
        except Exception as exc:
            log.exception("rollout failed", rollout_id=r.id)
            return RolloutResult(id=r.id, error=internal_error(exc), policy_version=r.policy_version)


class Claim:
    """One rollout's place on a replica: counted from its making, run once a slot is free, given back on exit
    (entered at most once; a claim never entered must still be entered, or the place leaks)."""

    __slots__ = ("_owner",)

    def __init__(self, owner: Rollouts) -> None:
        self._owner = owner

    async def __aenter__(self) -> None:
        try:
            await self._owner._slots.acquire()
        except BaseException:  # cancelled while waiting for a slot: the place is given back
            self._owner._release()
            raise

    async def __aexit__(self, *exc: object) -> None:
        self._owner._slots.release()
        self._owner._release()

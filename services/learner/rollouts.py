"""Rewards over NATS: the learner's client of the executor's rollout subjects (schemas/rollout.py).

A step's completions are split into batches of ``rollout.batch_size`` sent concurrently (at most
``rollout.concurrency`` in flight). How a batch reaches the executors is ``rollout.placement`` (``rollout_transport``):
pulled, each rollout is a work item fetched by whichever replica has a free slot (services/learner/rollout_queue.py);
placed, the batch is one request the queue group hands to a random replica. Results come back in the order the
rollouts were given.

Failures are classified once, here: a batch the executors answer with a retryable error (nobody serving the
subject, overloaded, a timeout, its replica lost and no other reached within the failover window) is sent again up
to ``rollout.retries`` times with backoff; then, or at once for a non-retryable error, the step fails with
``RolloutError`` carrying the ``ErrorInfo`` — the run stops, resumable from its last checkpoint, rather than
training on rewards nobody computed. A single rollout whose workflow hit an infrastructure error comes back with
``reward=None`` from the executor and is masked by the trainer, not here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from nats.aio.client import Client

from conductor.endpoints import Requester
from conductor.liveness import CallPolicy
from conductor.workflow import MAX_STEPS, WorkflowFormatError, parse_completion
from schemas.errors import ErrorCode, ErrorInfo
from schemas.rollout import ROLLOUT, Rollout, RolloutBatch, RolloutBatchResult, RolloutResult
from services.learner.config import RolloutSection
from services.learner.rollout_queue import QueueTransport

Transport = Callable[[RolloutBatch, float], Awaitable[RolloutBatchResult]]
"""Sends one batch with a timeout and returns the typed reply (an error reply, never an exception, for a missing
or slow responder)."""

RETRY_PAUSE_S = 0.5


class RolloutError(RuntimeError):
    """Rollouts could not be scored (executors unreachable, a malformed reply, a bad request); ``info`` says why."""

    def __init__(self, info: ErrorInfo) -> None:
        super().__init__(f"{info.code}: {info.message}")
        self.info = info


def nats_transport(requester: Requester, prefix: str, policy: CallPolicy | None = None) -> Transport:
    """The real path: ``Requester.call(ROLLOUT, ...)`` on the deployment's subject prefix, with liveness beats.

    The executor beats while a batch is queued or running, so a replica that dies mid-batch is noticed after
    ``policy.beat_misses`` silent periods (6 s by default) and the batch is sent again to another replica — rollouts
    are not durable, its work is redone — instead of the learner waiting out ``timeout_s`` for a reply that cannot
    come (tests/learner/test_rollout_kill.py). The deadline travels with the batch, so one given up here stops there.
    """
    policy = policy or CallPolicy()

    async def send(batch: RolloutBatch, timeout: float) -> RolloutBatchResult:
        return await requester.call(ROLLOUT, batch, prefix=prefix, timeout=timeout, policy=policy)

    return send


def rollout_transport(
    nc: Client, prefix: str, section: RolloutSection, policy: CallPolicy | None = None
) -> Transport:
    """The transport ``section.placement`` names: ``pull`` — work items on the queue, batches by request/reply where
    no executor declared it — or ``queue`` — batches by request/reply (``nats_transport``)."""
    batches = nats_transport(Requester(nc), prefix, policy)
    if section.placement == "queue":
        return batches
    return QueueTransport(nc, prefix, policy=policy, fallback=batches)


def split(rollouts: Sequence[Rollout], size: int) -> list[list[Rollout]]:
    return [list(rollouts[i : i + size]) for i in range(0, len(rollouts), size)]


def expected_calls(rollout: Rollout) -> int:
    """Worker calls the rollout's workflow will make, read from its completion: what its time on an executor slot
    grows with (0 for a completion that does not parse, or a recursion round handing its answer back)."""
    try:
        parsed = parse_completion(
            rollout.completion,
            n_workers=len(rollout.solve.pool or ()),
            max_steps=rollout.solve.max_steps or MAX_STEPS,
            allow_empty=rollout.round > 0,
        )
    except WorkflowFormatError:
        return 0
    return len(parsed.workflow)


def longest_first(rollouts: Sequence[Rollout]) -> list[int]:
    """Indices of ``rollouts`` by expected calls, most first (ties keep their order): sent in this order, a pulled
    step's long workflows start first and its last slot-holders are short ones, so the step ends sooner (the
    longest-processing-time rule; bench/rollout_scaling_bench.py measures it against ``as_given``)."""
    calls = [expected_calls(r) for r in rollouts]
    return sorted(range(len(rollouts)), key=lambda i: -calls[i])


class RolloutClient:
    def __init__(self, transport: Transport, settings: RolloutSection) -> None:
        self._send = transport
        self._settings = settings
        self._slots: asyncio.Semaphore | None = None

    async def score(self, rollouts: Sequence[Rollout]) -> list[RolloutResult]:
        """Every rollout's result, in order; raises ``RolloutError`` when a batch cannot be scored."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self._settings.concurrency)
        if self._settings.order == "longest_first":
            order = longest_first(rollouts)
        else:
            order = list(range(len(rollouts)))
        batches = split([rollouts[i] for i in order], self._settings.batch_size)
        replies = await asyncio.gather(*(self._batch(b) for b in batches))
        by_index = dict(zip(order, (r for reply in replies for r in reply), strict=True))
        return [by_index[i] for i in range(len(rollouts))]

    async def _batch(self, rollouts: list[Rollout]) -> list[RolloutResult]:
        batch = RolloutBatch(rollouts=rollouts)
        for attempt in range(self._settings.retries + 1):
            reply = await self._once(batch)
            if reply.error is None:
                return _matched(rollouts, reply)
            if not reply.error.retryable or attempt == self._settings.retries:
                raise RolloutError(reply.error)
            await asyncio.sleep(RETRY_PAUSE_S * 2**attempt)
        raise AssertionError("unreachable")

    async def _once(self, batch: RolloutBatch) -> RolloutBatchResult:
        timeout = self._settings.timeout_s
        assert self._slots is not None
        async with self._slots:
            try:
                # The transport has its own timeout; this one bounds a transport that ignores it.
                async with asyncio.timeout(timeout + 1.0):
                    return await self._send(batch, timeout)
            except TimeoutError:
                info = ErrorInfo(
                    code=ErrorCode.TIMEOUT,
                    message=f"no rollout reply within {timeout:g} s for {len(batch.rollouts)} rollouts",
                    retryable=True,
                )
                return RolloutBatchResult(error=info)


def _matched(rollouts: list[Rollout], reply: RolloutBatchResult) -> list[RolloutResult]:
    """The reply's results in the batch's order; a reply that does not answer each rollout once is a bug."""
    by_id = {r.id: r for r in reply.results}
    if len(reply.results) != len(rollouts) or set(by_id) != {r.id for r in rollouts}:
        raise RolloutError(
            ErrorInfo(
                code=ErrorCode.INTERNAL,
                message=f"the executor answered {len(reply.results)} results for {len(rollouts)} rollouts",
            )
        )
    return [by_id[r.id] for r in rollouts]

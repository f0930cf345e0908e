"""Rollouts placed by load, the learner's side: each rollout of a batch is a work item that executors pull by free
capacity (schemas/rollout.py, services/executor/rollout_queue.py), its outcome heard on this client's own results
subject.

``QueueTransport`` is a ``Transport`` of services/learner/rollouts.py — a batch in, its ``RolloutBatchResult`` out,
in the batch's order — so ``RolloutClient`` keeps its batching, retries and error classification. What changes is
placement: the queue group of ``conductor.rollout`` hands a whole batch to one random replica whatever its load;
here every item goes to whichever replica has a free slot first.

Exactly once: each item carries a key unique to this send (a retried batch sends new keys); the first outcome per
key is kept and any other — a replica that published and died before acknowledging, its item run again elsewhere;
a late outcome of an earlier attempt — is dropped and counted in ``duplicates``.

Liveness, as ``CallPolicy`` sets it for a request/reply batch: a replica lost mid-rollout stops acknowledging its
item's progress and JetStream hands the item to another replica (executor side); here, the work queue is watched
every ``beat_s`` while items are outstanding, and when for ``failover_s`` nobody fetched (no pull request waiting,
no item in progress, nothing delivered) the batch fails with a retryable ``unavailable``, as a batch nobody
answers does. Where no executor has declared the work queue (executors older than it) the batch goes by request/
reply instead (``fallback``). The deadline (the earlier of the batch's timeout and the caller's) travels with each
item, so one given up here is never started there.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence

import msgspec
import nats.errors
import nats.js.errors as js_errors
import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext

from conductor.liveness import CallPolicy, current_deadline, earliest
from conductor.wire import encode
from schemas.errors import ErrorCode, ErrorInfo
from schemas.rollout import (
    ROLLOUT_RESULTS,
    ROLLOUT_WORK,
    ROLLOUTS_CONSUMER,
    Rollout,
    RolloutBatch,
    RolloutBatchResult,
    RolloutItem,
    RolloutOutcome,
)
from schemas.tasks import Names

log = structlog.get_logger("conductor.learner.rollout_queue")

PUBLISH_TIMEOUT_S = 5.0  # one item into the work queue, acknowledged by the stream

Fallback = Callable[[RolloutBatch, float], Awaitable[RolloutBatchResult]]
_outcome_dec = msgspec.json.Decoder(RolloutOutcome)


class _NoQueue(Exception):
    """No stream takes the work subject: no executor of this version has started on this deployment."""


class QueueTransport:
    def __init__(
        self, nc: Client, prefix: str, *, policy: CallPolicy | None = None, fallback: Fallback | None = None
    ) -> None:
        self._nc = nc
        self._js = nc.jetstream()
        self._policy = policy or CallPolicy()
        self._fallback = fallback
        self._stream = Names.for_prefix(prefix).rollouts_stream
        run = uuid.uuid4().hex  # one subject token: outcomes for this client only
        self._work = prefix + ROLLOUT_WORK.subject(run=run)
        self._results = prefix + ROLLOUT_RESULTS.subject(run=run)
        self._run = run
        self._ids = itertools.count()
        self._waiting: dict[str, asyncio.Future[RolloutOutcome]] = {}
        self._sub: Subscription | None = None
        self._subscribing = asyncio.Lock()
        self._idle = _QueueWatch(self._js, self._stream, self._policy.beat_s)
        self.duplicates = 0

    async def __call__(self, batch: RolloutBatch, timeout: float) -> RolloutBatchResult:
        if (error := _repeated_id(batch.rollouts)) is not None:
            return RolloutBatchResult(error=error)
        async with self._subscribing:  # once, however many batches start together
            if self._sub is None:
                self._sub = await self._nc.subscribe(self._results, cb=self._heard)
        deadline = earliest(current_deadline(), time.time() + timeout)
        assert deadline is not None
        loop = asyncio.get_running_loop()
        keys = [f"{self._run}-{next(self._ids)}" for _ in batch.rollouts]
        futures = [loop.create_future() for _ in keys]
        self._waiting.update(zip(keys, futures, strict=True))
        try:
            try:
                await self._send(keys, batch.rollouts, deadline)
            except _NoQueue:
                if self._fallback is None:
                    return RolloutBatchResult(
                        error=_unavailable("no executor has declared the rollout work queue")
                    )
                log.info("no rollout work queue here; the batch goes by request/reply")
                return await self._fallback(batch, timeout)
            except _Refused as exc:
                return RolloutBatchResult(error=exc.info)
            error = await self._wait(futures, deadline, timeout)
        finally:
            for key in keys:
                self._waiting.pop(key, None)
        return RolloutBatchResult(error=error) if error is not None else _batch_result(futures)

    async def _send(self, keys: list[str], rollouts: Sequence[Rollout], deadline: float) -> None:
        async def one(key: str, r: Rollout) -> None:
            payload = encode(RolloutItem(key=key, rollout=r, deadline=deadline))
            try:
                # The key is the message id too: a publish sent again after a lost acknowledgement is stored once.
                await self._js.publish(
                    self._work,
                    payload,
                    timeout=PUBLISH_TIMEOUT_S,
                    stream=self._stream,
                    headers={"Nats-Msg-Id": key},
                )
            except js_errors.NoStreamResponseError:
                raise _NoQueue from None
            except nats.errors.MaxPayloadError:
                raise _Refused(
                    ErrorInfo(
                        code=ErrorCode.PAYLOAD_TOO_LARGE,
                        field="rollouts",
                        message=f"a rollout ({len(payload)} bytes) exceeds the NATS server's max_payload",
                    )
                ) from None
            except (TimeoutError, nats.errors.Error, js_errors.Error) as exc:
                raise _Refused(
                    _unavailable(f"the rollout work queue did not take an item: {exc!r}")
                ) from None

        await asyncio.gather(*(one(k, r) for k, r in zip(keys, rollouts, strict=True)))

    async def _wait(
        self, futures: list[asyncio.Future[RolloutOutcome]], deadline: float, timeout: float
    ) -> ErrorInfo | None:
        """None once every outcome is in; the error that ends the batch otherwise (a refused item, the deadline,
        nobody pulling for ``failover_s``)."""
        pending: set[asyncio.Future[RolloutOutcome]] = set(futures)
        idle_since: float | None = None
        while pending:
            left = deadline - time.time()
            if left <= 0:
                return ErrorInfo(
                    code=ErrorCode.TIMEOUT,
                    retryable=True,
                    message=f"no rollout outcome within {timeout:g} s for {len(pending)} of "
                    f"{len(futures)} rollouts",
                )
            done, pending = await asyncio.wait(pending, timeout=min(left, self._policy.beat_s))
            if any(f.result().error is not None for f in done):
                return None  # refused before it ran: reported by _batch_result without waiting for the rest
            if not pending:
                return None
            if await self._idle.nobody_pulling():
                idle_since = idle_since or time.monotonic()
                if time.monotonic() - idle_since >= self._policy.failover_s:
                    return _unavailable(f"no executor fetched rollouts for {self._policy.failover_s:g} s")
            else:
                idle_since = None
        return None

    async def _heard(self, msg: Msg) -> None:
        try:
            outcome = _outcome_dec.decode(msg.data)
        except msgspec.DecodeError as exc:
            log.warning("undecodable rollout outcome dropped", error=str(exc))
            return
        future = self._waiting.get(outcome.key)
        if future is None or future.done():
            self.duplicates += (
                1  # a second outcome for its key, or one for an attempt given up: never counted
            )
            return
        future.set_result(outcome)


class _Refused(Exception):
    def __init__(self, info: ErrorInfo) -> None:
        super().__init__(info.message)
        self.info = info


class _QueueWatch:
    """Whether anyone fetches from the work queue, asked of its consumer at most once per ``period`` however many
    batches wait: no pull request waiting, no item in progress, and nothing delivered since the last look."""

    def __init__(self, js: JetStreamContext, stream: str, period: float) -> None:
        self._js = js
        self._stream = stream
        self._period = period
        self._asked = float("-inf")
        self._answer = False
        self._delivered = -1

    async def nobody_pulling(self) -> bool:
        now = time.monotonic()
        if now - self._asked < self._period:
            return self._answer
        self._asked = now
        try:
            info = await self._js.consumer_info(self._stream, ROLLOUTS_CONSUMER)
        except js_errors.NotFoundError:
            self._answer = True
            return True
        except (TimeoutError, nats.errors.Error, js_errors.Error) as exc:
            log.debug("rollout queue not inspected", error=repr(exc))
            self._answer = False  # unknown: not a reason to give up
            return False
        delivered = info.delivered.consumer_seq if info.delivered is not None else 0
        moved, self._delivered = delivered != self._delivered, delivered
        self._answer = not (info.num_waiting or info.num_ack_pending or moved)
        return self._answer


def _unavailable(message: str) -> ErrorInfo:
    return ErrorInfo(code=ErrorCode.UNAVAILABLE, message=message, retryable=True)


def _repeated_id(rollouts: Sequence[Rollout]) -> ErrorInfo | None:
    """Results are matched to samples by id: a repeated one is the caller's bug, named as the executor names it."""
    seen: set[str] = set()
    for k, r in enumerate(rollouts):
        if r.id in seen:
            return ErrorInfo(
                code=ErrorCode.BAD_REQUEST,
                field=f"rollouts[{k}].id",
                message=f"rollout id {r.id!r} appears twice in the batch",
            )
        seen.add(r.id)
    return None


def _batch_result(futures: list[asyncio.Future[RolloutOutcome]]) -> RolloutBatchResult:
    """The outcomes as a batch's reply: the first refused item's error naming ``rollouts[k].<field>``, else every
    result in order."""
    outcomes = [f.result() if f.done() else None for f in futures]
    for k, outcome in enumerate(outcomes):
        if outcome is not None and outcome.error is not None:
            where = f"rollouts[{k}]" + (f".{outcome.error.field}" if outcome.error.field else "")
            return RolloutBatchResult(error=msgspec.structs.replace(outcome.error, field=where))
    results = [o.result for o in outcomes if o is not None and o.result is not None]
    if len(results) != len(futures):
        return RolloutBatchResult(
            error=ErrorInfo(code=ErrorCode.INTERNAL, message="a rollout outcome without a result")
        )
    return RolloutBatchResult(results=results)

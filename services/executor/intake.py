"""Durable intake: tasks from the JetStream work queue, with an explicit acknowledgement policy.

FastStream's default for NATS drops a message whose handler raises; here every outcome is decided on purpose:

| outcome of one delivery                              | action                                              |
|------------------------------------------------------|-----------------------------------------------------|
| result already stored (a redelivery after success)   | re-publish the result event (deduplicated), ack     |
| stored entry not this task's result (issue 34)       | ignored (logged, counted), replaced by CAS when done|
| its subject names no tenant (only w/o authorization) | dropped (logged, counted), ack: no one can read it  |
| bad input (undecodable, invalid)                     | typed error result stored and published, ack        |
| checkpoint refused (not this task's or request's,    | checkpoint dropped (logged); the task starts afresh |
|   invalid plan or records, undecodable)              |   from the submitted request, which is authoritative|
| finished, or failed deterministically                | result stored, then published, then ack             |
| transient failure (unavailable, retryable worker err)| checkpoint kept, nak with backoff (resumes later)   |
| transient failures lasting past the retry horizon    | dead letter (task, error chain, attempts) + result  |
| (backstop) a transient failure on delivery MaxDeliver| dead letter + result, as above                      |
| cancelled by its tenant (executor/cancels.py)        | result stored (what ran, error ``cancelled``), ack  |
| crash / lost connection mid-task                     | no ack: redelivered after AckWait, resumes          |
| shutdown outlasting the drain timeout (cancelled)    | nak (2 s delay): redelivered soon, resumes          |

While a task runs, an in-progress ack every ``ack_wait/3`` keeps JetStream from redelivering it.

Time, not counts: the retry horizon (``retry_horizon_s``, 10 min) bounds how long a task's transient failures may
last, counted from the first failure after its last progress, so an outage shorter than the horizon never
dead-letters a task however many deliveries it takes. The task's start is kept in its checkpoint: ``max_wall_s``
and ``latency_s`` count from its first delivery across redeliveries (for a task redelivered before its first
checkpoint landed, from its submission: the stream's timestamp is the earliest start on record).

A window to know about: JetStream's duplicate window forgets ids it has already seen when nats-server restarts
(measured by the outside audit), so a resubmitted id is accepted again. The stored-result check below is what
prevents the re-run: such a delivery finds the result, re-publishes its (deduplicated) event and is acked.
"""

from __future__ import annotations

import asyncio
import functools
import time

import msgspec
import nats.errors
import structlog
from nats.aio.msg import Msg

from conductor import metrics
from conductor.aio import stop_task
from conductor.logging import bound_contextvars
from conductor.pool import Pool
from conductor.wire import WireError, decode
from schemas.errors import ErrorCode, ErrorInfo
from schemas.solve import SolveRequest, SolveResult, valid_tenant
from schemas.tasks import SUBMIT_SUBJECT, DeadLetter, TaskCheckpoint, task_key
from services.executor.cancels import Cancels
from services.executor.config import IntakeSettings
from services.executor.core import Executor
from services.executor.store import TaskStore
from services.executor.validation import TASK_ID_RULE, bad_request, valid_task_id

log = structlog.get_logger("conductor.executor.intake")

TRANSIENT_CODES = {ErrorCode.UNAVAILABLE, ErrorCode.TIMEOUT}
PULL_EXPIRY_S = 1.0  # how long one fetch (pull request) of the task consumer waits on the server
# A task released at shutdown is redelivered after this: JetStream would otherwise hand it straight back to a
# pull request this draining process left open, and that delivery is lost until AckWait (measured: 30 s).
RELEASE_DELAY_S = 2 * PULL_EXPIRY_S
HEARTBEAT_STOP_S = 1.0  # how long a finished task waits for its heartbeat to stop


def is_transient(error: ErrorInfo | None) -> bool:
    return error is not None and (error.retryable or error.code in TRANSIENT_CODES)


def fallback_task_id(msg: Msg, tenant: str) -> str:
    """The id of a task whose request names none (or none usable): its ``Nats-Msg-Id`` (less the ``<tenant>.``
    a client puts before the task id) when that makes a valid key, else its stream sequence."""
    msg_id = (msg.headers or {}).get("Nats-Msg-Id", "").removeprefix(f"{tenant}.")
    return msg_id if msg_id and valid_task_id(msg_id) else f"seq-{msg.metadata.sequence.stream}"


MAX_ERRORS_KEPT = 50  # the newest transient errors kept in the checkpoint and the dead letter


def admission(pool: Pool, settings: IntakeSettings, handler_concurrency: int) -> int:
    """How many tasks this executor runs at once: the configured number, else what the pool can serve at once
    (the sum of its workers' deployment-wide concurrency: a task has about one worker call in flight), never more
    than the handler concurrency. FastStream's pull consumer then holds at most about twice this many fetched
    tasks (running plus a hand-over buffer of the same size); the rest stay in the stream for other replicas."""
    wanted = settings.concurrency or sum(w.concurrency for w in pool.workers)
    return max(1, min(wanted, handler_concurrency))


def backoff_s(delivered: int, settings: IntakeSettings) -> float:
    return min(settings.backoff_max_s, settings.backoff_base_s * 2 ** max(0, delivered - 1))


def progress_of(cp: TaskCheckpoint) -> int:
    """Finished plans and steps: grows whenever a delivery got anything done."""
    return len(cp.rounds) + sum(len(r.steps) for r in cp.rounds)


def failed_again(cp: TaskCheckpoint, error: ErrorInfo, now: float) -> TaskCheckpoint:
    """The checkpoint after one more transient failure: a new failing run starts unless one is already going
    and no progress was made since it began."""
    progress = progress_of(cp)
    if cp.failing_since is None or progress > cp.failing_progress:
        cp = msgspec.structs.replace(cp, failing_since=now, failing_progress=progress)
    return msgspec.structs.replace(cp, errors=[*cp.errors, error][-MAX_ERRORS_KEPT:])


def given_up(cp: TaskCheckpoint, delivered: int, now: float, settings: IntakeSettings) -> bool:
    failing_for = now - (cp.failing_since if cp.failing_since is not None else now)
    return failing_for >= settings.retry_horizon_s or delivered >= settings.max_deliver


def start_of(cp: TaskCheckpoint | None, msg: Msg, now: float) -> float:
    """When the task started (see the module docstring)."""
    if cp is not None and cp.started_at is not None:
        return cp.started_at
    if msg.metadata.num_delivered > 1:
        return min(now, msg.metadata.timestamp.timestamp())
    return now


class Intake:
    def __init__(
        self, executor: Executor, store: TaskStore, settings: IntakeSettings, cancels: Cancels | None = None
    ) -> None:
        self.executor = executor
        self.store = store
        self.settings = settings
        self.cancels = cancels or Cancels()

    async def handle(self, msg: Msg) -> None:
        delivered = msg.metadata.num_delivered
        if delivered > 1:
            metrics.REDELIVERIES.inc()
        tenant = self.store.names.submitter(msg.subject)
        if tenant is None or not valid_tenant(tenant):
            # Nobody could read an answer: a tenant reads only under its own name (conductor/access.py). Only a
            # server without authorization lets such a subject in.
            log.warning("task dropped: its subject names no tenant", subject=msg.subject[:200])
            metrics.bad_request(SUBMIT_SUBJECT)
            await msg.ack()
            return
        fallback_id = fallback_task_id(msg, tenant)
        try:
            req = decode(msg.data, SolveRequest, max_bytes=self.settings.max_payload_bytes)
        except WireError as exc:
            await self._finish(msg, tenant, SolveResult(task_id=fallback_id, error=exc.info), counted=True)
            return
        if req.task_id is not None and not valid_task_id(req.task_id):
            # Results and checkpoints are keyed by task id: an unusable one is answered under the message's id.
            error = bad_request(TASK_ID_RULE, "task_id")
            await self._finish(msg, tenant, SolveResult(task_id=fallback_id, error=error), counted=True)
            return
        task_id = req.task_id or fallback_id
        req = msgspec.structs.replace(req, task_id=task_id)
        key = task_key(tenant, task_id)
        with bound_contextvars(task_id=task_id, tenant=tenant, delivery=delivered):
            existing = await self.store.result(key)
            if existing is not None:
                await self._finish(msg, tenant, existing, counted=False)
                return
            resume = await self._resumable(key, req)
            started_at = start_of(resume, msg, time.time())
            try:
                result = await self._run(msg, tenant, req, resume, started_at)
            except Exception as exc:
                log.exception("task delivery failed")
                result = SolveResult(
                    task_id=task_id,
                    error=ErrorInfo(code=ErrorCode.INTERNAL, message=repr(exc), retryable=True),
                )
            result = msgspec.structs.replace(result, key=req.key)
            if is_transient(result.error):
                await self._retry_or_dead_letter(msg, tenant, req, result, delivered, started_at)
                return
            await self._finish(msg, tenant, result, counted=True)

    async def _resumable(self, key: str, req: SolveRequest) -> TaskCheckpoint | None:
        """The task's checkpoint if it may be resumed for ``req`` (``Executor.resumable``,
        services/executor/checkpoints.py). A refused one is dropped at once, so that nothing later in this delivery
        (the retry horizon, the dead letter) reads it either."""
        try:
            stored = await self.store.checkpoint(key)
        except msgspec.DecodeError as exc:
            log.warning("checkpoint refused: it does not decode; starting afresh", error=str(exc))
            await self.store.drop_checkpoint(key)
            return None
        resume = self.executor.resumable(stored, req)
        if stored is not None and resume is None:
            await self.store.drop_checkpoint(key)
        return resume

    async def _run(
        self, msg: Msg, tenant: str, req: SolveRequest, resume: TaskCheckpoint | None, started_at: float
    ) -> SolveResult:
        assert req.task_id is not None
        finished = asyncio.Event()
        heartbeat = asyncio.create_task(self._keep_alive(msg, finished))
        save = functools.partial(self.store.save_checkpoint, task_key(tenant, req.task_id))
        try:
            with self.cancels.watch(tenant, req) as cancel:
                return await self.executor.solve(
                    req,
                    tenant=tenant,
                    resume=resume,
                    checkpoint=save,
                    durable=True,
                    started_at=started_at,
                    cancel=cancel,
                )
        except asyncio.CancelledError:
            # Shutdown outlasted the drain timeout: hand the task back now (it resumes from its last checkpoint
            # on any replica) rather than leaving it to AckWait.
            log.warning("task cancelled mid-run (shutdown); releasing it for redelivery")
            # Shielded: FastStream runs handlers in an anyio task group, whose cancellation hits every later await
            # too; unshielded, the nak itself would be cancelled before it is sent.
            await asyncio.shield(msg.nak(delay=RELEASE_DELAY_S))
            raise
        finally:
            finished.set()  # ends the heartbeat at its next step even if its cancel is swallowed mid-publish
            await stop_task(heartbeat, timeout=HEARTBEAT_STOP_S, what="in-progress heartbeat")

    async def _keep_alive(self, msg: Msg, finished: asyncio.Event) -> None:
        while not finished.is_set():
            await asyncio.sleep(self.settings.ack_wait_s / 3)
            if finished.is_set():
                return
            try:
                await msg.in_progress()
            except (
                nats.errors.Error
            ) as exc:  # e.g. mid-reconnect: the next beat or AckWait's redelivery covers it
                log.warning("in-progress ack not sent", error=repr(exc))

    async def _retry_or_dead_letter(
        self, msg: Msg, tenant: str, req: SolveRequest, result: SolveResult, delivered: int, started_at: float
    ) -> None:
        assert result.error is not None and req.task_id is not None
        now = time.time()
        key = task_key(tenant, req.task_id)
        cp = await self._resumable(key, req) or TaskCheckpoint(
            task_id=req.task_id, request=req, started_at=started_at
        )
        cp = failed_again(cp, result.error, now)
        if not given_up(cp, delivered, now, self.settings):
            await self.store.save_checkpoint(key, cp)
            delay = backoff_s(delivered, self.settings)
            log.warning("transient failure; redelivering", error=result.error.message, delay_s=delay)
            await msg.nak(delay=delay)
            return
        log.error(
            "giving up: transient failures outlasted the retry horizon",
            attempts=delivered,
            failing_s=round(now - (cp.failing_since or now), 1),
            error=result.error.message,
        )
        await self.store.dead_letter(
            key, DeadLetter(task_id=req.task_id, request=req, attempts=delivered, errors=cp.errors)
        )
        metrics.DEAD_LETTERS.inc()
        await self._finish(msg, tenant, result, counted=True)

    async def _finish(self, msg: Msg, tenant: str, result: SolveResult, *, counted: bool) -> None:
        """Store (first writer wins), publish once, ack, then forget the checkpoint — in that order, so a crash
        at any point leaves either a redelivery that finds the stored result or the checkpoint to resume from.
        ``counted``: this delivery produced the result (a redelivery finding a stored one is not a new task). The
        result is stamped with its tenant (and carries the gateway's key, when the request named one)."""
        if counted:
            metrics.task_finished(result, SUBMIT_SUBJECT)
        result = msgspec.structs.replace(result, tenant=tenant)  # whose it is: readers check it
        key = task_key(tenant, result.task_id)
        stored = await self.store.store_result(key, result)
        await self.store.publish_result_event(key, stored)
        await msg.ack()
        await self.store.drop_checkpoint(key)

"""Durable intake: tasks from the JetStream work queue, with an explicit acknowledgement policy.

FastStream's default for NATS drops a message whose handler raises; here every outcome is decided on purpose:

| outcome of one delivery                              | action                                              |
|------------------------------------------------------|-----------------------------------------------------|
| result already stored (a redelivery after success)   | re-publish the result event (deduplicated), ack     |
| bad input (undecodable, invalid)                     | typed error result stored and published, ack        |
| finished, or failed deterministically                | result stored, then published, then ack             |
| transient failure (unavailable, retryable worker err)| checkpoint kept, nak with backoff (resumes later)   |
| transient failure on the last allowed delivery       | dead letter (task, error chain, attempts) + result  |
| crash / lost connection mid-task                     | no ack: redelivered after AckWait, resumes          |
| shutdown outlasting the drain timeout (cancelled)    | nak (2 s delay): redelivered soon, resumes          |

While a task runs, an in-progress ack every ``ack_wait/3`` keeps JetStream from redelivering it.
"""

from __future__ import annotations

import asyncio

import msgspec
import nats.errors
import structlog
from nats.aio.msg import Msg

from conductor import metrics
from conductor.aio import stop_task
from conductor.wire import WireError, decode
from schemas.errors import ErrorCode, ErrorInfo
from schemas.solve import SolveRequest, SolveResult
from schemas.tasks import SUBMIT_SUBJECT, DeadLetter, TaskCheckpoint
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


def fallback_task_id(msg: Msg) -> str:
    """The id of a task whose request names none (or none usable): its ``Nats-Msg-Id`` when that makes a valid
    key, else its stream sequence."""
    msg_id = (msg.headers or {}).get("Nats-Msg-Id")
    return msg_id if msg_id and valid_task_id(msg_id) else f"seq-{msg.metadata.sequence.stream}"


def backoff_s(delivered: int, settings: IntakeSettings) -> float:
    return min(settings.backoff_max_s, settings.backoff_base_s * 2 ** max(0, delivered - 1))


class Intake:
    def __init__(self, executor: Executor, store: TaskStore, settings: IntakeSettings) -> None:
        self.executor = executor
        self.store = store
        self.settings = settings

    async def handle(self, msg: Msg) -> None:
        delivered = msg.metadata.num_delivered
        if delivered > 1:
            metrics.REDELIVERIES.inc()
        fallback_id = fallback_task_id(msg)
        try:
            req = decode(msg.data, SolveRequest, max_bytes=self.settings.max_payload_bytes)
        except WireError as exc:
            await self._finish(msg, SolveResult(task_id=fallback_id, error=exc.info), counted=True)
            return
        if req.task_id is not None and not valid_task_id(req.task_id):
            # Results and checkpoints are keyed by task id: an unusable one is answered under the message's id.
            error = bad_request(TASK_ID_RULE, "task_id")
            await self._finish(msg, SolveResult(task_id=fallback_id, error=error), counted=True)
            return
        task_id = req.task_id or fallback_id
        req = msgspec.structs.replace(req, task_id=task_id)
        with structlog.contextvars.bound_contextvars(task_id=task_id, delivery=delivered):
            existing = await self.store.result(task_id)
            if existing is not None:
                await self._finish(msg, existing, counted=False)
                return
            resume = await self.store.checkpoint(task_id)
            try:
                result = await self._run(msg, req, resume)
            except Exception as exc:
                log.exception("task delivery failed")
                result = SolveResult(
                    task_id=task_id,
                    error=ErrorInfo(code=ErrorCode.INTERNAL, message=repr(exc), retryable=True),
                )
            if is_transient(result.error):
                await self._retry_or_dead_letter(msg, req, result, delivered)
                return
            await self._finish(msg, result, counted=True)

    async def _run(self, msg: Msg, req: SolveRequest, resume: TaskCheckpoint | None) -> SolveResult:
        finished = asyncio.Event()
        heartbeat = asyncio.create_task(self._keep_alive(msg, finished))
        try:
            return await self.executor.solve(
                req, resume=resume, checkpoint=self.store.save_checkpoint, durable=True
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
            except nats.errors.Error as exc:  # e.g. mid-reconnect: the next beat or AckWait's redelivery covers it
                log.warning("in-progress ack not sent", error=repr(exc))

    async def _retry_or_dead_letter(
        self, msg: Msg, req: SolveRequest, result: SolveResult, delivered: int
    ) -> None:
        assert result.error is not None and req.task_id is not None
        cp = await self.store.checkpoint(req.task_id) or TaskCheckpoint(task_id=req.task_id, request=req)
        errors = [*cp.errors, result.error]
        if delivered < self.settings.max_deliver:
            await self.store.save_checkpoint(msgspec.structs.replace(cp, errors=errors))
            delay = backoff_s(delivered, self.settings)
            log.warning("transient failure; redelivering", error=result.error.message, delay_s=delay)
            await msg.nak(delay=delay)
            return
        log.error("giving up after max deliveries", attempts=delivered, error=result.error.message)
        await self.store.dead_letter(
            DeadLetter(task_id=req.task_id, request=req, attempts=delivered, errors=errors)
        )
        metrics.DEAD_LETTERS.inc()
        await self._finish(msg, result, counted=True)

    async def _finish(self, msg: Msg, result: SolveResult, *, counted: bool) -> None:
        """Store (first writer wins), publish once, ack, then forget the checkpoint — in that order, so a crash
        at any point leaves either a redelivery that finds the stored result or the checkpoint to resume from.
        ``counted``: this delivery produced the result (a redelivery finding a stored one is not a new task)."""
        if counted:
            metrics.task_finished(result, SUBMIT_SUBJECT)
        stored = await self.store.store_result(result)
        await self.store.publish_result_event(stored)
        await msg.ack()
        await self.store.drop_checkpoint(stored.task_id)

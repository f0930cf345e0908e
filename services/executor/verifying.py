"""Ask the verifier for a task's verdict, riding out its transient failures: a verifier outage is a wait, never a
final result.

Before this, one unanswered verify request became the task's final verdict (``error``, reward null) and the task
was acknowledged: a 30 s verifier outage turned every task reaching it into a lost reward. Now a transient failure
(no answer, a retryable error of the batch or of the verdict, e.g. a sandbox that could not start) is tried again
with backoff for ``verify_retry_s``; if it persists the task gets a typed, retryable ``unavailable`` error (no
verdict, no reward) so the durable intake releases it and a later delivery verifies it from its checkpoint without
repeating any worker call. A deterministic failure (a reference the verifier rejects) stays a verdict of its own.

A reply is believed only if it answers the batch asked: one verdict per item, in order, each with its item's id.
Anything else (a reply misrouted, or forged by another client on the bus: a ``correct`` for a wrong answer earned
1.0 before) is a retryable ``verifier_error`` and is asked again like any transient failure; it is never credited.
"""

from __future__ import annotations

import asyncio
import time

import structlog

from conductor.liveness import current_deadline, remaining_s
from schemas.errors import ErrorCode, ErrorInfo
from schemas.solve import SolveRequest
from schemas.verify import (
    Outcome,
    Reference,
    TextReference,
    Verdict,
    VerifyBatch,
    VerifyBatchResult,
    VerifyRequest,
)
from services.executor.config import CallSettings, ExecutorSettings
from services.executor.transport import Transport

log = structlog.get_logger("conductor.executor.verify")

TRANSIENT = {ErrorCode.UNAVAILABLE, ErrorCode.TIMEOUT}


def transient_failure(result: VerifyBatchResult) -> ErrorInfo | None:
    """The error that makes this answer worth asking for again, if any."""
    if result.error is not None:
        return result.error if (result.error.retryable or result.error.code in TRANSIENT) else None
    for verdict in result.verdicts:
        if verdict.error is not None and verdict.error.retryable:
            return verdict.error
    return None


def unmatched(batch: VerifyBatch, result: VerifyBatchResult) -> ErrorInfo | None:
    """Why ``result`` does not answer ``batch`` (a batch-level error answers any batch)."""
    if result.error is not None:
        return None
    asked, got = [item.id for item in batch.items], [v.id for v in result.verdicts]
    if got == asked:
        return None
    return ErrorInfo(
        code=ErrorCode.VERIFIER_ERROR,
        message=f"the verifier's reply does not match the request: {len(got)} verdict(s) for {len(asked)} item(s)"
        + ("" if len(got) != len(asked) else ", for other ids"),
        retryable=True,
    )


def still_unverified(last: ErrorInfo, tries: int) -> ErrorInfo:
    return ErrorInfo(
        code=ErrorCode.UNAVAILABLE,
        message=f"the verifier failed transiently {tries} time(s); the task is retried later: {last.message}",
        retryable=True,
        detail=last.detail,
    )


async def verify(
    transport: Transport, batch: VerifyBatch, *, timeout: float, calls: CallSettings
) -> VerifyBatchResult | ErrorInfo:
    """The verifier's answer, or a typed retryable error once transient failures outlast ``verify_retry_s`` (or
    the requester's deadline)."""
    give_up = time.monotonic() + calls.verify_retry_s
    pause, tries = calls.retry_base_s, 0
    while True:
        result = await transport.verify(batch, timeout=timeout)
        tries += 1
        error = unmatched(batch, result) or transient_failure(result)
        if error is None:
            return result
        left = remaining_s(current_deadline())
        if time.monotonic() + pause > give_up or (left is not None and left <= pause):
            log.warning(
                "verifier still failing; releasing the task for a later try", tries=tries, error=error.message
            )
            return still_unverified(error, tries)
        log.info("verifier failed transiently; trying again", tries=tries, pause_s=pause, error=error.message)
        await asyncio.sleep(pause)
        pause = min(pause * 2, calls.retry_max_s)


def as_reference(ref: str | Reference, domain: str | None) -> Reference:
    """A request's reference as the verifier takes it: a bare string is graded as its domain's kind of answer."""
    if not isinstance(ref, str):
        return ref
    kind = {"math": "math", "mcq": "mcq"}.get(domain or "", "auto")
    return TextReference(answer=ref, kind=kind)  # type: ignore[arg-type]


async def task_verdict(
    transport: Transport, settings: ExecutorSettings, task_id: str, req: SolveRequest, answer: str | None
) -> Verdict | ErrorInfo | None:
    """The verdict on a task's standing answer; None when there is no reference or no answer (no workflow ran to
    completion); the typed retryable error when the verifier stayed down."""
    if req.reference is None or answer is None:
        return None
    batch = VerifyBatch(
        items=[
            VerifyRequest(
                id=task_id,
                response=answer,
                reference=as_reference(req.reference, req.domain),
                question=req.question,
                domain=req.domain,
            )
        ]
    )
    result = await verify(transport, batch, timeout=settings.verify_timeout_s, calls=settings.calls)
    if isinstance(result, ErrorInfo):
        return result
    if result.error is not None or len(result.verdicts) != 1:
        err = result.error or ErrorInfo(code=ErrorCode.VERIFIER_ERROR, message="verifier returned no verdict")
        return Verdict(id=task_id, outcome=Outcome.ERROR, reason=err.message, error=err)
    return result.verdicts[0]

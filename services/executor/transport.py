"""The executor's outside world behind one Protocol: planner, worker-adapter, verifier and progress events.

``NatsTransport`` is the production adapter (request/reply over the broker); tests may pass any object with the
same methods. A downstream service that does not answer becomes a typed ``unavailable`` reply, never an exception.
"""

from __future__ import annotations

from typing import Protocol

import msgspec
import nats.errors
from faststream.nats import NatsBroker

from conductor.endpoints import Requester
from conductor.settings import CommonSettings
from conductor.wire import encode
from schemas.errors import ErrorCode, ErrorInfo
from schemas.plan import PLAN_SUBJECT, PlanReply, PlanRequest
from schemas.solve import ProgressEvent, progress_subject
from schemas.verify import VERIFY_SUBJECT, VerifyBatch, VerifyBatchResult
from schemas.work import WORK_SUBJECT, WorkReply, WorkRequest


class Transport(Protocol):
    async def plan(self, req: PlanRequest, timeout: float) -> PlanReply: ...
    async def work(self, req: WorkRequest, timeout: float) -> WorkReply: ...
    async def verify(self, batch: VerifyBatch, timeout: float) -> VerifyBatchResult: ...
    async def progress(self, event: ProgressEvent) -> None: ...


def unavailable(service: str, exc: BaseException) -> ErrorInfo:
    return ErrorInfo(
        code=ErrorCode.UNAVAILABLE,
        message=f"{service} did not answer: {type(exc).__name__}",
        retryable=True,
        detail=str(exc) or None,
    )


def malformed_reply(service: str, exc: BaseException) -> ErrorInfo:
    """A reply that does not decode means mismatched versions or a bug, not a transient fault."""
    return ErrorInfo(code=ErrorCode.INTERNAL, message=f"{service} sent a reply that does not decode: {exc}")


_plan_dec = msgspec.json.Decoder(PlanReply)
_work_dec = msgspec.json.Decoder(WorkReply)
_verify_dec = msgspec.json.Decoder(VerifyBatchResult)

_NOT_ANSWERED = (nats.errors.TimeoutError, nats.errors.NoRespondersError, TimeoutError, nats.errors.ConnectionClosedError)


class NatsTransport:
    def __init__(self, broker: NatsBroker, settings: CommonSettings) -> None:
        # The nats-py client of a connected broker: the same object across reconnects, and FastStream's
        # ``connection`` property is a measurable cost at five requests and publishes per task.
        self._nc = broker.connection
        self._requests = Requester(self._nc)
        self._plan = settings.subject(PLAN_SUBJECT)
        self._work = settings.subject(WORK_SUBJECT)
        self._verify = settings.subject(VERIFY_SUBJECT)
        self._settings = settings

    async def _request(self, service: str, subject: str, payload: bytes, timeout: float) -> bytes | ErrorInfo:
        try:
            # Not FastStream's publisher (its middleware stack cost ~0.1 ms per hop) and not nats-py's request
            # (see conductor.endpoints.Requester): this is the executor's hot path.
            msg = await self._requests.request(subject, payload, timeout=timeout)
        except _NOT_ANSWERED as exc:
            return unavailable(service, exc)
        return msg.data

    async def plan(self, req: PlanRequest, timeout: float) -> PlanReply:
        body = await self._request("planner", self._plan, encode(req), timeout)
        if isinstance(body, ErrorInfo):
            return PlanReply(policy="", error=body)
        try:
            return _plan_dec.decode(body)
        except msgspec.DecodeError as exc:
            return PlanReply(policy="", error=malformed_reply("planner", exc))

    async def work(self, req: WorkRequest, timeout: float) -> WorkReply:
        body = await self._request("worker-adapter", self._work, encode(req), timeout)
        if isinstance(body, ErrorInfo):
            return WorkReply(worker=req.worker, error=body)
        try:
            return _work_dec.decode(body)
        except msgspec.DecodeError as exc:
            return WorkReply(worker=req.worker, error=malformed_reply("worker-adapter", exc))

    async def verify(self, batch: VerifyBatch, timeout: float) -> VerifyBatchResult:
        body = await self._request("verifier", self._verify, encode(batch), timeout)
        if isinstance(body, ErrorInfo):
            return VerifyBatchResult(error=body)
        try:
            return _verify_dec.decode(body)
        except msgspec.DecodeError as exc:
            return VerifyBatchResult(error=malformed_reply("verifier", exc))

    async def progress(self, event: ProgressEvent) -> None:
        await self._nc.publish(self._settings.subject(progress_subject(event.task_id)), encode(event))

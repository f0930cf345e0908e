"""The executor's outside world behind one Protocol: planner, worker-adapter, verifier and progress events.

``NatsTransport`` is the production adapter: each call is ``Requester.call`` over the subject's contract in
``schemas/`` (so a downstream service that does not answer becomes its typed ``unavailable`` reply, never an
exception); tests may pass any object with the same methods.

Liveness (conductor/liveness.py): every call asks its responder for beats and carries a deadline, so a SIGKILLed
replica is noticed in seconds (``CallSettings``) and the call fails over to another replica or a restarted one,
while the long ``*_timeout_s`` bounds only a live, slow responder.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Protocol

from faststream.nats import NatsBroker

from conductor.endpoints import Requester
from conductor.settings import CommonSettings
from conductor.wire import encode
from schemas.plan import PLAN, PlanReply, PlanRequest
from schemas.solve import ProgressEvent, progress_subject
from schemas.verify import VERIFY, VerifyBatch, VerifyBatchResult
from schemas.work import WORK, WorkReply, WorkRequest
from services.executor.config import CallSettings


class Transport(Protocol):
    async def plan(self, req: PlanRequest, timeout: float) -> PlanReply: ...
    async def work(self, req: WorkRequest, timeout: float) -> WorkReply: ...
    async def verify(self, batch: VerifyBatch, timeout: float) -> VerifyBatchResult: ...
    async def progress(self, tenant: str | None, event: ProgressEvent) -> None: ...


class NatsTransport:
    def __init__(
        self, broker: NatsBroker, settings: CommonSettings, calls: CallSettings | None = None
    ) -> None:
        # The nats-py client of a connected broker: the same object across reconnects, and FastStream's
        # ``connection`` property is a measurable cost at five requests and publishes per task. Not FastStream's
        # publisher either (its middleware stack cost ~0.1 ms per hop): this is the executor's hot path.
        self._nc = broker.connection
        self._requests = Requester(self._nc)
        self._settings = settings
        self._prefix = settings.subject_prefix
        self._policy = calls or CallSettings()

    # Each returns the requester's coroutine itself rather than one awaiting it: a frame fewer held by every task
    # in flight (awaited the same way).
    def plan(self, req: PlanRequest, timeout: float) -> Coroutine[None, None, PlanReply]:
        return self._requests.call(PLAN, req, prefix=self._prefix, timeout=timeout, policy=self._policy)

    def work(self, req: WorkRequest, timeout: float) -> Coroutine[None, None, WorkReply]:
        return self._requests.call(WORK, req, prefix=self._prefix, timeout=timeout, policy=self._policy)

    def verify(self, batch: VerifyBatch, timeout: float) -> Coroutine[None, None, VerifyBatchResult]:
        return self._requests.call(VERIFY, batch, prefix=self._prefix, timeout=timeout, policy=self._policy)

    async def progress(self, tenant: str | None, event: ProgressEvent) -> None:
        """On the task's tenant's subject, which only that tenant may hear; a task with no tenant (a rollout) has
        no one to tell."""
        if tenant is not None:
            await self._nc.publish(
                self._settings.subject(progress_subject(tenant, event.task_id)), encode(event)
            )

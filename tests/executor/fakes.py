"""Scripted, honest stand-ins for the executor's downstream services (no network)."""

from __future__ import annotations

import asyncio

from schemas.errors import ErrorCode, ErrorInfo
from schemas.plan import PlanReply, PlanRequest, Workflow
from schemas.solve import ProgressEvent
from schemas.usage import Usage
from schemas.verify import Outcome, Verdict, VerifyBatch, VerifyBatchResult
from schemas.work import WorkReply, WorkRequest


class ScriptedTransport:
    """Plans come from a list (one per round); each worker echoes what it saw so tests can check the template."""

    def __init__(
        self,
        workflows: list[Workflow | None],
        *,
        fail_worker: str | None = None,
        delay: float = 0.0,
        card_rounds: int = 0,
    ):
        self.workflows = list(workflows)
        self.card_rounds = (
            card_rounds  # PlanReply.rounds: the recursion rounds a served policy's card asks for
        )
        self.fail_worker = fail_worker
        self.delay = delay
        self.plan_requests: list[PlanRequest] = []
        self.work_requests: list[WorkRequest] = []
        self.verify_batches: list[VerifyBatch] = []
        self.events: list[ProgressEvent] = []
        self.active = 0
        self.max_active = 0

    async def plan(self, req: PlanRequest, timeout: float) -> PlanReply:
        self.plan_requests.append(req)
        if not self.workflows:
            return PlanReply(
                policy="scripted", error=ErrorInfo(code=ErrorCode.PLANNER_ERROR, message="script ended")
            )
        wf = self.workflows.pop(0)
        if wf is None:
            return PlanReply(
                policy="scripted", error=ErrorInfo(code=ErrorCode.FORMAT_ERROR, message="unparseable")
            )
        return PlanReply(
            policy="scripted",
            completion=f"plan {req.round}",
            workflow=wf,
            usage=Usage(calls=1),
            rounds=self.card_rounds,
        )

    async def work(self, req: WorkRequest, timeout: float) -> WorkReply:
        self.work_requests.append(req)
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            await asyncio.sleep(self.delay)
        finally:
            self.active -= 1
        if req.worker == self.fail_worker:
            return WorkReply(worker=req.worker, error=ErrorInfo(code=ErrorCode.WORKER_ERROR, message="boom"))
        text = f"{req.worker}@{req.step}: saw {len(req.messages)} msgs"
        return WorkReply(
            worker=req.worker,
            text=text,
            usage=Usage(input_tokens=10, output_tokens=5, cost_usd=0.001, calls=1),
        )

    async def verify(self, batch: VerifyBatch, timeout: float) -> VerifyBatchResult:
        self.verify_batches.append(batch)
        item = batch.items[0]
        ok = item.response.startswith(getattr(item.reference, "answer", "\0"))
        outcome = Outcome.CORRECT if ok else Outcome.INCORRECT
        return VerifyBatchResult(verdicts=[Verdict(id=item.id, outcome=outcome, reason="scripted")])

    async def progress(self, tenant: str | None, event: ProgressEvent) -> None:
        self.events.append(event)

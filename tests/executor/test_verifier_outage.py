"""A verifier outage is not a final result (issue 8, item 3): transient verifier failures are retried before the
result is written; a persistent one is a typed retryable state that the durable intake redelivers."""

from __future__ import annotations

import time

import msgspec

from conductor.client import ConductorClient
from conductor.pool import load_pool
from conductor.settings import CommonSettings
from schemas.errors import ErrorCode, ErrorInfo
from schemas.solve import SolveRequest
from schemas.verify import Outcome, VerifyBatchResult
from services.executor.config import CallSettings, ExecutorSettings
from services.executor.core import Executor
from tests.executor.fakes import ScriptedTransport
from tests.executor.test_durable import WF, _settings, _start

DOWN = ErrorInfo(
    code=ErrorCode.UNAVAILABLE, message="verifier did not answer: NoRespondersError", retryable=True
)
QUICK = CallSettings(retry_base_s=0.01, retry_max_s=0.05)


class VerifierOutage(ScriptedTransport):
    """The verifier is down for ``down_s`` from its first request (or for its first ``failures`` requests)."""

    def __init__(self, *, down_s: float = 0.0, failures: int = 0) -> None:
        super().__init__([WF] * 10)
        self.down_s, self.failures = down_s, failures
        self.began: float | None = None
        self.failed = 0

    async def verify(self, batch, timeout):
        self.began = self.began or time.monotonic()
        if self.failed < self.failures or time.monotonic() - self.began < self.down_s:
            self.failed += 1
            return VerifyBatchResult(error=DOWN)
        return await super().verify(batch, timeout)


def _executor(t, verify_retry_s: float) -> Executor:
    calls = msgspec.structs.replace(QUICK, verify_retry_s=verify_retry_s)
    return Executor(load_pool(None), ExecutorSettings(common=CommonSettings(), calls=calls), t)


async def test_a_short_verifier_outage_is_retried_and_the_task_gets_its_verdict():
    """Failed before: the first unanswered request became the final verdict ``error`` with reward None."""
    t = VerifierOutage(failures=3)
    res = await _executor(t, verify_retry_s=30).solve(
        SolveRequest(question="Q?", reference="sim-knowledge@2")
    )
    assert res.error is None and res.verdict.outcome == Outcome.CORRECT and res.reward == 1.0
    assert t.failed == 3 and len(t.verify_batches) == 1


async def test_a_persistent_verifier_outage_is_a_typed_retryable_error_not_a_verdict():
    t = VerifierOutage(down_s=3600)
    res = await _executor(t, verify_retry_s=0.1).solve(
        SolveRequest(question="Q?", reference="sim-knowledge@2")
    )
    assert res.verdict is None and res.reward is None and res.answer is not None
    assert res.error.code == ErrorCode.UNAVAILABLE and res.error.retryable and t.failed >= 2


async def test_a_durable_task_outlives_a_verifier_outage_without_repeating_worker_calls(
    nats_url, subject_prefix
):
    """Failed before: 50/50 durable tasks were acked with verdict ``error`` after a 30 s verifier outage."""
    settings = _settings(nats_url, subject_prefix, backoff_base_s=0.1, backoff_max_s=0.2, max_deliver=1000)
    settings = msgspec.structs.replace(settings, calls=msgspec.structs.replace(QUICK, verify_retry_s=0.1))
    t = VerifierOutage(down_s=1.0)
    _svc, broker = await _start(settings, t)
    try:
        async with ConductorClient(settings.common) as client:
            await client.submit(SolveRequest(question="Q?", task_id="v-1", reference="sim-knowledge@2"))
            res = await client.result("v-1", wait=30)
    finally:
        await broker.stop()
    assert res.error is None and res.verdict.outcome == Outcome.CORRECT and res.reward == 1.0
    assert len(t.plan_requests) == 1 and len(t.work_requests) == 3  # redelivered for the verdict only

"""Verifier service: ``VerifyBatch`` in on ``conductor.verify`` (queue group "verifier"), ``VerifyBatchResult`` out."""

from __future__ import annotations

import time
from collections.abc import Mapping

import structlog
from faststream.nats import NatsBroker, NatsRouter

from conductor import metrics
from conductor.endpoints import serve
from schemas.errors import ErrorCode, ErrorInfo
from schemas.verify import VERIFY, Outcome, VerifyBatch, VerifyBatchResult
from services.verifier.config import Settings
from services.verifier.core import BatchTooLarge, Verifier

log = structlog.get_logger("conductor.verifier")


class VerifierService:
    name = "verifier"

    def __init__(self, settings: Settings, verifier: Verifier | None = None) -> None:
        self.settings = settings
        self._given = verifier  # tests share one warm verifier; the service then neither starts nor stops it
        self.verifier: Verifier | None = None
        self.router = NatsRouter()
        # Code references (LiveCodeBench private tests) make verify batches far larger than other messages.
        self.endpoints = [
            serve(
                VERIFY,
                self.handle_verify,
                prefix=settings.common.subject_prefix,
                max_bytes=settings.max_payload_bytes,
            )
        ]

    async def start(self, broker: NatsBroker) -> None:
        if self._given is not None:
            self.verifier = self._given
            return
        self.verifier = Verifier(self.settings)
        layers = await self.verifier.start()
        log.info(
            "verifier ready", sandbox=layers.describe(), refusing_code=bool(self.verifier.sandbox.refusal)
        )

    async def stop(self) -> None:
        if self.verifier is not None and self._given is None:
            await self.verifier.close()
        self.verifier = None

    async def handle_verify(self, batch: VerifyBatch) -> VerifyBatchResult:
        """Every item gets exactly one verdict, in order (a bad payload was answered by ``serve``)."""
        assert self.verifier is not None, "service not started"
        started = time.monotonic()
        try:
            verdicts = await self.verifier.verify_batch(batch.items)
        except BatchTooLarge as exc:
            return VerifyBatchResult(
                error=ErrorInfo(code=ErrorCode.BAD_REQUEST, message=str(exc), field="items")
            )
        metrics.verified(verdicts, time.monotonic() - started)
        log.info("verified", items=len(verdicts), errors=sum(v.outcome is Outcome.ERROR for v in verdicts))
        return VerifyBatchResult(verdicts=verdicts)


def create_service(env: Mapping[str, str] | None = None) -> VerifierService:
    return VerifierService(Settings.from_env(env))

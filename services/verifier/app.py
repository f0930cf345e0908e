"""Verifier service: ``VerifyBatch`` in on ``conductor.verify`` (queue group "verifier"), ``VerifyBatchResult`` out."""

from __future__ import annotations

import time
from collections.abc import Mapping

import structlog
from faststream.nats import NatsBroker, NatsRouter

from conductor import metrics
from conductor.endpoints import Endpoint
from conductor.wire import WireError, decode, encode
from schemas.verify import VERIFY_SUBJECT, Outcome, VerifyBatch, VerifyBatchResult
from services.verifier.config import Settings
from services.verifier.core import Verifier

log = structlog.get_logger("conductor.verifier")


class VerifierService:
    name = "verifier"

    def __init__(self, settings: Settings, verifier: Verifier | None = None) -> None:
        self.settings = settings
        self._given = verifier  # tests share one warm verifier; the service then neither starts nor stops it
        self.verifier: Verifier | None = None
        self.router = NatsRouter()
        self.endpoints = [
            Endpoint(
                settings.common.subject(VERIFY_SUBJECT),
                queue="verifier",
                title="verify",
                handler=self.handle_verify,
                on_error=lambda info: encode(VerifyBatchResult(error=info)),
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

    async def handle_verify(self, body: bytes) -> bytes:
        """A bad payload is a typed error naming the field; every item otherwise gets exactly one verdict, in order."""
        assert self.verifier is not None, "service not started"
        try:
            batch = decode(body, VerifyBatch, max_bytes=self.settings.max_payload_bytes)
        except WireError as exc:
            log.info("rejected verify batch", error=exc.info.message, field=exc.info.field)
            metrics.bad_request(VERIFY_SUBJECT)
            return encode(VerifyBatchResult(error=exc.info))
        started = time.monotonic()
        verdicts = await self.verifier.verify_batch(batch.items)
        metrics.verified(verdicts, time.monotonic() - started)
        log.info("verified", items=len(verdicts), errors=sum(v.outcome is Outcome.ERROR for v in verdicts))
        return encode(VerifyBatchResult(verdicts=verdicts))


def create_service(env: Mapping[str, str] | None = None) -> VerifierService:
    return VerifierService(Settings.from_env(env))

"""Executor service: takes solve requests from ``conductor.solve`` and answers with the task's result."""

from __future__ import annotations

from collections.abc import Mapping

import structlog
from faststream.nats import NatsBroker, NatsMessage, NatsRouter

from conductor.pool import Pool, load_pool
from conductor.wire import WireError, decode, encode
from schemas.solve import SOLVE_SUBJECT, SolveRequest, SolveResult
from services.executor.config import ExecutorSettings
from services.executor.core import Executor
from services.executor.transport import NatsTransport, Transport

log = structlog.get_logger("conductor.executor")


class ExecutorService:
    name = "executor"

    def __init__(self, settings: ExecutorSettings, pool: Pool | None = None, transport: Transport | None = None):
        self.settings = settings
        self.pool = pool or load_pool(settings.common.pool_file)
        self._transport = transport
        self.executor: Executor | None = None
        self.router = NatsRouter()
        self.router.subscriber(settings.common.subject(SOLVE_SUBJECT), queue="executor", title="solve")(
            self.handle_solve
        )

    async def start(self, broker: NatsBroker) -> None:
        transport = self._transport or NatsTransport(broker, self.settings.common)
        self.executor = Executor(self.pool, self.settings, transport)

    async def stop(self) -> None:
        self.executor = None

    async def handle_solve(self, msg: NatsMessage) -> bytes:
        """JSON ``SolveRequest`` in, JSON ``SolveResult`` out; bad input is a typed error naming the field."""
        assert self.executor is not None, "service not started"
        try:
            req = decode(msg.body, SolveRequest, max_bytes=self.settings.common.max_payload_bytes)
        except WireError as exc:
            log.info("rejected solve request", error=exc.info.message, field=exc.info.field)
            return encode(SolveResult(task_id="", error=exc.info))
        result = await self.executor.solve(req)
        log.info("task finished", task_id=result.task_id, error=result.error and result.error.code)
        return encode(result)


def create_service(env: Mapping[str, str] | None = None) -> ExecutorService:
    return ExecutorService(ExecutorSettings.from_env(env))

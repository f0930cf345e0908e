"""Worker-adapter service: answers ``conductor.work`` requests with one worker call each."""

from __future__ import annotations

from collections.abc import Mapping

import structlog
from faststream.nats import NatsBroker, NatsRouter

from conductor import metrics
from conductor.endpoints import serve
from conductor.logging import bound_contextvars, info_enabled
from conductor.pool import Pool, load_pool
from schemas.work import WORK, WORK_SUBJECT, WorkReply, WorkRequest
from services.worker_adapter.config import WorkerAdapterSettings, api_keys, check_keys, missing_keys
from services.worker_adapter.core import RetryPolicy, WorkerAdapter
from services.worker_adapter.provider import Provider
from services.worker_adapter.providers import build_providers
from services.worker_adapter.providers.replay import check_pool as check_replay
from services.worker_adapter.providers.sim import check_datasets
from services.worker_adapter.shared import Shared, shared_or_local

log = structlog.get_logger("conductor.worker_adapter")


class WorkerAdapterService:
    name = "worker-adapter"

    def __init__(
        self,
        settings: WorkerAdapterSettings,
        pool: Pool | None = None,
        *,
        keys: Mapping[str, str] | None = None,
        providers: Mapping[str, Provider] | None = None,
    ) -> None:
        self.settings = settings
        self.pool = pool or load_pool(settings.common.pool_file)
        self._keys = dict(keys or {})
        self._providers = dict(providers) if providers is not None else None
        self.adapter: WorkerAdapter | None = None
        self.shared: Shared | None = None
        self.router = NatsRouter()
        common = settings.common
        self.endpoints = [
            serve(WORK, self.handle_work, prefix=common.subject_prefix, max_bytes=common.max_payload_bytes)
        ]

    async def start(self, broker: NatsBroker) -> None:
        if self._providers is None:
            self._providers = build_providers(
                self.pool,
                self._keys,
                local_threads=self.settings.local_threads,
                replay_path=self.settings.replay_path,
            )
        for worker, env in missing_keys(self.pool, self._keys).items():  # allowed (create_service checked)
            log.warning("worker has no API key; its calls will fail", worker=worker, env_var=env)
        s = self.settings
        retry = RetryPolicy(
            base_s=s.backoff_base_s, max_s=s.backoff_max_s, retry_after_cap_s=s.retry_after_cap_s
        )
        nc = broker.connection if s.shared.enabled else None  # the in-memory test broker has no real one
        self.shared = await shared_or_local(nc, s.common.subject_prefix, self.pool, s.shared)
        self.adapter = WorkerAdapter(self.pool, self._providers, retry=retry, shared=self.shared)

    async def stop(self) -> None:
        self.adapter = None
        if self.shared is not None:
            await self.shared.aclose()
            self.shared = None
        for provider in {id(p): p for p in (self._providers or {}).values()}.values():
            await provider.aclose()

    async def handle_work(self, req: WorkRequest) -> WorkReply:
        """One worker call; provider failures are typed errors in the reply."""
        assert self.adapter is not None, "service not started"
        with bound_contextvars(task_id=req.task_id, round=req.round, step=req.step):
            reply = await self.adapter.call(req)
            if info_enabled():
                log.info(
                    "work done",
                    worker=req.worker,
                    attempts=reply.attempts,
                    latency_s=round(reply.latency_s, 3),
                    error=reply.error and reply.error.code,
                )
        metrics.work_finished(req, reply, WORK_SUBJECT)
        return reply


def create_service(env: Mapping[str, str] | None = None) -> WorkerAdapterService:
    """Everything the pool needs is checked before anything starts: each worker's API key (``SettingsError``
    unless CONDUCTOR_ALLOW_MISSING_KEYS), each sim worker's dataset and each replay worker's recorded model
    (``PoolError``)."""
    settings = WorkerAdapterSettings.from_env(env)
    pool = load_pool(settings.common.pool_file)
    keys = api_keys(pool, env)
    check_keys(pool, keys, settings)
    check_datasets(pool)
    check_replay(pool, settings.replay_path)
    return WorkerAdapterService(settings, pool, keys=keys)

"""Planner service: answers ``conductor.plan`` requests with a Conductor workflow (or a baseline's)."""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable, Mapping

import structlog
from faststream.nats import NatsBroker, NatsRouter

from conductor import metrics
from conductor.endpoints import Requester, serve
from conductor.logging import bound_contextvars, info_enabled
from schemas.plan import PLAN, PlanReply, PlanRequest
from schemas.work import WORK, WorkReply, WorkRequest
from services.planner.backend import build_policy, endpoint_check
from services.planner.config import PlannerSettings
from services.planner.core import Planner
from services.planner.policies.local import LocalPolicy
from services.planner.policies.worker import WorkerPolicy
from services.planner.policy import Policy, PolicyError
from services.planner.resolution import DEFAULT, resolve
from services.planner.versions import VersionWatcher

log = structlog.get_logger("conductor.planner")


class PlannerService:
    """``policy`` is the model policy backend (``build_policy`` from the settings, or a ``ScriptedPolicy`` in tests);
    None when the configured policy is a baseline. A local policy with ``CONDUCTOR_POLICY_VERSIONS`` set gets a
    ``VersionWatcher`` (services/planner/versions.py) that hot-loads published policy versions into it."""

    name = "planner"

    def __init__(
        self,
        settings: PlannerSettings,
        *,
        policy: Policy | None = None,
        check: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.settings = settings
        self._policy = policy
        self._check = check
        self.versions = (
            VersionWatcher(policy, settings)
            if isinstance(policy, LocalPolicy) and settings.versions != "off"
            else None
        )
        self.planner = Planner(settings, policy, worker_policy=self._worker_policy)
        self._requester: Requester | None = None
        self.router = NatsRouter()
        common = settings.common
        self.endpoints = [
            serve(PLAN, self.handle_plan, prefix=common.subject_prefix, max_bytes=common.max_payload_bytes)
        ]

    def _worker_policy(self, worker: str) -> WorkerPolicy:
        """``worker:<name>``: the Conductor prompt goes to that worker through the worker-adapter."""
        common = self.settings.common

        async def call(req: WorkRequest) -> WorkReply:
            if self._requester is None:
                raise PolicyError("the planner is not connected to NATS yet", retryable=True)
            return await self._requester.call(
                WORK, req, prefix=common.subject_prefix, timeout=self.settings.timeout_s
            )

        return WorkerPolicy(worker, call)

    async def start(self, broker: NatsBroker) -> None:
        if self._check is not None:
            await self._check()  # an `openai:` policy's endpoint lists its model, or `serve` stops
        if broker.connection is not None:  # None on FastStream's in-memory test broker
            self._requester = Requester(broker.connection)
            if self.versions is not None:
                await self.versions.start(broker.connection)
        log.info(
            "planner ready",
            policy=self._policy.name if self._policy else self.settings.policy,
            fallback=self.settings.fallback,
            resamples=self.settings.resamples,
            versions=self.settings.versions if self.versions else None,
        )

    async def stop(self) -> None:
        if self.versions is not None:
            await self.versions.stop()
        if self._policy is not None:
            await self._policy.aclose()

    async def handle_plan(self, req: PlanRequest) -> PlanReply:
        """A workflow for the request (bad input was answered by ``serve`` before it got here)."""
        started = time.monotonic()
        with bound_contextvars(task_id=req.task_id, round=req.round):
            reply = await self.planner.plan(req)
            metrics.plan_finished(reply, time.monotonic() - started)
            if info_enabled():
                log.info(
                    "planned",
                    policy=reply.policy,
                    steps=len(reply.workflow) if reply.workflow else None,
                    attempts=reply.attempts,
                    fallback=reply.fallback_used,
                    error=reply.error and reply.error.code,
                )
        return reply


def create_service(env: Mapping[str, str] | None = None) -> PlannerService:
    """The planner for ``env``. ``CONDUCTOR_POLICY=default`` is resolved here for the pool it serves
    (services/planner/resolution.py); an unset one was resolved by the command that started it (``serve``, ``demo``,
    ``eval``, which say which), and a bare factory (a test, an embedding) plans with the settings' default
    baseline, so that what runs never depends on which extras are installed."""
    env = os.environ if env is None else env
    if env.get("CONDUCTOR_POLICY", "").strip() == DEFAULT:
        env = resolve(env).env
    settings = PlannerSettings.from_env(env)
    return PlannerService(settings, policy=build_policy(settings, env), check=endpoint_check(settings, env))

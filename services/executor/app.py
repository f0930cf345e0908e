"""Executor service: solve requests from ``conductor.solve.<tenant>`` (request/reply), the learner's rollouts —
pulled from the work queue ``conductor.rollout.work.>`` by free capacity (services/executor/rollout_queue.py), or a
batch at a time from ``conductor.rollout`` (request/reply) — and, when durable, tasks from the JetStream work queue
``conductor.tasks.submit.<tenant>``; their tenants' cancels from ``conductor.cancel.<tenant>.<task_id>`` (every
replica). A task's tenant is read from the subject it came on, never from its payload (docs/tenancy.md)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

import msgspec
import nats.errors
import structlog
from faststream import AckPolicy
from faststream.nats import ConsumerConfig, NatsBroker, NatsMessage, NatsRouter, PullSub
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from opentelemetry.trace import SpanKind

from conductor import metrics, tracing
from conductor.access import inbox_prefix
from conductor.credentials import user_of
from conductor.endpoints import request_subject, serve
from conductor.liveness import WIND_DOWN_S
from conductor.logging import info_enabled
from conductor.pool import Pool, load_pool
from schemas.rollout import ROLLOUT, RolloutBatch, RolloutBatchResult
from schemas.solve import CANCEL, SOLVE, SOLVE_SUBJECT, CancelRequest, SolveRequest, SolveResult, valid_tenant
from schemas.tasks import INTAKE_CONSUMER, Names, TaskCheckpoint, task_key
from services.executor.cancels import Cancels, parse_subject
from services.executor.config import ExecutorSettings
from services.executor.core import Executor
from services.executor.intake import PULL_EXPIRY_S, Intake, admission
from services.executor.rollout_queue import RolloutPuller
from services.executor.rollouts import Rollouts
from services.executor.store import TaskStore, tasks_stream
from services.executor.transport import NatsTransport, Transport

log = structlog.get_logger("conductor.executor")
CANCELS = "cancels"  # ``metrics.store_entry_refused`` label


class ExecutorService:
    name = "executor"

    def __init__(
        self, settings: ExecutorSettings, pool: Pool | None = None, transport: Transport | None = None
    ):
        self.settings = settings
        self.pool = pool or load_pool(settings.common.pool_file)
        self.names = Names.for_prefix(settings.common.subject_prefix)
        self._transport = transport
        self.executor: Executor | None = None
        self.store: TaskStore | None = None
        self.intake: Intake | None = None
        self.rollouts: Rollouts | None = None
        self.pullers: list[RolloutPuller] = []  # started with the subscribers, drained with the endpoints
        self.cancels = Cancels()
        self._cancel_sub: Subscription | None = None
        self.router = NatsRouter()
        common = settings.common
        self.endpoints = [
            serve(
                SOLVE,
                self.handle_solve,
                prefix=common.subject_prefix,
                max_bytes=common.max_payload_bytes,
                rejected=metrics.task_rejected,
                # Past its deadline a solve starts no call and answers with what ran, so the requester can settle
                # its usage (the gateway: services/gateway/calls.py).
                wind_down_s=WIND_DOWN_S,
            ),
            serve(
                ROLLOUT, self.handle_rollout, prefix=common.subject_prefix, max_bytes=common.max_payload_bytes
            ),
        ]
        if settings.durable:
            taken = admission(self.pool, settings.intake, common.handler_concurrency)
            self.router.subscriber(
                self.names.submit(
                    "*"
                ),  # conductor.tasks.submit.<tenant>: the intake reads the tenant from it
                stream=tasks_stream(self.names, settings.store),
                durable=INTAKE_CONSUMER,
                pull_sub=PullSub(batch_size=min(64, taken), timeout=PULL_EXPIRY_S),
                # Fetched tasks arrive on this user's own inbox, the only one it may subscribe to (conductor/access.py);
                # FastStream would otherwise pull to the shared "_INBOX." prefix.
                inbox_prefix=f"{inbox_prefix(user_of(common, self.name))}.".encode(),
                config=ConsumerConfig(
                    ack_wait=settings.intake.ack_wait_s, max_deliver=settings.intake.max_deliver
                ),
                ack_policy=AckPolicy.MANUAL,
                max_workers=taken,
                title="tasks",
            )(self.handle_task)

    async def start(self, broker: NatsBroker) -> None:
        transport = self._transport or NatsTransport(broker, self.settings.common, self.settings.calls)
        self.executor = Executor(self.pool, self.settings, transport)
        # Rollouts share the bound durable tasks have: what the pool can serve at once (services/executor/intake.py).
        concurrency = admission(self.pool, self.settings.intake, self.settings.common.handler_concurrency)
        self.rollouts = Rollouts(self.executor, concurrency)
        if self.settings.durable:
            nc = broker.connection
            self.store = TaskStore(nc.jetstream(), self.names, self.settings.store, nc=nc)
            await self.store.ensure()
            self.intake = Intake(self.executor, self.store, self.settings.intake, self.cancels)
        if broker is not None and self.settings.rollout_pull:
            common = self.settings.common
            self.pullers = [
                RolloutPuller(
                    broker.connection,
                    self.rollouts,
                    prefix=common.subject_prefix,
                    calls=self.settings.calls,
                    max_bytes=common.max_payload_bytes,
                )
            ]
        if broker is not None:  # (a test may start the service on a transport of its own, without a broker)
            subject = self.settings.common.subject_prefix + CANCEL.subject(tenant="*", task_id=">")
            self._cancel_sub = await broker.connection.subscribe(subject, cb=self.handle_cancel)

    async def stop(self) -> None:
        if self._cancel_sub is not None:
            with contextlib.suppress(nats.errors.Error):
                await self._cancel_sub.unsubscribe()
            self._cancel_sub = None
        self.executor = self.intake = self.store = self.rollouts = None
        self.pullers = []

    def tenant_of_solve(self) -> str | None:
        """The tenant of the solve being handled: its subject's last token, which only that tenant may publish on
        (conductor/access.py). None outside a request (a test calling the handler) or for a name no tenant has."""
        subject = request_subject()
        head = self.settings.common.subject(SOLVE_SUBJECT) + "."
        tenant = subject.removeprefix(head) if subject is not None and subject.startswith(head) else None
        return tenant if tenant is not None and valid_tenant(tenant) else None

    async def handle_solve(self, req: SolveRequest) -> SolveResult:
        """Run one task to its result; bad input was answered by ``serve`` (a typed error naming the field)."""
        assert self.executor is not None, "service not started"
        tenant = self.tenant_of_solve()
        checkpoint = None
        if self.store is not None and self.settings.checkpoint_request_reply and tenant:
            store = self.store

            async def checkpoint(cp: TaskCheckpoint) -> None:
                await store.save_checkpoint(task_key(tenant, cp.task_id), cp)

        with self.cancels.watch(tenant, req) as cancel:
            result = await self.executor.solve(req, tenant=tenant, checkpoint=checkpoint, cancel=cancel)
        result = msgspec.structs.replace(result, tenant=tenant, key=req.key)
        if info_enabled():
            log.info(
                "task finished",
                task_id=result.task_id,
                tenant=tenant,
                error=result.error and result.error.code,
            )
        metrics.task_finished(result, SOLVE_SUBJECT)
        return result

    async def handle_cancel(self, msg: Msg) -> None:
        """A task's tenant asks it to stop (services/executor/cancels.py). The tenant is the subject's, which only
        that user may publish on; a payload naming another task than its subject is not believed."""
        where = parse_subject(msg.subject, self.settings.common.subject_prefix)
        try:
            ask = msgspec.json.decode(msg.data, type=CancelRequest)
        except msgspec.DecodeError as exc:  # also any other JSON object aimed here as a reply (issue 34)
            log.warning("undecodable cancel ignored", subject=msg.subject, error=str(exc)[:200])
            metrics.store_entry_refused(CANCELS, "undecodable")
            return
        if where is None or where[1] != ask.task_id or ask.tenant not in (None, where[0]):
            log.warning(
                "cancel for another task than its subject's ignored", subject=msg.subject, task_id=ask.task_id
            )
            metrics.store_entry_refused(CANCELS, "foreign")
            return
        tenant, task_id = where
        if self.cancels.cancel(tenant, task_id, ask.reason):
            log.info("task cancelled by its tenant", task_id=task_id, tenant=tenant, reason=ask.reason)

    async def handle_rollout(self, batch: RolloutBatch) -> RolloutBatchResult:
        """Score a batch of the learner's completions, results in the batch's order (services/executor/rollouts.py)."""
        assert self.rollouts is not None, "service not started"
        result = await self.rollouts.run(batch)
        if result.error is not None:
            log.info("rollout batch rejected", error=result.error.message, field=result.error.field)
            metrics.bad_request(ROLLOUT.subject)
        return result

    async def handle_task(self, msg: NatsMessage) -> None:
        """A durable task; acknowledgement is explicit (see services/executor/intake.py)."""
        assert self.intake is not None, "service not started"
        raw = msg.raw_message
        try:
            # The submitter's trace context rides in the message headers (conductor/tracing.py).
            with tracing.span(f"process {raw.subject}", kind=SpanKind.CONSUMER, headers=raw.headers):
                await self.intake.handle(raw)
        except Exception:
            # FastStream's own logging is off (conductor/broker.py): unlogged here, a failing delivery is silent.
            log.exception("durable task delivery failed; JetStream redelivers it after AckWait")
            raise


def create_service(env: Mapping[str, str] | None = None) -> ExecutorService:
    return ExecutorService(ExecutorSettings.from_env(env))

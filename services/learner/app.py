"""`conductor serve learner`: training jobs from a durable JetStream subject, progress events out.

The same ``pipeline.run`` as `conductor train`; here the job (schemas/learner.py) carries the config's TOML text,
rollouts go through this process's own NATS connection, and progress becomes ``LEARNER_PROGRESS`` events. One job
at a time per learner (it owns the accelerators). While a job runs the message gets an in-progress ack every third
of the AckWait; a learner that dies leaves the job unacknowledged, so JetStream redelivers it and the next learner
resumes it from the last checkpoint (a job always runs with ``resume``: its output directory is its identity).

Outcomes: finished → ack; a malformed config or a run that cannot start → error event, ack (deterministic, never
retried); rollouts unavailable or a verifier storm → error event, nak with a delay (transient: resumes later).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping

import msgspec
import structlog
from faststream import AckPolicy
from faststream.nats import ConsumerConfig, JStream, NatsBroker, NatsMessage, NatsRouter, PullSub
from nats.js.api import RetentionPolicy, StorageType

from conductor.access import inbox_prefix
from conductor.credentials import user_of
from conductor.endpoints import Requester
from conductor.settings import CommonSettings
from schemas.errors import ErrorCode, ErrorInfo
from schemas.learner import (
    JOBS_CONSUMER,
    JOBS_STREAM,
    LEARNER_PROGRESS,
    TRAIN_SUBJECT,
    TrainJob,
    TrainProgress,
)
from services.learner.config import ConfigError, parse_config
from services.learner.rollouts import RolloutClient, RolloutError, nats_transport

log = structlog.get_logger("conductor.learner")

ACK_WAIT_S = 60.0
PULL_EXPIRY_S = 5.0
RETRY_DELAY_S = 30.0


class LearnerSettings(msgspec.Struct, frozen=True, kw_only=True):
    """The learner service reads only the common settings: everything about a run (model, stages, GRPO, output
    directory) is in the job's config file (services/learner/config.py), so one learner can run any job."""

    common: CommonSettings = CommonSettings()


class LearnerService:
    name = "learner"

    def __init__(self, settings: LearnerSettings) -> None:
        self.settings = settings
        common = self.common = settings.common
        self.endpoints: list = []
        self.router = NatsRouter()
        self._broker: NatsBroker | None = None
        p = common.subject_prefix
        tag = "".join(c if c.isalnum() else "_" for c in p.strip(".")).upper()
        self.router.subscriber(
            p + TRAIN_SUBJECT,
            stream=JStream(JOBS_STREAM + (f"_{tag}" if tag else ""), subjects=[p + TRAIN_SUBJECT],
                           retention=RetentionPolicy.WORK_QUEUE, storage=StorageType.FILE),
            durable=JOBS_CONSUMER,
            pull_sub=PullSub(batch_size=1, timeout=PULL_EXPIRY_S),  # one job at a time; replicas share the queue
            inbox_prefix=f"{inbox_prefix(user_of(common, self.name))}.".encode(),  # its own inbox (conductor/access.py)
            config=ConsumerConfig(ack_wait=ACK_WAIT_S),
            ack_policy=AckPolicy.MANUAL,
            max_workers=1,
            title="learner-train",
        )(self.handle_job)

    async def start(self, broker: NatsBroker) -> None:
        self._broker = broker

    async def stop(self) -> None:
        self._broker = None

    async def handle_job(self, msg: NatsMessage) -> None:
        try:
            job = msgspec.json.decode(msg.body, type=TrainJob)
        except msgspec.DecodeError as exc:
            log.warning("undecodable training job dropped", error=str(exc))
            await msg.ack()
            return
        keep = asyncio.create_task(_keep_alive(msg))
        try:
            outcome = await self.train(job)
        finally:
            keep.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keep
        if outcome is not None and outcome.retryable:
            await msg.nak(delay=RETRY_DELAY_S)
        else:
            await msg.ack()

    async def train(self, job: TrainJob) -> ErrorInfo | None:
        """Run the job to its end; the error that stopped it, if any (also published as the final event)."""
        loop = asyncio.get_running_loop()
        error: ErrorInfo | None = None
        try:
            config = parse_config(job.config)
            if job.output_dir:
                config = msgspec.structs.replace(config, output=msgspec.structs.replace(config.output, dir=job.output_dir))
            assert self._broker is not None
            client = RolloutClient(nats_transport(Requester(self._broker.connection), self.common.subject_prefix),
                                   config.rollout)  # fmt: skip

            def score(rollouts):
                return asyncio.run_coroutine_threadsafe(client.score(rollouts), loop).result()

            def progress(stage: str, step: int, total: int, figures: dict) -> None:
                event = TrainProgress(job_id=job.job_id, stage=stage, step=step, total=total,
                                      figures={k: float(v) for k, v in figures.items() if isinstance(v, int | float)})  # fmt: skip
                asyncio.run_coroutine_threadsafe(self._publish(event), loop)

            from services.learner.pipeline import run

            await asyncio.to_thread(run, config, score, resume=True, progress=progress)
        except ConfigError as exc:
            error = ErrorInfo(code=ErrorCode.BAD_REQUEST, message=str(exc), field="config")
        except RolloutError as exc:
            error = exc.info
        except Exception as exc:  # a crash in training: reported, not retried blindly (the run resumes on resubmit)
            log.exception("training job failed", job_id=job.job_id)
            error = ErrorInfo(code=ErrorCode.INTERNAL, message=f"training failed: {type(exc).__name__}: {exc}"[:500])
        await self._publish(TrainProgress(job_id=job.job_id, stage="done", done=True, error=error))
        return error

    async def _publish(self, event: TrainProgress) -> None:
        if self._broker is not None:
            subject = self.common.subject_prefix + LEARNER_PROGRESS.subject(job_id=event.job_id)
            await self._broker.connection.publish(subject, msgspec.json.encode(event))


async def _keep_alive(msg: NatsMessage) -> None:
    while True:
        await asyncio.sleep(ACK_WAIT_S / 3)
        await msg.in_progress()


def create_service(env: Mapping[str, str] | None = None) -> LearnerService:
    return LearnerService(LearnerSettings(common=CommonSettings.from_env(env)))

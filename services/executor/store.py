"""The executor's durable state on JetStream: the task stream, checkpoints, results, result events, dead letters.

Names come from ``schemas/tasks.py``; a subject prefix (tests, multi-tenant deployments) is applied to subjects
and folded into stream/bucket names so separate prefixes never share state.
"""

from __future__ import annotations

import msgspec
import nats.js.api as js_api
import nats.js.errors as js_errors
from faststream.nats import JStream
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from conductor.wire import encode
from schemas.solve import SolveResult
from schemas.tasks import (
    CHECKPOINT_VERSION,
    DeadLetter,
    Names,
    TaskCheckpoint,
)
from services.executor.config import StoreSettings

_result_dec = msgspec.json.Decoder(SolveResult)
_checkpoint_dec = msgspec.json.Decoder(TaskCheckpoint)


async def ensure_stream(js: JetStreamContext, config: js_api.StreamConfig) -> None:
    """Create the stream, or update it to this config when it already exists (idempotent across replicas)."""
    try:
        await js.add_stream(config)
    except js_errors.BadRequestError:
        await js.update_stream(config)


def tasks_stream(names: Names, settings: StoreSettings) -> JStream:
    """The durable intake's work queue, declared here once: the intake subscriber carries it (FastStream declares
    it when the broker starts) and ``TaskStore.ensure`` reconciles it, so whichever runs first the other changes
    nothing. File storage: a queued task outlives a server restart."""
    return JStream(
        names.tasks_stream,
        subjects=[names.submit_subject],
        retention=js_api.RetentionPolicy.WORK_QUEUE,
        duplicate_window=settings.duplicate_window_s,
        storage=js_api.StorageType.FILE,
    )


def stream_config(stream: JStream) -> js_api.StreamConfig:
    """The config FastStream's broker declares for ``stream`` (its config with its subjects), for nats-py."""
    return stream.config.evolve(subjects=list(stream.subjects))


async def ensure_tasks_stream(js: JetStreamContext, names: Names, settings: StoreSettings) -> None:
    await ensure_stream(js, stream_config(tasks_stream(names, settings)))


class TaskStore:
    def __init__(self, js: JetStreamContext, names: Names, settings: StoreSettings) -> None:
        self.js = js
        self.names = names
        self.settings = settings
        self._results: KeyValue | None = None
        self._checkpoints: KeyValue | None = None

    async def ensure(self) -> None:
        """Create (or reconcile) every stream and bucket; safe to run from every replica at start-up."""
        n, s = self.names, self.settings
        await ensure_tasks_stream(self.js, n, s)
        await ensure_stream(
            self.js,
            js_api.StreamConfig(
                name=n.result_events_stream,
                subjects=[f"{n.result_prefix}.>"],
                duplicate_window=s.duplicate_window_s,
                max_age=s.results_ttl_s,
                max_msgs_per_subject=1,
            ),
        )
        await ensure_stream(
            self.js, js_api.StreamConfig(name=n.dead_stream, subjects=[f"{n.dead_prefix}.>"], max_age=s.results_ttl_s)
        )
        self._results = await self.js.create_key_value(bucket=n.results_bucket, history=1, ttl=s.results_ttl_s)
        self._checkpoints = await self.js.create_key_value(
            bucket=n.checkpoints_bucket, history=1, ttl=s.checkpoints_ttl_s
        )

    @property
    def results(self) -> KeyValue:
        assert self._results is not None, "TaskStore.ensure() not called"
        return self._results

    @property
    def checkpoints(self) -> KeyValue:
        assert self._checkpoints is not None, "TaskStore.ensure() not called"
        return self._checkpoints

    async def result(self, task_id: str) -> SolveResult | None:
        try:
            entry = await self.results.get(task_id)
        except js_errors.KeyNotFoundError:
            return None
        return _result_dec.decode(entry.value) if entry.value else None

    async def store_result(self, result: SolveResult) -> SolveResult:
        """Store the final result once; if another delivery stored one first, that one wins and is returned."""
        try:
            await self.results.create(result.task_id, encode(result))
        except js_errors.KeyWrongLastSequenceError:
            existing = await self.result(result.task_id)
            if existing is not None:
                return existing
            raise
        return result

    async def publish_result_event(self, result: SolveResult) -> None:
        """Publish once per task: deduplicated by task id, and skipped when the subject already holds it."""
        subject = self.names.result_subject(result.task_id)
        try:
            await self.js.get_last_msg(self.names.result_events_stream, subject)
            return
        except js_errors.NotFoundError:
            pass
        await self.js.publish(subject, encode(result), headers={"Nats-Msg-Id": result.task_id})

    async def checkpoint(self, task_id: str) -> TaskCheckpoint | None:
        try:
            entry = await self.checkpoints.get(task_id)
        except js_errors.KeyNotFoundError:
            return None
        return _checkpoint_dec.decode(entry.value) if entry.value else None

    async def save_checkpoint(self, cp: TaskCheckpoint) -> None:
        """Stamped with this executor's format version, whoever wrote the checkpoint it resumed from."""
        await self.checkpoints.put(cp.task_id, encode(msgspec.structs.replace(cp, schema_version=CHECKPOINT_VERSION)))

    async def drop_checkpoint(self, task_id: str) -> None:
        await self.checkpoints.purge(task_id)

    async def dead_letter(self, letter: DeadLetter) -> None:
        await self.js.publish(
            self.names.dead_subject(letter.task_id), encode(letter), headers={"Nats-Msg-Id": letter.task_id}
        )

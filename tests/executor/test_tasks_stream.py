"""The tasks stream is declared once: the intake's subscriber (FastStream declares it at broker start) and
``TaskStore.ensure`` (nats-py, on every replica) ask JetStream for the identical config, so whichever runs first,
the other changes nothing."""

from __future__ import annotations

import nats.js.api as js_api
import pytest

from conductor.broker import make_broker
from conductor.service import full_router
from conductor.settings import CommonSettings
from schemas.tasks import Names
from services.executor import store
from services.executor.app import ExecutorService
from services.executor.config import ExecutorSettings, StoreSettings


class RecordingJetStream:
    """Just enough of nats-py's JetStreamContext to see the configs ``TaskStore.ensure`` declares."""

    def __init__(self) -> None:
        self.streams: dict[str, js_api.StreamConfig] = {}

    async def add_stream(self, config: js_api.StreamConfig) -> None:
        assert config.name is not None
        self.streams[config.name] = config

    async def create_key_value(self, **_: object) -> None:
        return None


def _service(prefix: str, url: str = "nats://127.0.0.1:4222") -> ExecutorService:
    common = CommonSettings(nats_url=url, subject_prefix=prefix, drain_timeout_s=0.2)
    return ExecutorService(ExecutorSettings(common=common, store=StoreSettings(duplicate_window_s=42.0)))


def _subscribers_stream(service: ExecutorService) -> js_api.StreamConfig:
    """What FastStream's broker start declares for the intake subscriber's stream: its config with its subjects."""
    (subscriber,) = service.router.subscribers
    stream = subscriber.stream
    return stream.config.evolve(subjects=list(stream.subjects))


async def test_the_subscriber_and_the_store_declare_the_identical_config(subject_prefix: str) -> None:
    service = _service(subject_prefix)
    names, settings = service.names, service.settings.store
    js = RecordingJetStream()
    await store.TaskStore(js, names, settings).ensure()  # type: ignore[arg-type]
    declared = _subscribers_stream(service)
    assert js.streams[names.tasks_stream] == declared
    assert declared == store.stream_config(store.tasks_stream(names, settings))
    assert (declared.name, declared.subjects) == (names.tasks_stream, [names.submit("*")])  # per tenant
    assert declared.retention == js_api.RetentionPolicy.WORK_QUEUE and declared.duplicate_window == 42.0


@pytest.mark.nats
async def test_on_a_real_server_the_store_changes_nothing_the_subscriber_declared(
    nats_url: str, subject_prefix: str
) -> None:
    service = _service(subject_prefix, nats_url)
    names = Names.for_prefix(subject_prefix)
    broker = make_broker(service.settings.common, name="test-executor")
    broker.include_router(full_router(service))
    await broker.start()
    try:
        js = broker.connection.jetstream()
        before = (await js.stream_info(names.tasks_stream)).config
        await store.ensure_tasks_stream(js, names, service.settings.store)
        after = (await js.stream_info(names.tasks_stream)).config
    finally:
        await broker.stop()
    assert after == before
    assert before.duplicate_window == 42.0 and before.retention == js_api.RetentionPolicy.WORK_QUEUE

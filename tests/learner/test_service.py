"""`conductor serve learner` on a real nats-server: a job from the durable subject, its progress events, typed
errors. The training itself is the pipeline's (test_learning.py); here a job that cannot start."""

from __future__ import annotations

import asyncio

import msgspec
import nats
import pytest

from conductor import metrics
from conductor.app.runtime import create_services, running
from conductor.settings import CommonSettings
from schemas.errors import ErrorCode
from schemas.learner import LEARNER_PROGRESS, TRAIN_SUBJECT, TrainJob, TrainProgress

pytestmark = pytest.mark.nats


async def test_a_malformed_job_config_is_a_typed_error_event_and_is_not_redelivered(nats_url, subject_prefix):
    env = {"NATS_URL": nats_url, "CONDUCTOR_SUBJECT_PREFIX": subject_prefix, "CONDUCTOR_LOG_LEVEL": "WARNING"}
    events: list[TrainProgress] = []
    bad_jobs = (
        metrics.REGISTRY.get_sample_value("conductor_learner_jobs_total", {"outcome": "bad_request"}) or 0.0
    )
    nc = await nats.connect(nats_url)
    sub_subject = subject_prefix + LEARNER_PROGRESS.subject(job_id="j-1")

    async def on_event(msg) -> None:
        events.append(msgspec.json.decode(msg.data, type=TrainProgress))

    await nc.subscribe(sub_subject, cb=on_event)
    async with running(create_services(["learner"], env), CommonSettings.from_env(env), name="learner-test"):
        js = nc.jetstream()
        job = TrainJob(job_id="j-1", config="[grpo]\ngenerations = 1\n")
        await js.publish(
            subject_prefix + TRAIN_SUBJECT, msgspec.json.encode(job), headers={"Nats-Msg-Id": "j-1"}
        )
        for _ in range(100):
            if events:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
    await nc.close()
    assert len(events) == 1
    done = events[0]
    assert done.done and done.error is not None
    assert done.error.code is ErrorCode.BAD_REQUEST and "grpo.generations" in done.error.message
    assert (
        metrics.REGISTRY.get_sample_value("conductor_learner_jobs_total", {"outcome": "bad_request"})
        == bad_jobs + 1
    )

"""The learner's subjects on a secured server (conductor/access.py): the learner, as its own user, takes a job from
its stream and publishes its progress, and publishes a policy version (Object Store + announcement) that a planner,
as its own user, reads and hot-loads — nothing on the way refused. Nobody else may write a version or announce one.
"""

from __future__ import annotations

import asyncio

import msgspec
import nats.errors
import nats.js.errors
import pytest

from conductor.app.runtime import create_services, running
from conductor.policy_versions import open_bucket
from conductor.settings import CommonSettings
from schemas.learner import LEARNER_PROGRESS, TRAIN_SUBJECT, TrainJob, TrainProgress
from schemas.tasks import Names
from services.learner.versions import publish_adapter
from tests.adapters import PROMPT, TOKENS

pytestmark = pytest.mark.nats

NAMES = Names.for_prefix("")


async def test_a_job_runs_from_the_learners_stream_and_reports_as_the_learner(secured):
    """A client submits a job and follows its progress; the learner service creates its stream and durable
    consumer, takes the job, acks it and publishes the final event, all as the user `learner`."""
    before = len(secured.log())
    env = {**secured.env, "CONDUCTOR_LOG_LEVEL": "WARNING"}
    events: list[TrainProgress] = []
    client = await secured.connect("trainer")  # an operator's act (issue 19, item 2), not a client's

    async def on_event(msg) -> None:
        events.append(msgspec.json.decode(msg.data, type=TrainProgress))

    try:
        await client.subscribe(LEARNER_PROGRESS.subject(job_id="j-secured"), cb=on_event)
        async with running(create_services(["learner"], env), CommonSettings.from_env(env), name="learner"):
            job = TrainJob(job_id="j-secured", config="[grpo]\ngenerations = 1\n")  # malformed: a typed error
            await client.jetstream().publish(
                TRAIN_SUBJECT, msgspec.json.encode(job), headers={"Nats-Msg-Id": "j-s"}
            )
            for _ in range(200):
                if events:
                    break
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.3)  # the ack
    finally:
        await client.close()
    assert len(events) == 1 and events[0].done and events[0].error is not None
    assert "Violation" not in secured.log()[before:]


async def test_a_version_published_by_the_learner_is_hot_loaded_by_the_planner(secured, tiny_adapters):
    before = len(secured.log())
    env = {
        **secured.env,
        "CONDUCTOR_LOG_LEVEL": "WARNING",
        "CONDUCTOR_POLICY": f"local:{tiny_adapters.base}",
        "CONDUCTOR_POLICY_VERSIONS": "watch",
    }
    (planner,) = create_services(["planner"], env)
    policy = planner._policy
    learner = await secured.connect("learner")
    try:
        async with running([planner], CommonSettings.from_env(env), name="planner"):
            await publish_adapter(
                learner, tiny_adapters.a, base_dir=tiny_adapters.base, run="secured", step=3
            )
            for _ in range(600):
                if policy.active is not None and policy.active.version == "secured@3":
                    break
                await asyncio.sleep(0.05)
            (sample,) = await policy.sample(PROMPT, n=1, temperature=0.0, max_tokens=TOKENS)
    finally:
        await learner.close()
    assert sample.text == tiny_adapters.text["a"]
    assert "Violation" not in secured.log()[before:]


async def test_nobody_but_the_learner_writes_a_version(secured):
    """A planner (read-only on the bucket), a client and a worker-adapter try to put an object with nats-py's own
    Object Store calls: all refused, and the bucket holds no such object."""
    learner = await secured.connect("learner")
    try:
        await open_bucket(learner.jetstream(), NAMES.policies_bucket, create=True)
    finally:
        await learner.close()
    for user in ("planner", "client", "worker-adapter"):
        nc = await secured.connect(user)
        try:
            with pytest.raises((nats.errors.Error, nats.js.errors.Error)):
                store = await nc.jetstream(timeout=1).object_store(NAMES.policies_bucket)
                await store.put("forged/1", b"not an adapter")
        finally:
            await nc.close()
    learner = await secured.connect("learner")
    try:
        store = await learner.jetstream().object_store(NAMES.policies_bucket)
        with pytest.raises(nats.js.errors.ObjectNotFoundError):
            await store.get_info("forged/1")
    finally:
        await learner.close()

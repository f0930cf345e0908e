"""Policy versions, the planner's side: the learner's publish (services/learner/versions.py) reaches a running
planner, whose local backend hot-loads it without a restart — its next sample comes from the new adapter (the tiny
model and adapters of tests/adapters.py, each writing something else greedily). Corrupt versions and versions for
another base are refused and the served one stays; at start-up the newest version for the planner's base is
loaded before any sample; a pinned version is the only one loaded. Real nats-server."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import msgspec
import nats
import pytest
from nats.js.api import ObjectMeta

from conductor import metrics
from conductor.app.runtime import running
from conductor.policy_versions import announcement_subject, pack, put_version
from conductor.settings import CommonSettings
from schemas.tasks import Names
from services.learner.versions import publish_adapter
from services.planner.app import PlannerService
from services.planner.backend import build_policy
from services.planner.config import PlannerSettings
from services.planner.policies.local import LocalPolicy
from tests.adapters import PROMPT, TOKENS

OTHER_BASE = "sha256:" + "1" * 64


async def _text(policy: LocalPolicy) -> str:
    (sample,) = await policy.sample(PROMPT, n=1, temperature=0.0, max_tokens=TOKENS)
    return sample.text


async def _until(predicate, timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.05)


def _loads(outcome: str) -> float:
    return (
        metrics.REGISTRY.get_sample_value("conductor_policy_version_loads_total", {"outcome": outcome}) or 0.0
    )


def _planner(nats_url: str, prefix: str, base: Path, versions: str = "watch") -> tuple[PlannerService, dict]:
    env = {
        "NATS_URL": nats_url,
        "CONDUCTOR_SUBJECT_PREFIX": prefix,
        "CONDUCTOR_LOG_LEVEL": "WARNING",
        "CONDUCTOR_POLICY": f"local:{base}",
        "CONDUCTOR_POLICY_VERSIONS": versions,
    }
    settings = PlannerSettings.from_env(env)
    return PlannerService(settings, policy=build_policy(settings, env)), env


@pytest.fixture
async def learner(nats_url):
    nc = await nats.connect(nats_url)
    yield nc
    await nc.close()


@pytest.mark.nats
async def test_a_published_version_is_hot_loaded_and_the_next_sample_is_its_own(
    nats_url, subject_prefix, tiny_adapters, learner
):
    svc, env = _planner(nats_url, subject_prefix, tiny_adapters.base)
    policy = svc._policy
    assert isinstance(policy, LocalPolicy) and svc.versions is not None
    async with running([svc], CommonSettings.from_env(env), name="planner-versions"):
        assert await _text(policy) == tiny_adapters.text[None]  # an empty bucket: the base model
        a = await publish_adapter(
            learner, tiny_adapters.a, base_dir=tiny_adapters.base, run="tiny", step=10, prefix=subject_prefix
        )
        await _until(lambda: policy.active is not None and policy.active.version == "tiny@10")
        assert await _text(policy) == tiny_adapters.text["a"]
        assert policy.active.sha256 == a.sha256 and policy.active.base == a.base
        info = metrics.REGISTRY.get_sample_value(
            "conductor_policy_version_info", {"version": "tiny@10", "base": a.base, "sha256": a.sha256}
        )
        assert info == 1.0
        await publish_adapter(
            learner,
            tiny_adapters.b,
            base_dir=tiny_adapters.base,
            run="tiny",
            step=20,
            prefix=subject_prefix,
            base=a.base,
        )
        await _until(lambda: policy.active.version == "tiny@20")
        assert await _text(policy) == tiny_adapters.text["b"]


@pytest.mark.nats
async def test_corrupt_and_foreign_versions_are_refused_and_the_served_one_stays(
    nats_url, subject_prefix, tiny_adapters, learner, tmp_path
):
    svc, env = _planner(nats_url, subject_prefix, tiny_adapters.base)
    policy = svc._policy
    assert isinstance(policy, LocalPolicy)
    async with running([svc], CommonSettings.from_env(env), name="planner-versions"):
        a = await publish_adapter(
            learner, tiny_adapters.a, base_dir=tiny_adapters.base, run="tiny", step=1, prefix=subject_prefix
        )
        await _until(lambda: policy.active is not None and policy.active.version == "tiny@1")
        corrupt, foreign = _loads("corrupt"), _loads("wrong_base")

        # Corrupt: the object holds adapter b's bytes; its description and announcement claim another digest.
        packed = tmp_path / "b.tar"
        pack(tiny_adapters.b, packed)
        bad = msgspec.structs.replace(
            a, version="tiny@2", step=2, object="tiny/2", size=packed.stat().st_size, sha256="ab" * 32
        )
        store = await learner.jetstream().object_store(Names.for_prefix(subject_prefix).policies_bucket)
        await store.put(
            bad.object, packed.read_bytes(), meta=ObjectMeta(description=msgspec.json.encode(bad).decode())
        )
        await learner.publish(announcement_subject("tiny", subject_prefix), msgspec.json.encode(bad))
        await _until(lambda: _loads("corrupt") == corrupt + 1)

        # Another base: a genuine adapter, announced for a base model this planner does not have.
        await publish_adapter(
            learner,
            tiny_adapters.b,
            base_dir=tiny_adapters.base,
            run="tiny",
            step=3,
            prefix=subject_prefix,
            base=OTHER_BASE,
        )
        await _until(lambda: _loads("wrong_base") == foreign + 1)

        assert policy.active.version == "tiny@1" and policy.active.sha256 == a.sha256
        assert await _text(policy) == tiny_adapters.text["a"]


@pytest.mark.nats
async def test_at_start_up_the_newest_version_for_its_base_is_loaded_before_any_sample(
    nats_url, subject_prefix, tiny_adapters, learner
):
    js, bucket = learner.jetstream(), Names.for_prefix(subject_prefix).policies_bucket
    base = (
        await publish_adapter(
            learner, tiny_adapters.a, base_dir=tiny_adapters.base, run="tiny", step=1, prefix=subject_prefix
        )
    ).base
    await put_version(js, bucket, tiny_adapters.b, run="tiny", step=2, base=base, max_bytes=1 << 30)
    await put_version(
        js, bucket, tiny_adapters.a, run="other", step=9, base=OTHER_BASE, max_bytes=1 << 30
    )  # newest
    svc, env = _planner(nats_url, subject_prefix, tiny_adapters.base)
    policy = svc._policy
    assert isinstance(policy, LocalPolicy)
    async with running([svc], CommonSettings.from_env(env), name="planner-versions"):
        assert await _text(policy) == tiny_adapters.text["b"]  # the first sample waited for tiny@2
        assert policy.active.version == "tiny@2"


@pytest.mark.nats
async def test_a_pinned_version_is_the_only_one_loaded(nats_url, subject_prefix, tiny_adapters, learner):
    svc, env = _planner(nats_url, subject_prefix, tiny_adapters.base, versions="tiny@5")
    policy = svc._policy
    assert isinstance(policy, LocalPolicy)
    async with running([svc], CommonSettings.from_env(env), name="planner-versions"):
        assert await _text(policy) == tiny_adapters.text[None]  # not published yet: the base
        base = (
            await publish_adapter(
                learner,
                tiny_adapters.b,
                base_dir=tiny_adapters.base,
                run="tiny",
                step=4,
                prefix=subject_prefix,
            )
        ).base
        await publish_adapter(
            learner,
            tiny_adapters.a,
            base_dir=tiny_adapters.base,
            run="tiny",
            step=5,
            prefix=subject_prefix,
            base=base,
        )
        await _until(lambda: policy.active is not None and policy.active.version == "tiny@5")
        assert await _text(policy) == tiny_adapters.text["a"]


async def test_a_generation_in_flight_finishes_on_the_model_it_started_with(tiny_adapters, monkeypatch):
    """The swap happens between generations: one already running keeps its model; the next uses the new one."""
    policy = LocalPolicy(str(tiny_adapters.base))
    base = await policy.base_fingerprint()
    started, go = threading.Event(), threading.Event()
    generate = LocalPolicy._generate

    def slow_generate(self, loaded, *args):
        started.set()
        go.wait(30)
        return generate(self, loaded, *args)

    monkeypatch.setattr(LocalPolicy, "_generate", slow_generate)
    in_flight = asyncio.create_task(_text(policy))
    await asyncio.to_thread(started.wait, 30)
    await policy.use_adapter(tiny_adapters.a, version="tiny@1", base=base)  # while the base model generates
    queued = asyncio.create_task(_text(policy))  # waits for the one in flight, then uses the new model
    go.set()
    assert await in_flight == tiny_adapters.text[None]
    assert await queued == tiny_adapters.text["a"]
    await policy.aclose()


async def test_the_configured_adapter_is_merged_at_the_first_load(tiny_adapters):
    policy = LocalPolicy(str(tiny_adapters.base), adapter=tiny_adapters.b)
    assert await _text(policy) == tiny_adapters.text["b"]
    assert policy.active is not None and policy.active.version is None
    await policy.aclose()

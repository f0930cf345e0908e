"""The rollout client: a group fans out in batches, timeouts and errors are typed, results keep their order."""

from __future__ import annotations

import asyncio
import time

import msgspec
import nats
import pytest

from bench.fakes import SkillScorer
from conductor.endpoints import EndpointServer, Requester, serve
from conductor.liveness import CallPolicy
from schemas.errors import ErrorCode, ErrorInfo
from schemas.rollout import ROLLOUT, Rollout, RolloutBatch, RolloutBatchResult, RolloutResult
from schemas.tasks import Names
from schemas.verify import TextReference
from services.learner.config import RolloutSection
from services.learner.rollouts import (
    RolloutClient,
    RolloutError,
    expected_calls,
    nats_transport,
    rollout_transport,
)
from tasks import sim

COMPLETION = 'Easy.\nmodel_id = [0]\nsubtasks = ["Solve it."]\naccess_list = [[]]'


def rollouts(n: int) -> list[Rollout]:
    ref = TextReference(answer="4", kind="math")
    return [
        Rollout(
            id=f"r{i}",
            question="What is 2+2?",
            pool=["sim-math"],
            completion=COMPLETION,
            reference=ref,
            domain="math",
        )
        for i in range(n)
    ]


class Recorder:
    """A transport that answers each batch after ``delay`` seconds and records concurrency."""

    def __init__(self, delay: float = 0.05, replies: list[RolloutBatchResult] | None = None) -> None:
        self.delay, self.sizes, self.in_flight, self.peak = delay, [], 0, 0
        self.replies = list(replies or [])

    async def __call__(self, batch: RolloutBatch, timeout: float) -> RolloutBatchResult:
        self.sizes.append(len(batch.rollouts))
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await asyncio.sleep(self.delay)
        finally:
            self.in_flight -= 1
        if self.replies:
            return self.replies.pop(0)
        return RolloutBatchResult(
            results=[RolloutResult(id=r.id, reward=1.0) for r in reversed(batch.rollouts)]
        )


async def test_a_group_fans_out_in_concurrent_batches_and_keeps_order() -> None:
    transport = Recorder()
    client = RolloutClient(transport, RolloutSection(batch_size=4, concurrency=3))
    results = await client.score(rollouts(10))
    assert transport.sizes == [4, 4, 2]
    assert transport.peak == 3
    assert [r.id for r in results] == [f"r{i}" for i in range(10)]


def chain(n: int) -> str:
    """A completion whose workflow makes ``n`` worker calls."""
    return f"model_id = {[0] * n}\nsubtasks = {['Solve it.'] * n}\naccess_list = {[[]] * n}"


async def test_a_step_is_sent_longest_first_and_answered_in_its_own_order() -> None:
    calls = [1, 0, 3, 2, 3, 1, 0, 2]
    group = [
        msgspec.structs.replace(r, completion=chain(n) if n else "no lists here")
        for r, n in zip(rollouts(len(calls)), calls, strict=True)
    ]
    assert [expected_calls(r) for r in group] == calls
    sent: list[str] = []

    class Logger(Recorder):
        async def __call__(self, batch: RolloutBatch, timeout: float) -> RolloutBatchResult:
            sent.extend(r.id for r in batch.rollouts)
            return await super().__call__(batch, timeout)

    results = await RolloutClient(Logger(), RolloutSection(batch_size=3)).score(group)
    assert sent == ["r2", "r4", "r3", "r7", "r0", "r5", "r1", "r6"]  # 3, 3, 2, 2, 1, 1, 0, 0: ties keep order
    assert [r.id for r in results] == [f"r{i}" for i in range(len(calls))]
    sent.clear()
    await RolloutClient(Logger(), RolloutSection(batch_size=3, order="as_given")).score(group)
    assert sent == [f"r{i}" for i in range(len(calls))]


async def test_a_slow_executor_is_a_typed_timeout() -> None:
    client = RolloutClient(Recorder(delay=5.0), RolloutSection(timeout_s=0.05, retries=0))
    with pytest.raises(RolloutError) as err:
        await client.score(rollouts(2))
    assert err.value.info.code is ErrorCode.TIMEOUT


async def test_retryable_errors_are_retried_then_typed() -> None:
    busy = RolloutBatchResult(
        error=ErrorInfo(code=ErrorCode.UNAVAILABLE, message="overloaded", retryable=True)
    )
    ok = Recorder(delay=0.0, replies=[busy])
    assert len(await RolloutClient(ok, RolloutSection(retries=1)).score(rollouts(2))) == 2
    always = Recorder(delay=0.0, replies=[busy] * 3)
    with pytest.raises(RolloutError, match="overloaded"):
        await RolloutClient(always, RolloutSection(retries=2)).score(rollouts(2))


async def test_a_bad_request_is_not_retried_and_a_short_reply_is_an_error() -> None:
    bad = RolloutBatchResult(error=ErrorInfo(code=ErrorCode.BAD_REQUEST, message="pool[0] unknown"))
    transport = Recorder(delay=0.0, replies=[bad])
    with pytest.raises(RolloutError, match="unknown"):
        await RolloutClient(transport, RolloutSection(retries=3)).score(rollouts(1))
    assert transport.sizes == [1]
    short = Recorder(delay=0.0, replies=[RolloutBatchResult(results=[])])
    with pytest.raises(RolloutError, match="0 results for 2"):
        await RolloutClient(short, RolloutSection()).score(rollouts(2))


@pytest.mark.nats
async def test_over_a_real_nats_server_with_a_fake_responder(nats_url: str, subject_prefix: str) -> None:
    """The real client path (Requester.call on the rollout contract) against a scripted executor; with nobody
    serving, the failure is a typed, retryable ``unavailable`` after the retries."""
    from conductor.pool import load_pool

    scorer = SkillScorer(load_pool(sim.pool_path()))
    nc = await nats.connect(nats_url)
    client = RolloutClient(
        nats_transport(Requester(nc), subject_prefix), RolloutSection(batch_size=3, retries=0, timeout_s=2)
    )
    try:
        with pytest.raises(RolloutError) as err:
            await client.score(rollouts(2))
        assert err.value.info.code is ErrorCode.UNAVAILABLE
        endpoint = serve(ROLLOUT, scorer.batch, prefix=subject_prefix, max_bytes=1 << 20)
        server = EndpointServer(nc, [endpoint], concurrency=4, drain_timeout_s=1)
        await server.start()
        results = await client.score(rollouts(7))
        await server.stop()
    finally:
        await nc.close()
    assert [r.id for r in results] == [f"r{i}" for i in range(7)]
    assert all(r.reward in (0.5, 1.0) for r in results)


@pytest.mark.nats
async def test_pulled_where_no_executor_declared_the_work_queue_the_batch_goes_by_request_reply(
    nats_url: str, subject_prefix: str
) -> None:
    """The default placement against executors older than the work queue: nobody declared it, so each batch is sent
    as one request, as before (backwards compatible; docs/learner.md)."""
    from conductor.pool import load_pool

    scorer = SkillScorer(load_pool(sim.pool_path()))
    nc = await nats.connect(nats_url)
    section = RolloutSection(batch_size=3, retries=0, timeout_s=10)
    assert section.placement == "pull"
    server = EndpointServer(
        nc,
        [serve(ROLLOUT, scorer.batch, prefix=subject_prefix, max_bytes=1 << 20)],
        concurrency=4,
        drain_timeout_s=1,
    )
    try:
        await server.start()
        results = await RolloutClient(rollout_transport(nc, subject_prefix, section), section).score(
            rollouts(5)
        )
        await server.stop()
    finally:
        await nc.close()
    assert [r.id for r in results] == [f"r{i}" for i in range(5)] == [r.id for r in scorer.seen]


@pytest.mark.nats
async def test_pulled_with_nobody_fetching_is_a_retryable_unavailable(
    nats_url: str, subject_prefix: str
) -> None:
    """The work queue exists but no executor fetches from it (none running): after ``failover_s`` without a pull
    request, an item in progress or a delivery, the batch is ``unavailable`` — not a wait for ``timeout_s``."""
    from services.executor.config import CallSettings
    from services.executor.rollout_queue import consumer_config, stream_config

    nc = await nats.connect(nats_url)
    names = Names.for_prefix(subject_prefix)
    try:
        await nc.jetstream().add_stream(stream_config(names, subject_prefix))
        await nc.jetstream().add_consumer(names.rollouts_stream, consumer_config(CallSettings()))
        section = RolloutSection(retries=0, timeout_s=60)
        transport = rollout_transport(nc, subject_prefix, section, CallPolicy(beat_s=0.2, failover_s=1.0))
        started = time.monotonic()
        with pytest.raises(RolloutError) as err:
            await RolloutClient(transport, section).score(rollouts(2))
        waited = time.monotonic() - started
    finally:
        await nc.close()
    assert err.value.info.code is ErrorCode.UNAVAILABLE and err.value.info.retryable
    assert "no executor fetched rollouts" in err.value.info.message and waited < 5.0, waited

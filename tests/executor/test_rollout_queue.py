"""Rollouts placed by load (issue 18, item 8): executors pull rollout items by free capacity from the work queue
(services/executor/rollout_queue.py), through the learner's own client (``RolloutClient`` over
``rollout_transport``), on a real nats-server. Replicas run in this process, each on its own connection (a replica
is lost by closing it: no acknowledgement, no progress mark, as a SIGKILLed process); scripted workers.

Before the work queue a batch was one request the queue group handed to one random replica: a batch of four on two
replicas of two slots each ran two at a time on one replica while the other idled (two rounds instead of one)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable

import msgspec
import nats
import pytest

from conductor.liveness import CallPolicy
from conductor.pool import load_pool
from conductor.settings import CommonSettings
from conductor.wire import encode
from schemas.errors import ErrorCode
from schemas.rollout import (
    ROLLOUT_RESULTS,
    ROLLOUT_WORK,
    ROLLOUTS_CONSUMER,
    Rollout,
    RolloutItem,
    RolloutOutcome,
    RolloutResult,
)
from schemas.tasks import Names
from services.executor.config import CallSettings, ExecutorSettings
from services.executor.core import Executor
from services.executor.rollout_queue import MAX_RUNS, RolloutPuller
from services.executor.rollouts import Rollouts
from services.learner.config import RolloutSection
from services.learner.rollouts import RolloutClient, RolloutError, rollout_transport
from tests.executor.fakes import ScriptedTransport
from tests.executor.test_rollout import ONE_STEP, VIEW

pytestmark = pytest.mark.nats

POOL = load_pool(None)
FAST = CallSettings(
    beat_s=0.2, beat_misses=3, retry_base_s=0.01
)  # AckWait 0.6 s: a lost replica in under a second
SETTINGS = ExecutorSettings(common=CommonSettings(), calls=FAST)
LATENCY_S = 1.0  # per worker call: a rollout of ONE_STEP takes one of these


def rollout(i: int, **kw) -> Rollout:
    fields = {
        "id": f"r{i}",
        "question": "Q?",
        "pool": VIEW,
        "completion": ONE_STEP,
        "reference": "sim-small@0",
    }
    return Rollout(**{**fields, **kw})


class Replica:
    """One executor replica: its own connection, its rollout slots, scripted workers that count what runs."""

    def __init__(self, nc: nats.NATS, prefix: str, slots: int, delay: float, calls: CallSettings) -> None:
        self.nc = nc
        self.workers = ScriptedTransport([], delay=delay)
        self.rollouts = Rollouts(Executor(POOL, SETTINGS, self.workers), slots)
        self.puller = RolloutPuller(nc, self.rollouts, prefix=prefix, calls=calls, max_bytes=1 << 20)

    async def lose(self) -> None:
        """As a SIGKILL: the connection gone, nothing acknowledged or given back."""
        await self.nc.close()


@contextlib.asynccontextmanager
async def replicas(
    url: str, prefix: str, *specs: tuple[int, float], calls: CallSettings = FAST
) -> AsyncIterator[list[Replica]]:
    """Replicas of (slots, worker latency), started and pulling (their pull requests waiting at the server)."""
    made = [Replica(await nats.connect(url), prefix, slots, delay, calls) for slots, delay in specs]
    try:
        for r in made:
            assert await r.puller.start()
        await waiting_pulls(url, prefix, len(made))
        yield made
    finally:
        for r in made:
            await r.puller.stop(drain_timeout_s=0.5)
            if r.nc.is_connected:
                await r.nc.close()


async def consumer(url: str, prefix: str):
    nc = await nats.connect(url)
    try:
        return await nc.jetstream().consumer_info(Names.for_prefix(prefix).rollouts_stream, ROLLOUTS_CONSUMER)
    finally:
        await nc.close()


async def waiting_pulls(url: str, prefix: str, n: int) -> None:
    for _ in range(100):
        if (await consumer(url, prefix)).num_waiting >= n:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"fewer than {n} pull requests waiting")


@contextlib.asynccontextmanager
async def learner(url: str, prefix: str, **section) -> AsyncIterator[RolloutClient]:
    """The learner's client as services/learner/connect.py builds it (default placement: pulled)."""
    nc = await nats.connect(url)
    settings = RolloutSection(**{"timeout_s": 30.0, "retries": 0, **section})
    try:
        yield RolloutClient(
            rollout_transport(nc, prefix, settings, CallPolicy(beat_s=0.2, failover_s=2.0)), settings
        )
    finally:
        await nc.close()


async def until(done: Callable[[], bool], timeout_s: float = 10.0) -> None:
    for _ in range(int(timeout_s / 0.02)):
        if done():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("not within the time allowed")


async def fetcher(nc: nats.NATS, prefix: str):
    """A raw fetch from the executors' consumer: a replica that takes an item and is then lost."""
    return await nc.jetstream().pull_subscribe_bind(
        ROLLOUTS_CONSUMER, Names.for_prefix(prefix).rollouts_stream
    )


async def test_a_batch_spreads_over_the_replicas_by_free_slots(nats_url, subject_prefix):
    """Two replicas of two slots, one batch of four equal rollouts: two run on each at once, none waits for a slot
    while another replica has one free, and the batch takes one rollout's time, not two."""
    async with replicas(nats_url, subject_prefix, (2, LATENCY_S), (2, LATENCY_S)) as (a, b):
        async with learner(nats_url, subject_prefix, batch_size=4) as client:
            started = time.monotonic()
            results = await client.score([rollout(i) for i in range(4)])
            wall = time.monotonic() - started
    assert [r.id for r in results] == ["r0", "r1", "r2", "r3"] and all(r.reward == 1.0 for r in results)
    assert (len(a.workers.work_requests), len(b.workers.work_requests)) == (2, 2)
    assert a.workers.max_active == b.workers.max_active == 2
    assert wall < 1.8 * LATENCY_S, wall


async def test_a_replica_never_holds_more_than_its_slots(nats_url, subject_prefix):
    """Twelve rollouts over replicas of one, two and three slots: each runs at most its slots at once, every one
    is busy (six at a time, two rounds), and each rollout runs once."""
    specs = ((1, LATENCY_S), (2, LATENCY_S), (3, LATENCY_S))
    async with replicas(nats_url, subject_prefix, *specs) as reps:
        async with learner(nats_url, subject_prefix, batch_size=16) as client:
            started = time.monotonic()
            results = await client.score([rollout(i) for i in range(12)])
            wall = time.monotonic() - started
    assert [r.id for r in results] == [f"r{i}" for i in range(12)]
    assert [r.workers.max_active for r in reps] == [1, 2, 3]
    assert [len(r.workers.work_requests) for r in reps] == [2, 4, 6]
    assert wall < 2.8 * LATENCY_S, wall


async def test_a_replica_lost_mid_rollout_has_its_items_run_by_another(nats_url, subject_prefix):
    """The replica holding the batch is lost mid-rollout: after AckWait (three missed progress marks) its items go
    to the replica that is left, which runs each once; the batch comes back whole, in order, scored."""
    async with replicas(nats_url, subject_prefix, (2, 60.0)) as (doomed,):
        async with learner(nats_url, subject_prefix, batch_size=2) as client:
            scoring = asyncio.create_task(client.score([rollout(0), rollout(1)]))
            await until(lambda: doomed.workers.active == 2)
            async with replicas(nats_url, subject_prefix, (2, 0.05)) as (survivor,):
                await doomed.lose()
                lost_at = time.monotonic()
                results = await asyncio.wait_for(scoring, 10)
                recovered_s = time.monotonic() - lost_at
    assert [(r.id, r.reward) for r in results] == [("r0", 1.0), ("r1", 1.0)]
    assert sorted(w.step for w in survivor.workers.work_requests) == [0, 0]  # each run once, here
    assert recovered_s < 3.0, recovered_s


async def test_a_second_outcome_for_an_item_is_dropped(nats_url, subject_prefix):
    """A replica that published its outcome and died before acknowledging: the item runs again elsewhere and a
    second outcome arrives. The learner keeps the first; the other is counted, never scored into a result."""
    nc = await nats.connect(nats_url)
    async with replicas(nats_url, subject_prefix, (1, 0.05)) as (declared,):
        await declared.puller.stop(drain_timeout_s=0.1)  # declared the queue; pulls no more
        section = RolloutSection(batch_size=1, timeout_s=30.0, retries=0)
        transport = rollout_transport(nc, subject_prefix, section)
        scoring = asyncio.create_task(RolloutClient(transport, section).score([rollout(0)]))
        (msg,) = await (await fetcher(nc, subject_prefix)).fetch(1, timeout=5)
        item = msgspec.json.decode(msg.data, type=RolloutItem)
        first = RolloutResult(id=item.rollout.id, reward=0.5, parsed=True, answer="the first")
        run = msg.subject.rsplit(".", 1)[-1]
        await nc.publish(
            subject_prefix + ROLLOUT_RESULTS.subject(run=run),
            encode(RolloutOutcome(key=item.key, result=first)),
        )  # never acknowledged
        (result,) = await asyncio.wait_for(scoring, 5)
        async with replicas(nats_url, subject_prefix, (1, 0.05)) as (second,):  # gets it after AckWait
            await until(lambda: transport.duplicates > 0)
    await nc.close()
    assert (result.answer, result.reward) == ("the first", 0.5)
    assert len(second.workers.work_requests) == 1 and transport.duplicates == 1


async def test_an_item_lost_too_often_comes_back_masked_unrun(nats_url, subject_prefix):
    nc = await nats.connect(nats_url)
    async with replicas(nats_url, subject_prefix, (1, 0.05)) as (declared,):
        await declared.puller.stop(drain_timeout_s=0.1)
        async with learner(nats_url, subject_prefix, batch_size=1) as client:
            scoring = asyncio.create_task(client.score([rollout(0, policy_version="p@3")]))
            sub = await fetcher(nc, subject_prefix)
            for _ in range(MAX_RUNS):  # delivered and lost, MAX_RUNS times
                (msg,) = await sub.fetch(1, timeout=5)
                await msg.nak()
            async with replicas(nats_url, subject_prefix, (1, 0.05)) as (last,):
                (result,) = await asyncio.wait_for(scoring, 5)
    await nc.close()
    assert (
        result.reward is None
        and result.error.code == ErrorCode.UNAVAILABLE
        and result.policy_version == "p@3"
    )
    assert f"lost {MAX_RUNS} times" in result.error.message and last.workers.work_requests == []


async def test_an_item_past_its_deadline_is_dropped_unrun(nats_url, subject_prefix):
    nc = await nats.connect(nats_url)
    async with replicas(nats_url, subject_prefix, (1, 0.05)) as (declared,):
        await declared.puller.stop(drain_timeout_s=0.1)
        item = RolloutItem(key="k-0", rollout=rollout(0), deadline=time.time() - 1)
        await nc.jetstream().publish(subject_prefix + ROLLOUT_WORK.subject(run="gone"), encode(item))
        async with replicas(nats_url, subject_prefix, (1, 0.05)) as (late,):
            for _ in range(100):
                info = await consumer(nats_url, subject_prefix)
                if info.num_pending == info.num_ack_pending == 0:
                    break
                await asyncio.sleep(0.02)
    await nc.close()
    assert info.num_pending == info.num_ack_pending == 0 and late.workers.work_requests == []


async def test_a_bad_rollout_fails_the_batch_naming_its_field_not_retried(nats_url, subject_prefix):
    async with replicas(nats_url, subject_prefix, (2, 0.05)) as (_serving,):
        async with learner(nats_url, subject_prefix, batch_size=2, retries=2) as client:
            with pytest.raises(RolloutError) as caught:
                await client.score([rollout(0), rollout(1, pool=["sim-small", "gpt-99"])])
            with pytest.raises(RolloutError) as twice:
                await client.score([rollout(0), rollout(0)])
    assert (caught.value.info.code, caught.value.info.field) == (ErrorCode.BAD_REQUEST, "rollouts[1].pool[1]")
    assert (twice.value.info.code, twice.value.info.field) == (ErrorCode.BAD_REQUEST, "rollouts[1].id")


async def test_stopping_gives_running_items_back_at_once(nats_url, subject_prefix):
    """A replica shutting down gives back what it could not finish within its drain timeout: another replica starts
    it at once, without waiting out AckWait."""
    slow = CallSettings(beat_s=5.0, beat_misses=3)  # AckWait 15 s: only a give-back explains a quick rerun
    async with replicas(nats_url, subject_prefix, (1, 60.0), calls=slow) as (stopping,):
        async with learner(nats_url, subject_prefix, batch_size=1) as client:
            scoring = asyncio.create_task(client.score([rollout(0)]))
            await until(lambda: stopping.workers.active == 1)
            async with replicas(nats_url, subject_prefix, (1, 0.05), calls=slow) as (taker,):
                started = time.monotonic()
                await stopping.puller.stop(drain_timeout_s=0.1)
                (result,) = await asyncio.wait_for(scoring, 10)
                waited = time.monotonic() - started
    assert result.reward == 1.0 and len(taker.workers.work_requests) == 1
    assert waited < 3.0, waited

"""Two worker-adapter replicas on one real nats-server: idempotent calls, the call cache, deployment-wide limits.

Each replica is a ``WorkerAdapter`` with its own NATS connection and its own ``Shared`` bundle (as two processes
would have); one scripted provider serves both, so the test sees every provider call the deployment makes.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence

import msgspec
import nats
import pytest
from nats.aio.client import Client

from conductor.natsserver import NatsServer, find_binary, free_port, reachable
from conductor.pool import Pool, WorkerSpec
from schemas.errors import ErrorCode
from schemas.usage import Usage
from schemas.work import ChatMessage, FaultReason, WorkReply, WorkRequest
from services.worker_adapter.cache import call_digest
from services.worker_adapter.config import SharedSettings
from services.worker_adapter.core import RetryPolicy, WorkerAdapter, call_params
from services.worker_adapter.ledger import CallLedger, Running, call_key
from services.worker_adapter.limits import Holding, SharedLimits, Unlimited, WorkerLoad
from services.worker_adapter.provider import (
    CallParams,
    Completion,
    PermanentProviderError,
    TransientProviderError,
)
from services.worker_adapter.shared import Shared, open_shared, shared_or_local
from services.worker_adapter.stats import CallStats
from services.worker_adapter.store import Buckets, open_bucket
from services.worker_adapter.writebehind import WriteBehind

pytestmark = pytest.mark.nats

HELLO = [ChatMessage(role="user", content="hello")]
FAST = RetryPolicy(base_s=0.01, max_s=0.05, retry_after_cap_s=5.0)


class Counting:
    """A provider both replicas share. Each completion's text names its call number, so a replay or a cache hit is
    told apart from a fresh call by the text alone; ``gate`` holds calls until the test opens it."""

    def __init__(self, script: Sequence[Exception] = (), hold_s: float = 0.0) -> None:
        self.script = list(script)
        self.hold_s = hold_s
        self.calls = 0
        self.in_flight = 0
        self.peak = 0
        self.started_at: list[float] = []  # wall clock, for rate windows
        self.gate = asyncio.Event()
        self.gate.set()
        self.started = asyncio.Event()

    async def complete(
        self, spec: WorkerSpec, messages: Sequence[ChatMessage], params: CallParams
    ) -> Completion:
        self.calls += 1
        number = self.calls
        self.started_at.append(time.time())
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        self.started.set()
        try:
            await self.gate.wait()
            await asyncio.sleep(self.hold_s)
            if self.script:
                raise self.script.pop(0)
            return Completion(text=f"answer #{number}", input_tokens=10, output_tokens=5, model="m")
        finally:
            self.in_flight -= 1

    async def aclose(self) -> None:
        pass


class Replica(msgspec.Struct):
    adapter: WorkerAdapter
    shared: Shared
    nc: Client


def _pool(**spec: object) -> Pool:
    fields = {
        "name": "w",
        "provider": "openai",
        "model": "m",
        "max_retries": 2,
        "price_in_per_mtok": 1.0,
        **spec,
    }
    return Pool(workers=[WorkerSpec(**fields)])  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def replicas(
    url: str,
    prefix: str,
    provider: Counting,
    pool: Pool,
    *,
    n: int = 2,
    lease_s: float = 15.0,
    window_s: float = 60.0,
) -> AsyncIterator[list[Replica]]:
    settings = SharedSettings(lease_s=lease_s)
    async with contextlib.AsyncExitStack() as stack:
        out = []
        for i in range(n):
            nc = await nats.connect(url)
            stack.push_async_callback(nc.close)
            shared = await open_shared(nc, prefix, pool, settings, owner=f"r{i}", window_s=window_s)
            stack.push_async_callback(shared.aclose)
            out.append(
                Replica(WorkerAdapter(pool, {"openai": provider}, retry=FAST, shared=shared), shared, nc)
            )
        yield out


async def _kv_of(replica: Replica, bucket: str):
    return replica.nc, await replica.nc.jetstream().key_value(bucket)


async def _kv(url: str, bucket: str):
    nc = await nats.connect(url)
    return nc, await nc.jetstream().key_value(bucket)


def _req(**fields: object) -> WorkRequest:
    return WorkRequest(**{"worker": "w", "messages": HELLO, "idempotent": True, **fields})  # type: ignore[arg-type]


async def test_a_duplicate_waits_for_the_call_in_flight_on_another_replica(nats_url, subject_prefix):
    provider = Counting()
    provider.gate.clear()
    req = _req(task_id="task/1 é", round=1, step=2)  # not KV-key characters: escaped
    async with replicas(nats_url, subject_prefix, provider, _pool()) as (a, b):
        first = asyncio.create_task(a.adapter.call(req))
        await provider.started.wait()
        second = asyncio.create_task(b.adapter.call(req))
        await asyncio.sleep(0.2)
        assert not second.done() and provider.calls == 1
        provider.gate.set()
        ra, rb = await asyncio.gather(first, second)
        assert provider.calls == 1 and ra.text == rb.text == "answer #1"
        assert not ra.replayed and rb.replayed and rb.usage == ra.usage and rb.error is None
        assert b.adapter.stats().joined == 1

        again = await b.adapter.call(req)  # after it finished: replayed from KV, no call
        same_here = await asyncio.gather(a.adapter.call(req), a.adapter.call(req))
        assert provider.calls == 1 and again.replayed and again.text == "answer #1"
        assert all(r.replayed and r.text == "answer #1" for r in same_here)
        assert b.adapter.stats().replays == 2


async def test_in_process_duplicates_share_one_call(nats_url, subject_prefix):
    provider = Counting(hold_s=0.05)
    async with replicas(nats_url, subject_prefix, provider, _pool(), n=1) as (a,):
        replies = await asyncio.gather(*(a.adapter.call(_req(task_id="t", step=3)) for _ in range(5)))
        assert provider.calls == 1 and {r.text for r in replies} == {"answer #1"}
        assert sum(r.replayed for r in replies) == 4


async def test_a_failed_call_is_run_again_by_the_next_request(nats_url, subject_prefix):
    provider = Counting(
        script=[PermanentProviderError("bad request", reason=FaultReason.CLIENT_ERROR, status=400)]
    )
    req = _req(task_id="t-fail")
    async with replicas(nats_url, subject_prefix, provider, _pool()) as (a, b):
        failed = await a.adapter.call(req)
        assert failed.error is not None and not failed.replayed
        retried = await b.adapter.call(req)
        assert retried.error is None and retried.text == "answer #2" and not retried.replayed
        assert provider.calls == 2


async def test_a_lapsed_claim_is_taken_over(nats_url, subject_prefix):
    """A replica that died mid-call stops renewing its lease; a duplicate waits it out, then runs the call."""
    provider = Counting()
    pool = _pool()
    req = _req(task_id="t-crash")
    spec = pool.workers[0]
    digest = call_digest(spec, call_params(spec, req), req.messages)
    async with replicas(nats_url, subject_prefix, provider, pool, n=1) as (b,):
        nc, kv = await _kv(nats_url, Buckets.for_prefix(subject_prefix).calls)
        now = time.time()
        dead = Running(owner="dead", digest=digest, started_at=now, lease_until=now + 0.5)
        await kv.create(call_key(req), msgspec.json.encode(dead))
        assert b.shared.ledger is not None
        b.shared.ledger.grace_s = 0.1
        start = time.monotonic()
        reply = await b.adapter.call(req)
        assert 0.5 <= time.monotonic() - start < 3
        assert reply.error is None and provider.calls == 1 and b.adapter.stats().takeovers == 1
    await nc.close()


async def test_a_long_call_keeps_its_claim(nats_url, subject_prefix):
    """The owner renews its lease while the call runs, so a duplicate waits instead of taking over."""
    provider = Counting(hold_s=1.0)
    req = _req(task_id="t-long")
    async with replicas(nats_url, subject_prefix, provider, _pool(), lease_s=0.45) as (a, b):
        assert b.shared.ledger is not None
        b.shared.ledger.grace_s = 0.05
        first = asyncio.create_task(a.adapter.call(req))
        await provider.started.wait()
        second = await b.adapter.call(req)
        assert provider.calls == 1 and second.replayed and second.text == (await first).text
        assert b.adapter.stats().takeovers == 0


async def test_our_own_orphaned_claim_is_taken_over_at_once(nats_url, subject_prefix):
    """A claim whose ``create`` landed but whose acknowledgement was lost (a reconnect): same owner, not running."""
    provider = Counting()
    pool = _pool()
    req = _req(task_id="t-orphan")
    spec = pool.workers[0]
    digest = call_digest(spec, call_params(spec, req), req.messages)
    async with replicas(nats_url, subject_prefix, provider, pool, n=1) as (b,):
        _, kv = await _kv_of(b, Buckets.for_prefix(subject_prefix).calls)
        now = time.time()
        mine = Running(owner="r0", digest=digest, started_at=now, lease_until=now + 60)
        await kv.create(call_key(req), msgspec.json.encode(mine))
        start = time.monotonic()
        reply = await b.adapter.call(req)
        assert reply.error is None and time.monotonic() - start < 0.5 and provider.calls == 1


async def test_a_try_in_flight_at_the_requesters_deadline_is_recorded_not_bought_again(
    nats_url, subject_prefix
):
    """Found by the chaos suite beside a CPU hog (issue 19): the server cancels a request at its requester's
    deadline (conductor/liveness.py), and a try already sent, whose answer was waiting in a starved loop, was
    cancelled with it and its claim released, so the task's redelivery paid for the call again. Failed before: two
    provider calls. Now the try finishes, its reply is recorded, and the redelivery replays it."""
    provider = Counting()
    provider.gate.clear()
    req = _req(task_id="t-deadline")
    async with replicas(nats_url, subject_prefix, provider, _pool(), n=1) as (a,):
        first = asyncio.create_task(a.adapter.call(req))
        await provider.started.wait()
        first.cancel()  # what the server's watch does at the deadline
        with pytest.raises(asyncio.CancelledError):
            await first
        redelivered = asyncio.create_task(a.adapter.call(req))
        await asyncio.sleep(0.2)
        assert (
            not redelivered.done() and a.adapter.stats().takeovers == 0
        )  # it waits for the call still running
        provider.gate.set()  # the answer arrives
        again = await redelivered
        assert provider.calls == 1 and again.replayed and again.error is None and again.text == "answer #1"


async def test_stopping_releases_a_call_whose_requester_left(nats_url, subject_prefix):
    """A call left running for a requester cancelled at its deadline is cancelled when the replica stops, and its
    claim released, so another replica runs it at once instead of after its lease."""
    provider = Counting()
    provider.gate.clear()
    req = _req(task_id="t-stop")
    async with replicas(nats_url, subject_prefix, provider, _pool(), n=1) as (a,):
        first = asyncio.create_task(a.adapter.call(req))
        await provider.started.wait()
        first.cancel()
        await a.shared.aclose()
        _, kv = await _kv_of(a, Buckets.for_prefix(subject_prefix).calls)
        with pytest.raises(nats.js.errors.KeyNotFoundError):
            await kv.get(call_key(req))


async def test_without_the_ledger_nothing_is_called(nats_url, subject_prefix):
    """JetStream gone: a retryable ``unavailable`` at once, no provider call (the executor's retry is safe)."""
    provider = Counting()
    async with replicas(nats_url, subject_prefix, provider, _pool(), n=1) as (b,):
        await b.nc.close()
        reply = await b.adapter.call(_req(task_id="t-down"))
        assert reply.error is not None and reply.error.code == ErrorCode.UNAVAILABLE and reply.error.retryable
        assert provider.calls == 0


async def test_the_same_key_for_a_different_call_is_not_replayed(nats_url, subject_prefix):
    provider = Counting()
    async with replicas(nats_url, subject_prefix, provider, _pool()) as (a, b):
        await a.adapter.call(_req(task_id="t", messages=HELLO))
        other = await b.adapter.call(_req(task_id="t", messages=[ChatMessage(role="user", content="bye")]))
        assert not other.replayed and other.text == "answer #2"


async def test_a_replay_for_a_twin_pool_entry_comes_in_the_asking_workers_name(nats_url, subject_prefix):
    """Two pool entries with one provider, model and parameters make the same call (the digest leaves names out):
    a re-planned step that moved to the twin is replayed, but in the twin's name, which the executor checks."""
    provider = Counting()
    twin = {"provider": "openai", "model": "m", "max_retries": 2, "price_in_per_mtok": 1.0}
    pool = Pool(workers=[WorkerSpec(name="w", **twin), WorkerSpec(name="w-twin", **twin)])  # type: ignore[arg-type]
    async with replicas(nats_url, subject_prefix, provider, pool) as (a, b):
        first = await a.adapter.call(_req(task_id="t-twin"))
        again = await b.adapter.call(_req(task_id="t-twin", worker="w-twin"))
        assert first.worker == "w" and again.replayed and again.worker == "w-twin" and provider.calls == 1


async def test_cache_hits_are_identical_free_and_counted(nats_url, subject_prefix):
    provider = Counting()
    async with replicas(nats_url, subject_prefix, provider, _pool(price_out_per_mtok=2.0)) as (a, b):
        first = await a.adapter.call(_req(cache=True))
        await a.shared.writes.drain(5)  # the cache fill is written behind the reply
        hits = [await r.adapter.call(_req(cache=True)) for r in (a, b, b)]
        assert provider.calls == 1 and first.usage.cost_usd > 0 and not first.cached
        for hit in hits:
            assert hit.cached and hit.text == first.text and hit.model == first.model
            assert hit.usage.input_tokens == first.usage.input_tokens and hit.usage.cost_usd == 0
            assert hit.usage.calls == 0
        assert (a.adapter.stats().cache_hits, a.adapter.stats().cache_misses) == (1, 1)
        assert b.adapter.stats().cache_hits == 2

        uncached = await a.adapter.call(_req())  # opt-in: without cache=True it calls
        hotter = await a.adapter.call(_req(cache=True, temperature=0.9))  # parameters are part of the key
        assert not uncached.cached and not hotter.cached and provider.calls == 3


async def test_concurrency_limit_holds_across_replicas(nats_url, subject_prefix):
    provider = Counting(hold_s=0.05)
    async with replicas(nats_url, subject_prefix, provider, _pool(concurrency=3)) as (a, b):
        replies = await asyncio.gather(*(r.adapter.call(_req()) for r in (a, b) for _ in range(8)))
        assert all(r.error is None for r in replies)
        assert provider.peak == 3  # each process alone would allow 3: together they still do
        assert a.adapter.stats().limit_waits + b.adapter.stats().limit_waits > 0


async def test_a_waiting_replica_gets_slots_from_a_busy_one(nats_url, subject_prefix):
    """Fair hand-back: B's one call does not wait behind all of A's queue."""
    provider = Counting(hold_s=0.1)
    async with replicas(nats_url, subject_prefix, provider, _pool(concurrency=2)) as (a, b):
        # 40 calls of 0.1 s through 2 slots: 2 s of A's queue, so a loaded machine still tells hand-back from none
        queue = [asyncio.create_task(a.adapter.call(_req())) for _ in range(40)]
        await asyncio.sleep(0.05)
        await b.adapter.call(_req())
        assert not all(t.done() for t in queue)  # without hand-back, A's waiters would reuse every slot
        await asyncio.gather(*queue)
        assert provider.peak == 2


async def test_slots_of_a_crashed_replica_expire(nats_url, subject_prefix):
    provider = Counting()
    async with replicas(nats_url, subject_prefix, provider, _pool(concurrency=2), n=1) as (b,):
        nc, kv = await _kv(nats_url, Buckets.for_prefix(subject_prefix).limits)
        stale = WorkerLoad(holders={"dead": Holding(slots=2, expires_at=time.time() + 0.6)})
        await kv.put("load.w", msgspec.json.encode(stale))
        start = time.monotonic()
        reply = await b.adapter.call(_req())
        assert reply.error is None and 0.5 <= time.monotonic() - start < 3
    await nc.close()


async def test_a_429_on_one_replica_makes_the_other_wait(nats_url, subject_prefix):
    provider = Counting(
        script=[
            TransientProviderError(
                "rate limited", reason=FaultReason.RATE_LIMITED, retry_after=0.8, status=429
            )
        ]
    )
    async with replicas(nats_url, subject_prefix, provider, _pool()) as (a, b):
        first = asyncio.create_task(a.adapter.call(_req()))
        await provider.started.wait()
        limited_at = provider.started_at[0]
        await asyncio.sleep(0.1)  # the cool-down is written and mirrored by now
        reply = await b.adapter.call(_req())
        assert reply.error is None and (await first).error is None and (await first).attempts == 2
        assert min(provider.started_at[1:]) >= limited_at + 0.75  # nobody called before Retry-After passed
        assert b.adapter.stats().cooldown_waits == 1


async def test_rpm_holds_across_replicas(nats_url, subject_prefix):
    """rpm = 4 per (shortened, 1 s) window: 12 calls from two replicas spread over at least three windows."""
    provider = Counting()
    pool = _pool(rpm=4)
    async with replicas(nats_url, subject_prefix, provider, pool, window_s=1.0) as (a, b):
        replies = await asyncio.gather(*(r.adapter.call(_req()) for r in (a, b) for _ in range(6)))
        assert all(r.error is None for r in replies)
        per_window: dict[int, int] = {}
        for t in provider.started_at:
            per_window[int(t)] = per_window.get(int(t), 0) + 1
        assert max(per_window.values()) <= 4 and len(per_window) >= 3
        assert a.adapter.stats().limit_waits + b.adapter.stats().limit_waits > 0


async def _window_start(window_s: float) -> None:
    """Sleep to just after a rate-window boundary, so a short burst cannot straddle one."""
    await asyncio.sleep(window_s - time.time() % window_s + 0.02)


async def test_tpm_charges_max_tokens_and_refunds_the_rest(nats_url, subject_prefix):
    """tpm = 250, each call charged 101 up front (5 input characters / 4 + max_tokens 100) and 15 for real.

    A's five calls in a row never wait: refunds keep its reservation at 202. B's call (101 > 250 - 202) waits
    for the next window. Without refunds A itself would have waited after two calls.
    """
    provider = Counting()
    pool = _pool(tpm=250, max_tokens=100)
    async with replicas(nats_url, subject_prefix, provider, pool, window_s=1.0) as (a, b):
        await _window_start(1.0)
        for _ in range(5):
            assert (await a.adapter.call(_req())).error is None
        assert (await b.adapter.call(_req())).error is None
        assert a.adapter.stats().limit_waits == 0 and b.adapter.stats().limit_waits == 1
        assert int(provider.started_at[-1]) > int(provider.started_at[0])


async def _timed(adapter: WorkerAdapter, reqs: list[WorkRequest]) -> float:
    start = time.perf_counter()
    for req in reqs:
        reply = await adapter.call(req)
        assert reply.error is None
    return (time.perf_counter() - start) / len(reqs) * 1e6


async def _nats_rtt(url: str, prefix: str, n: int) -> float:
    nc = await nats.connect(url)

    async def echo(msg) -> None:
        await msg.respond(msg.data)

    await nc.subscribe(f"{prefix}echo", cb=echo)
    start = time.perf_counter()
    for _ in range(n):
        await nc.request(f"{prefix}echo", b"x", timeout=5)
    elapsed = (time.perf_counter() - start) / n * 1e6
    await nc.close()
    return elapsed


async def test_overhead_per_call(nats_url, subject_prefix, capsys):
    """Printed, loosely bounded: what the shared features add to a zero-latency call on a local nats-server."""
    provider = Counting()
    pool = _pool(rpm=1_000_000, tpm=1_000_000_000, concurrency=64)
    n = 200
    async with replicas(nats_url, subject_prefix, provider, pool, n=1) as (a,):
        local = WorkerAdapter(pool, {"openai": provider}, retry=FAST)
        await _timed(a.adapter, [_req() for _ in range(20)])  # warm up: the first reservations
        base = await _timed(local, [_req() for _ in range(n)])
        gate = await _timed(a.adapter, [_req() for _ in range(n)])
        ledger = await _timed(a.adapter, [_req(task_id="bench", step=i) for i in range(n)])
        replay = await _timed(a.adapter, [_req(task_id="bench", step=i) for i in range(n)])
        miss = await _timed(a.adapter, [_req(cache=True, max_tokens=i + 1) for i in range(n)])
        await a.shared.writes.drain(5)
        hit = await _timed(a.adapter, [_req(cache=True, max_tokens=i + 1) for i in range(n)])
        writes = a.adapter.stats().reserve_writes
        rtt = await _nats_rtt(nats_url, subject_prefix, n)
    with capsys.disabled():
        print(
            f"\nper call (µs): local {base:.0f}; + shared limits {gate - base:+.0f}; + ledger {ledger - base:+.0f};"
            f" ledger replay {replay:.0f}; cache miss {miss - base:+.0f}; cache hit {hit:.0f};"
            f" limit writes {writes} for {3 * n + 20} gated calls; raw NATS request/reply {rtt:.0f}"
        )
    assert gate - base < 1_000 and ledger - base < 5_000 and writes < 20


def test_every_reply_field_is_defaulted():
    assert msgspec.json.decode(b'{"worker": "w"}', type=WorkReply).replayed is False


@pytest.fixture
def plain_nats_url() -> Iterator[str]:
    """A nats-server without JetStream, started (and stopped) by this test alone."""
    port = free_port()
    proc = subprocess.Popen([find_binary(), "-a", "127.0.0.1", "-p", str(port)], stderr=subprocess.DEVNULL)
    url = f"nats://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 10
        while not reachable(url, timeout=0.2) and time.monotonic() < deadline:
            time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=5)


async def test_without_jetstream_nothing_is_shared(plain_nats_url, subject_prefix):
    """A warning, and the adapter runs on its local limits alone."""
    nc = await nats.connect(plain_nats_url)
    shared = await shared_or_local(nc, subject_prefix, _pool(), SharedSettings())
    assert shared.ledger is None and shared.cache is None and isinstance(shared.gate, Unlimited)
    await nc.close()


async def test_a_bucket_with_other_settings_is_used_as_it_is(nats_url, subject_prefix):
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    name = Buckets.for_prefix(subject_prefix).cache
    await js.create_key_value(bucket=name, history=1, ttl=60)
    kv = await open_bucket(js, name, 3600)
    await kv.put("k", b"v")
    assert (await kv.get("k")).value == b"v"
    await nc.close()


async def _eventually(predicate: Callable[[], bool], timeout_s: float) -> None:
    for _ in range(int(timeout_s / 0.05)):
        if predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"not within {timeout_s} s")


async def test_cooldowns_still_reach_every_replica_after_a_nats_restart(tmp_path):
    """A KV watch does not survive a server restart; the limits mirror watches again after the reconnect."""
    port = free_port()
    server = NatsServer(port=port, store_dir=tmp_path / "js").start()
    try:
        pool = _pool()
        conns = [
            await nats.connect(server.url, reconnect_time_wait=0.2, max_reconnect_attempts=-1) for _ in "ab"
        ]
        a, b = [
            await open_shared(nc, "r.", pool, SharedSettings(), owner=o)
            for nc, o in zip(conns, "ab", strict=True)
        ]
        server.stop()
        server = NatsServer(port=port, store_dir=tmp_path / "js").start()
        await _eventually(lambda: all(nc.stats["reconnects"] and nc.is_connected for nc in conns), 10)
        await asyncio.sleep(1.0)  # the mirror notices within MIRROR_CHECK_S and watches again
        await b.gate.cooldown(pool.workers[0], 30.0)
        assert isinstance(a.gate, SharedLimits)
        await _eventually(lambda: a.gate.cooling(pool.workers[0]) > 0, 5)
        for shared in (a, b):
            await shared.aclose()
        for nc in conns:
            await nc.close()
    finally:
        server.stop()


class _SwallowingKV:
    """The real bucket, except that a renewal's ``update`` hangs and turns its cancellation into a timeout — what
    asyncio.wait_for (Python 3.11) and nats-py's flush can do to a cancel that lands mid-request."""

    def __init__(self, kv) -> None:
        self._kv = kv
        self.updates_entered = asyncio.Event()

    def __getattr__(self, name: str):
        return getattr(self._kv, name)

    async def update(self, key: str, value: bytes, last: int | None = None) -> int:
        self.updates_entered.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            raise nats.errors.TimeoutError from None  # the cancel is lost
        return await self._kv.update(key, value, last=last)


async def test_a_finished_call_answers_even_if_its_renewal_swallows_the_cancel(nats_url, subject_prefix):
    """Found by the chaos suite: replies waited forever on a lease renewal whose cancellation a client library
    swallowed. The call's reply now comes back, and the renewal loop ends by itself."""
    async with replicas(nats_url, subject_prefix, Counting(), _pool(), n=1) as (r,):  # creates the buckets
        _, kv = await _kv_of(r, Buckets.for_prefix(subject_prefix).calls)
        swallowing = _SwallowingKV(kv)
        ledger = CallLedger(swallowing, owner="r9", stats=CallStats(), writes=WriteBehind(), lease_s=0.15)  # type: ignore[arg-type]
        await _swallowed_cancel_does_not_hang(ledger, swallowing)


async def _swallowed_cancel_does_not_hang(ledger: CallLedger, swallowing: _SwallowingKV) -> None:
    async def compute() -> WorkReply:
        await swallowing.updates_entered.wait()  # finish while the renewal is inside its update
        return WorkReply(worker="w", text="done", usage=Usage(calls=1))

    start = time.monotonic()
    reply = await asyncio.wait_for(ledger.run(_req(task_id="t-swallow"), "d" * 64, compute), timeout=10)
    assert reply.text == "done" and time.monotonic() - start < 5
    await asyncio.sleep(0.3)  # the renewal loop has ended: no task of it is left
    assert not [t for t in asyncio.all_tasks() if t.get_coro().__qualname__ == "CallLedger._renew"]

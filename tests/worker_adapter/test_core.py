"""The pure core: request checks, error classification, backoff, retries, concurrency limits and cost accounting."""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
from collections.abc import Sequence

import pytest

from conductor.pool import Pool, PoolError, WorkerSpec, parse_pool
from schemas.errors import ErrorCode
from schemas.solve import Budget
from schemas.work import ChatMessage, FaultReason, WorkRequest
from services.worker_adapter.config import WorkerAdapterSettings, api_keys
from services.worker_adapter.core import RetryPolicy, WorkerAdapter
from services.worker_adapter.provider import (
    CallParams,
    Completion,
    PermanentProviderError,
    TransientProviderError,
    classify_status,
    retry_after_seconds,
)

RATE = FaultReason.RATE_LIMITED

HELLO = [ChatMessage(role="user", content="hello")]


class Scripted:
    """A provider that plays a script of outcomes (an exception to raise or a completion) and records each call."""

    def __init__(self, script: Sequence[Exception | Completion | float], hold_s: float = 0.0) -> None:
        self.script = list(script)
        self.calls: list[CallParams] = []
        self.hold_s = hold_s
        self.in_flight = 0
        self.peak = 0

    async def complete(
        self, spec: WorkerSpec, messages: Sequence[ChatMessage], params: CallParams
    ) -> Completion:
        self.calls.append(params)
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await asyncio.sleep(self.hold_s)
            step = (
                self.script.pop(0)
                if self.script
                else Completion(text="ok", input_tokens=1, output_tokens=1, model="m")
            )
            if isinstance(step, float):  # hang this long (a provider that never answers in time)
                await asyncio.sleep(step)
                return Completion(text="late", input_tokens=1, output_tokens=1, model="m")
            if isinstance(step, Exception):
                raise step
            return step
        finally:
            self.in_flight -= 1

    async def aclose(self) -> None:
        pass


class Sleeps:
    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def _adapter(provider: Scripted, **spec: object) -> tuple[WorkerAdapter, Sleeps]:
    fields = {"name": "w", "provider": "openai", "model": "m", "max_retries": 3, **spec}
    pool = Pool(workers=[WorkerSpec(**fields)])  # type: ignore[arg-type]
    sleeps = Sleeps()
    return WorkerAdapter(pool, {"openai": provider}, sleep=sleeps, rng=random.Random(0)), sleeps


@pytest.mark.parametrize(
    ("status", "transient", "reason"),
    [
        (400, False, "client_error"),
        (401, False, "client_error"),
        (403, False, "client_error"),
        (404, False, "client_error"),
        (422, False, "client_error"),
        (408, True, "timeout"),
        (409, True, "conflict"),
        (425, True, "conflict"),
        (429, True, "rate_limited"),
        (500, True, "server_error"),
        (502, True, "server_error"),
        (503, True, "server_error"),
        (529, True, "server_error"),
    ],
)
def test_classify_status(status, transient, reason):
    err = classify_status(status, "boom", headers={"Retry-After": "3"}, body="{}")
    assert isinstance(err, TransientProviderError if transient else PermanentProviderError)
    assert err.status == status and "HTTP" in (err.detail or "")
    assert err.reason == reason and isinstance(err.reason, FaultReason)
    if transient:
        assert err.retry_after == 3.0


def test_retry_after_forms():
    now = time.time()
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert retry_after_seconds({"retry-after": "7"}) == 7.0
    assert retry_after_seconds({"Retry-After": "1.5"}) == 1.5
    assert retry_after_seconds({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert 28 <= (retry_after_seconds({"retry-after": date}, now=now) or 0) <= 31
    assert retry_after_seconds({"retry-after": email.utils.formatdate(now - 60, usegmt=True)}, now=now) == 0.0
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({}) is None


def test_backoff_grows_with_jitter_and_caps():
    policy = RetryPolicy(base_s=1.0, max_s=8.0, retry_after_cap_s=30.0)
    rng = random.Random(1)
    for attempt, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (9, 8.0)]:
        delays = [policy.delay(attempt, None, rng) for _ in range(200)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
        assert max(delays) - min(delays) > ceiling / 4  # jittered, not lockstep
    assert policy.delay(1, 12.0, rng) == 12.0  # the server's hint wins over our backoff
    assert policy.delay(1, 3600.0, rng) == 30.0  # ... up to the cap


async def test_transient_errors_are_retried_honouring_retry_after():
    provider = Scripted(
        [
            TransientProviderError("rate", reason=RATE, retry_after=2.5, status=429),
            TransientProviderError("5xx", reason=FaultReason.SERVER_ERROR),
        ]
    )
    adapter, sleeps = _adapter(provider)
    reply = await adapter.call(WorkRequest(worker="w", messages=HELLO))
    assert reply.error is None and reply.text == "ok" and reply.attempts == 3
    assert sleeps.waits[0] == 2.5 and 0.5 <= sleeps.waits[1] <= 1.0  # Retry-After, then backoff try 2
    assert [c.attempt for c in provider.calls] == [1, 2, 3]


async def test_permanent_error_is_not_retried():
    provider = Scripted(
        [
            PermanentProviderError(
                "bad request", reason=FaultReason.CLIENT_ERROR, status=400, detail="HTTP 400: nope"
            )
        ]
    )
    adapter, sleeps = _adapter(provider)
    reply = await adapter.call(WorkRequest(worker="w", messages=HELLO))
    assert reply.attempts == 1 and not sleeps.waits and len(provider.calls) == 1
    assert reply.error is not None and reply.error.code == ErrorCode.WORKER_ERROR
    assert not reply.error.retryable and reply.error.detail == "HTTP 400: nope"
    assert reply.usage.calls == 0


async def test_retries_are_bounded_by_max_retries():
    provider = Scripted([TransientProviderError("down", reason=FaultReason.CONNECTION)] * 10)
    adapter, sleeps = _adapter(provider, max_retries=2)
    reply = await adapter.call(WorkRequest(worker="w", messages=HELLO))
    assert reply.attempts == 3 and len(sleeps.waits) == 2
    assert reply.error is not None and reply.error.retryable and "transient" in reply.error.message


async def test_our_deadline_makes_a_hung_provider_transient():
    provider = Scripted([5.0])
    adapter, _ = _adapter(provider)
    reply = await adapter.call(WorkRequest(worker="w", messages=HELLO, timeout_s=0.05))
    assert reply.error is None and reply.attempts == 2 and reply.text == "ok"
    assert reply.faults == {"timeout": 1}


async def test_faults_count_failed_tries_by_reason():
    """One call meets a 429, a 5xx, our own deadline and a 409, then succeeds: one fault of each reason."""
    provider = Scripted(
        [
            TransientProviderError("rate", reason=RATE, retry_after=0.1, status=429),
            TransientProviderError("5xx", reason=FaultReason.SERVER_ERROR, status=502),
            5.0,  # hangs past the request's deadline
            TransientProviderError("conflict", reason=FaultReason.CONFLICT, status=409),
        ]
    )
    adapter, _ = _adapter(provider, max_retries=5)
    reply = await adapter.call(WorkRequest(worker="w", messages=HELLO, timeout_s=0.05))
    assert reply.error is None and reply.attempts == 5
    assert reply.faults == {"rate_limited": 1, "server_error": 1, "timeout": 1, "conflict": 1}
    assert sum(reply.faults.values()) == reply.attempts - 1
    clean = await adapter.call(WorkRequest(worker="w", messages=HELLO))
    assert clean.faults == {} and clean.attempts == 1


async def test_faults_include_the_try_that_gave_up():
    exhausted, _ = _adapter(
        Scripted([TransientProviderError("5xx", reason=FaultReason.SERVER_ERROR)] * 9), max_retries=2
    )
    reply = await exhausted.call(WorkRequest(worker="w", messages=HELLO))
    assert reply.error is not None and reply.error.retryable
    assert reply.attempts == 3 and reply.faults == {"server_error": 3}
    permanent = Scripted(
        [
            TransientProviderError("rate", reason=RATE, status=429),
            PermanentProviderError("bad", reason=FaultReason.CLIENT_ERROR, status=400),
        ]
    )
    refused, _ = _adapter(permanent)
    reply = await refused.call(WorkRequest(worker="w", messages=HELLO))
    assert reply.error is not None and not reply.error.retryable
    assert reply.attempts == 2 and reply.faults == {"rate_limited": 1, "client_error": 1}


async def test_bad_requests_name_the_field():
    adapter, _ = _adapter(Scripted([]))
    cases = [
        (WorkRequest(worker="ghost", messages=HELLO), "worker"),
        (WorkRequest(worker="w", messages=[]), "messages"),
        (WorkRequest(worker="w", messages=HELLO, max_tokens=0), "max_tokens"),
        (WorkRequest(worker="w", messages=HELLO, temperature=-1.0), "temperature"),
        (WorkRequest(worker="w", messages=HELLO, timeout_s=0.0), "timeout_s"),
    ]
    for req, field in cases:
        reply = await adapter.call(req)
        assert (
            reply.error is not None
            and reply.error.code == ErrorCode.BAD_REQUEST
            and reply.error.field == field
        )
        assert reply.attempts == 0 and reply.faults == {}  # no try was made


async def test_request_overrides_pool_parameters():
    provider = Scripted([])
    adapter, _ = _adapter(provider, max_tokens=100, temperature=0.2, timeout_s=9.0)
    await adapter.call(WorkRequest(worker="w", messages=HELLO))
    await adapter.call(
        WorkRequest(worker="w", messages=HELLO, max_tokens=7, temperature=0.9, timeout_s=3.0, step=2)
    )
    first, second = provider.calls
    assert (first.max_tokens, first.temperature, first.timeout_s) == (100, 0.2, 9.0)
    assert (second.max_tokens, second.temperature, second.timeout_s, second.sample) == (7, 0.9, 3.0, 2)


async def test_concurrency_limit_per_worker():
    provider = Scripted([], hold_s=0.02)
    adapter, _ = _adapter(provider, concurrency=3)
    replies = await asyncio.gather(
        *(adapter.call(WorkRequest(worker="w", messages=HELLO)) for _ in range(12))
    )
    assert all(r.error is None for r in replies)
    assert provider.peak == 3


async def test_cost_and_usage_accounting():
    done = Completion(text="x", input_tokens=1_000, output_tokens=500, model="m-2025")
    adapter, _ = _adapter(Scripted([done]), price_in_per_mtok=3.0, price_out_per_mtok=15.0)
    reply = await adapter.call(WorkRequest(worker="w", messages=HELLO))
    assert reply.usage.input_tokens == 1_000 and reply.usage.output_tokens == 500 and reply.usage.calls == 1
    assert reply.usage.cost_usd == pytest.approx(1_000 * 3.0 / 1e6 + 500 * 15.0 / 1e6)
    assert reply.model == "m-2025" and reply.latency_s >= 0


async def test_missing_provider_kind_is_a_typed_error():
    pool = Pool(workers=[WorkerSpec(name="w", provider="local", model="x")])
    reply = await WorkerAdapter(pool, {}).call(WorkRequest(worker="w", messages=HELLO))
    assert reply.error is not None and not reply.error.retryable and "local" in reply.error.message
    assert reply.faults == {"config": 1}


def test_settings_and_keys_from_env():
    env = {
        "CONDUCTOR_RETRY_BACKOFF_BASE_S": "0.1",
        "CONDUCTOR_RETRY_AFTER_CAP_S": "5",
        "MY_KEY": "secret",
        "OTHER": "x",
    }
    settings = WorkerAdapterSettings.from_env(env)
    assert settings.backoff_base_s == 0.1 and settings.retry_after_cap_s == 5.0
    pool = Pool(
        workers=[
            WorkerSpec(name="a", provider="openai", model="m", api_key_env="MY_KEY"),
            WorkerSpec(name="b", provider="anthropic", model="m"),  # default ANTHROPIC_API_KEY, unset here
            WorkerSpec(name="c", provider="openai_compatible", model="m", base_url="http://h"),
        ]
    )
    keys = api_keys(pool, env)
    assert keys == {"MY_KEY": "secret"} and "secret" not in repr(settings)


def test_pool_rejects_thinking_budget_below_the_api_floor():
    text = '[[workers]]\nname = "c"\nprovider = "anthropic"\nmodel = "m"\nthinking_budget = 128\n'
    with pytest.raises(PoolError, match="thinking_budget"):
        parse_pool(text)


def test_pool_budget_table_is_parsed_and_checked():
    base = '[[workers]]\nname = "a"\nprovider = "sim"\n[workers.sim]\ndataset = "x.jsonl"\n'
    assert parse_pool("[budget]\nmax_cost_usd = 0.5\nmax_wall_s = 300\n" + base).budget == Budget(
        max_cost_usd=0.5, max_wall_s=300
    )
    assert parse_pool(base).budget is None
    with pytest.raises(PoolError, match=r"unknown field.*max_dollars"):
        parse_pool("[budget]\nmax_dollars = 1\n" + base)
    with pytest.raises(PoolError, match=r"budget\.max_calls: Expected `int` >= 1"):
        parse_pool("[budget]\nmax_calls = 0\n" + base)

"""One ``WorkRequest`` in, one ``WorkReply`` out: validation, per-worker concurrency, retries and accounting.

``WorkerAdapter.call`` never raises for provider problems. Providers classify their failures into the two typed
errors of ``provider.py``; here a ``TransientProviderError`` (and our own per-try deadline) is retried with
exponential backoff and jitter, honouring the provider's Retry-After up to a cap, and a ``PermanentProviderError``
is returned at once. Either way the reply carries a typed ``worker_error`` and how many tries were made.

Accounting: ``usage.calls`` counts billed completions (1 on success, 0 on failure); ``attempts`` counts tries;
``latency_s`` is wall time from receipt to reply, including queueing for a concurrency slot and backoff sleeps.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence

import msgspec
import structlog

from conductor.pool import Pool, WorkerSpec
from schemas.errors import ErrorCode, ErrorInfo
from schemas.usage import Usage
from schemas.work import ChatMessage, WorkReply, WorkRequest
from services.worker_adapter.provider import (
    CallParams,
    Completion,
    PermanentProviderError,
    Provider,
    ProviderError,
    TransientProviderError,
)

log = structlog.get_logger("conductor.worker_adapter")


class RetryPolicy(msgspec.Struct, frozen=True, kw_only=True):
    base_s: float = 0.5
    max_s: float = 20.0
    retry_after_cap_s: float = 60.0

    def delay(self, attempt: int, retry_after: float | None, rng: random.Random) -> float:
        """Seconds to wait after failed try number ``attempt`` (1-based).

        A server's Retry-After wins (it knows its own rate window) but is capped; otherwise exponential backoff with
        "equal jitter" — half fixed, half random — so replicas that failed together do not retry in lockstep.
        """
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.retry_after_cap_s)
        ceiling = min(self.max_s, self.base_s * 2 ** (attempt - 1))
        return ceiling / 2 + rng.random() * ceiling / 2


def _bad_request(message: str, field: str) -> ErrorInfo:
    return ErrorInfo(code=ErrorCode.BAD_REQUEST, message=message, field=field)


def check_request(req: WorkRequest, pool: Mapping[str, WorkerSpec]) -> ErrorInfo | None:
    """Deterministic input problems, each naming the field; never retried."""
    if req.worker not in pool:
        return _bad_request(f"unknown worker {req.worker!r}; the pool has {sorted(pool)}", "worker")
    if not req.messages:
        return _bad_request("messages must not be empty", "messages")
    if req.max_tokens is not None and req.max_tokens < 1:
        return _bad_request("max_tokens must be >= 1", "max_tokens")
    if req.temperature is not None and req.temperature < 0:
        return _bad_request("temperature must be >= 0", "temperature")
    if req.timeout_s is not None and req.timeout_s <= 0:
        return _bad_request("timeout_s must be > 0", "timeout_s")
    return None


def call_params(spec: WorkerSpec, req: WorkRequest) -> CallParams:
    """The pool's parameters with the request's overrides; ``None`` in the request keeps the pool's value."""
    return CallParams(
        max_tokens=spec.max_tokens if req.max_tokens is None else req.max_tokens,
        temperature=spec.temperature if req.temperature is None else req.temperature,
        timeout_s=spec.timeout_s if req.timeout_s is None else req.timeout_s,
        sample=req.round * 1000 + req.step,
    )


def worker_error(spec: WorkerSpec, exc: ProviderError, attempts: int) -> ErrorInfo:
    transient = isinstance(exc, TransientProviderError)
    kind = "transient" if transient else "permanent"
    return ErrorInfo(
        code=ErrorCode.WORKER_ERROR,
        message=f"worker {spec.name!r} ({spec.provider}): {kind} failure after {attempts} attempt(s): {exc.message}",
        field="worker",
        retryable=transient,  # a later identical request may succeed; a permanent one will not
        detail=exc.detail,
    )


class WorkerAdapter:
    """Calls pool workers through their providers. One instance per process; it owns the concurrency limits."""

    def __init__(
        self,
        pool: Pool,
        providers: Mapping[str, Provider],
        *,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.pool = pool
        self._specs = {w.name: w for w in pool.workers}
        self._limits = {w.name: asyncio.Semaphore(w.concurrency) for w in pool.workers}
        self._providers = providers
        self._retry = retry or RetryPolicy()
        self._sleep = sleep
        self._rng = rng or random.Random()

    async def call(self, req: WorkRequest) -> WorkReply:
        start = time.monotonic()
        problem = check_request(req, self._specs)
        if problem is not None:
            return WorkReply(worker=req.worker, error=problem, attempts=0)
        spec = self._specs[req.worker]
        outcome, attempts = await self._attempts(spec, req.messages, call_params(spec, req))
        latency = time.monotonic() - start
        if isinstance(outcome, ProviderError):
            return WorkReply(
                worker=spec.name,
                latency_s=latency,
                attempts=attempts,
                error=worker_error(spec, outcome, attempts),
            )
        usage = Usage(
            input_tokens=outcome.input_tokens,
            output_tokens=outcome.output_tokens,
            cost_usd=spec.cost(outcome.input_tokens, outcome.output_tokens),
            calls=1,
        )
        return WorkReply(
            worker=spec.name,
            text=outcome.text,
            model=outcome.model,
            usage=usage,
            latency_s=latency,
            attempts=attempts,
        )

    async def _attempts(
        self, spec: WorkerSpec, messages: Sequence[ChatMessage], params: CallParams
    ) -> tuple[Completion | ProviderError, int]:
        """Up to ``1 + spec.max_retries`` tries; returns the completion or the last typed error, and the tries."""
        attempt = 0
        while True:
            attempt += 1
            try:
                return await self._once(
                    spec, messages, msgspec.structs.replace(params, attempt=attempt)
                ), attempt
            except PermanentProviderError as exc:
                log.warning(
                    "worker call failed", worker=spec.name, attempt=attempt, error=exc.message, retry=False
                )
                return exc, attempt
            except TransientProviderError as exc:
                if attempt > spec.max_retries:
                    log.warning("worker call gave up", worker=spec.name, attempt=attempt, error=exc.message)
                    return exc, attempt
                wait = self._retry.delay(attempt, exc.retry_after, self._rng)
                log.info(
                    "worker call retrying",
                    worker=spec.name,
                    attempt=attempt,
                    wait_s=round(wait, 3),
                    error=exc.message,
                    status=exc.status,
                )
                await self._sleep(wait)

    async def _once(
        self, spec: WorkerSpec, messages: Sequence[ChatMessage], params: CallParams
    ) -> Completion:
        """One try inside the worker's concurrency slot, under our own deadline (a hung provider is transient)."""
        provider = self._providers.get(spec.provider)
        if provider is None:
            raise PermanentProviderError(f"no {spec.provider!r} provider is configured in this process")
        async with self._limits[spec.name]:
            try:
                async with asyncio.timeout(params.timeout_s):
                    return await provider.complete(spec, messages, params)
            except TimeoutError as exc:
                raise TransientProviderError(
                    f"no answer within {params.timeout_s:g} s", detail="timeout (worker-adapter deadline)"
                ) from exc

"""One ``WorkRequest`` in, one ``WorkReply`` out: validation, per-worker concurrency, retries and accounting.

``WorkerAdapter.call`` never raises for provider problems. Providers classify their failures into the two typed
errors of ``provider.py``; here a ``TransientProviderError`` (and our own per-try deadline) is retried with
exponential backoff and jitter, honouring the provider's Retry-After up to a cap, and a ``PermanentProviderError``
is returned at once. Either way the reply carries a typed ``worker_error`` and how many tries were made; every reply
from the provider path also counts its failed tries by ``FaultReason`` in ``faults`` (the last one included when the
call gave up).

Accounting: ``usage.calls`` counts billed completions (1 on success, 0 on failure); ``attempts`` counts tries;
``latency_s`` is wall time from receipt to reply, including queueing for a concurrency slot and backoff sleeps.

Layers, outermost first, each optional (``shared.py`` wires them when replicas share NATS KV):
the ledger (ledger.py: one call per (task, round, step), replayed to duplicates), the cache (cache.py: opt-in per
request, content-addressed), then per try the local semaphore and the deployment-wide gate (limits.py: concurrency,
rpm, tpm, 429 cool-downs). ``stats()`` counts what each layer saved or cost.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence

import msgspec
import structlog

from conductor.aio import answer_timeout
from conductor.liveness import current_deadline, expired, remaining_s
from conductor.pool import Pool, WorkerSpec
from schemas.errors import ErrorCode, ErrorInfo
from schemas.usage import Usage
from schemas.work import ChatMessage, FaultReason, WorkReply, WorkRequest
from services.worker_adapter.cache import call_digest, hit_reply
from services.worker_adapter.limits import token_estimate
from services.worker_adapter.provider import (
    CallParams,
    Completion,
    PermanentProviderError,
    Provider,
    ProviderError,
    TransientProviderError,
)
from services.worker_adapter.shared import Shared, local_only
from services.worker_adapter.stats import CallStats

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
        task=req.task_id,
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
    """Calls pool workers through their providers. One instance per process; it owns the local concurrency limits."""

    def __init__(
        self,
        pool: Pool,
        providers: Mapping[str, Provider],
        *,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
        shared: Shared | None = None,
    ) -> None:
        self.pool = pool
        self._specs = {w.name: w for w in pool.workers}
        self._limits = {w.name: asyncio.Semaphore(w.concurrency) for w in pool.workers}
        self._providers = providers
        self._retry = retry or RetryPolicy()
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._shared = shared or local_only()
        self._stats = self._shared.stats

    def stats(self) -> CallStats:
        """A snapshot of the counters (cache hits and misses, replays, limit waits, provider calls)."""
        return msgspec.structs.replace(self._stats)

    async def call(self, req: WorkRequest) -> WorkReply:
        start = time.monotonic()
        problem = check_request(req, self._specs)
        if problem is not None:
            return WorkReply(worker=req.worker, error=problem, attempts=0)
        spec = self._specs[req.worker]
        reply = await self._call(spec, req, call_params(spec, req))
        return msgspec.structs.replace(reply, latency_s=time.monotonic() - start)

    async def _call(self, spec: WorkerSpec, req: WorkRequest, params: CallParams) -> WorkReply:
        """Through the ledger when the call has an identity (a task id) and replicas share one."""
        ledger = self._shared.ledger
        if ledger is None or not req.task_id or not req.idempotent:
            return await self._fresh(spec, req, params, None)
        digest = call_digest(spec, params, req.messages)
        return await ledger.run(req, digest, lambda: self._fresh(spec, req, params, digest))

    async def _fresh(
        self, spec: WorkerSpec, req: WorkRequest, params: CallParams, digest: str | None
    ) -> WorkReply:
        """From the cache when the request opts in and it holds the call; else from the provider, then cached."""
        cache = self._shared.cache if req.cache else None
        if cache is None:
            return await self._provider_reply(spec, req.messages, params)
        digest = digest or call_digest(spec, params, req.messages)
        hit = await cache.get(digest)
        if hit is not None:
            return hit_reply(spec, hit)
        reply = await self._provider_reply(spec, req.messages, params)
        if reply.error is None:
            cache.store(digest, reply)
        return reply

    async def _provider_reply(
        self, spec: WorkerSpec, messages: Sequence[ChatMessage], params: CallParams
    ) -> WorkReply:
        outcome, attempts, faults = await self._attempts(spec, messages, params)
        if isinstance(outcome, ProviderError):
            error = worker_error(spec, outcome, attempts)
            return WorkReply(worker=spec.name, attempts=attempts, error=error, faults=faults)
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
            attempts=attempts,
            faults=faults,
        )

    async def _attempts(
        self, spec: WorkerSpec, messages: Sequence[ChatMessage], params: CallParams
    ) -> tuple[Completion | ProviderError, int, dict[str, int]]:
        """Up to ``1 + spec.max_retries`` tries; returns the completion or the last typed error, the tries, and the
        failed tries by reason."""
        attempt = 0
        faults: dict[str, int] = {}  # a plain dict: built on every call, and most calls fail no try
        while True:
            attempt += 1
            try:
                done = await self._once(spec, messages, msgspec.structs.replace(params, attempt=attempt))
                return done, attempt, faults
            except PermanentProviderError as exc:
                faults[str(exc.reason)] = faults.get(str(exc.reason), 0) + 1
                log.warning(
                    "worker call failed", worker=spec.name, attempt=attempt, error=exc.message, retry=False
                )
                return exc, attempt, faults
            except TransientProviderError as exc:
                faults[str(exc.reason)] = faults.get(str(exc.reason), 0) + 1
                if exc.status == 429 and exc.retry_after is not None:  # everyone waits, not just this call
                    await self._shared.gate.cooldown(
                        spec, min(exc.retry_after, self._retry.retry_after_cap_s)
                    )
                if attempt > spec.max_retries:
                    log.warning("worker call gave up", worker=spec.name, attempt=attempt, error=exc.message)
                    return exc, attempt, faults
                wait = self._retry.delay(attempt, exc.retry_after, self._rng)
                left = remaining_s(current_deadline())
                if left is not None and left <= wait:
                    # The requester stops waiting before the next try could start: a try now is paid for nobody.
                    log.warning(
                        "worker call gave up: the requester's deadline comes first",
                        worker=spec.name,
                        attempt=attempt,
                        error=exc.message,
                    )
                    return exc, attempt, faults
                log.info(
                    "worker call retrying",
                    worker=spec.name,
                    attempt=attempt,
                    wait_s=round(wait, 3),
                    error=exc.message,
                    status=exc.status,
                    reason=exc.reason,
                )
                await self._sleep(wait)

    async def _once(
        self, spec: WorkerSpec, messages: Sequence[ChatMessage], params: CallParams
    ) -> Completion:
        """One try inside the worker's local and deployment-wide slots, under our own deadline (a hung provider is
        transient). The local semaphore goes first: it is free, and it keeps a busy process from queueing on KV."""
        provider = self._providers.get(spec.provider)
        if provider is None:
            raise PermanentProviderError(
                f"no {spec.provider!r} provider is configured in this process", reason=FaultReason.CONFIG
            )
        tokens = token_estimate(messages, params.max_tokens) if spec.tpm is not None else 0
        async with self._limits[spec.name], self._shared.gate.permit(spec, tokens) as permit:
            if expired(current_deadline()):
                # The last gate before money is spent: the requester left while this call waited for a slot or a
                # permit (the server's watch cancels such waits too, but only at its next tick, and a cancel can be
                # lost inside a NATS request). Found by the chaos suite's overload run: 53 calls started late.
                raise PermanentProviderError(
                    "the requester's deadline passed before the call could start; it was not made",
                    reason=FaultReason.TIMEOUT,
                )
            self._stats.provider_calls += 1
            try:
                # Our loop's lateness does not count against the provider (conductor/aio.py): on a CPU-starved
                # machine an answer that came in time waited to be read, and a retry would pay for it twice. The
                # providers' SDK clients time out only after the longest wait (``longest_wait``), as a backstop.
                async with answer_timeout(params.timeout_s):
                    done = await provider.complete(spec, messages, params)
            except TimeoutError as exc:
                raise TransientProviderError(
                    f"no answer within {params.timeout_s:g} s",
                    reason=FaultReason.TIMEOUT,
                    detail="timeout (worker-adapter deadline)",
                ) from exc
            permit.spend(done.input_tokens + done.output_tokens)
            return done

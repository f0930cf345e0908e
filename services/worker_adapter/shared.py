"""What the worker-adapter replicas share through NATS KV, opened once at start-up: ledger, cache and limits.

``open_shared`` creates (or binds to) the three buckets of store.py and starts the limits mirror; ``local_only``
is the same bundle with nothing shared (no JetStream, the in-memory test broker, or switched off): no ledger, no
cache, and only the core's per-process concurrency semaphore.
"""

from __future__ import annotations

import os
import socket
import uuid

import nats.errors
import nats.js.errors as js_errors
import structlog
from nats.aio.client import Client

from conductor.pool import Pool
from services.worker_adapter.cache import CallCache
from services.worker_adapter.config import SharedSettings
from services.worker_adapter.ledger import CallLedger
from services.worker_adapter.limits import Gate, SharedLimits, Unlimited
from services.worker_adapter.stats import CallStats
from services.worker_adapter.store import Buckets, open_bucket
from services.worker_adapter.writebehind import WriteBehind

log = structlog.get_logger("conductor.worker_adapter")


class Shared:
    def __init__(
        self,
        *,
        stats: CallStats,
        writes: WriteBehind,
        gate: Gate,
        ledger: CallLedger | None = None,
        cache: CallCache | None = None,
    ) -> None:
        self.stats = stats
        self.writes = writes
        self.gate = gate
        self.ledger = ledger
        self.cache = cache

    async def aclose(self, drain_s: float = 2.0) -> None:
        """End calls left running, return slots and finish pending writes; bounded, because on shutdown the
        connection may be gone."""
        if self.ledger is not None:
            await self.ledger.aclose()
        await self.gate.aclose()
        await self.writes.drain(drain_s)


def local_only() -> Shared:
    return Shared(stats=CallStats(), writes=WriteBehind(), gate=Unlimited())


def replica_id() -> str:
    """Unique per process start, readable in the KV records: host, pid and a random tail (pids get reused)."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


async def open_shared(
    nc: Client,
    prefix: str,
    pool: Pool,
    settings: SharedSettings,
    *,
    owner: str | None = None,
    window_s: float = 60.0,
) -> Shared:
    """Buckets for this subject prefix, the ledger, the cache and the running limits mirror."""
    names = Buckets.for_prefix(prefix)
    js = nc.jetstream()
    owner = owner or replica_id()
    stats, writes = CallStats(), WriteBehind()
    calls = await open_bucket(js, names.calls, settings.calls_ttl_s)
    cache = await open_bucket(js, names.cache, settings.cache_ttl_s)
    limits_kv = await open_bucket(js, names.limits, None)
    limits = SharedLimits(
        limits_kv,
        pool,
        owner=owner,
        stats=stats,
        writes=writes,
        lease_s=settings.lease_s,
        reserve_fraction=settings.reserve_fraction,
        window_s=window_s,
        reconnects=lambda: int(nc.stats["reconnects"]),
    )
    await limits.start()
    return Shared(
        stats=stats,
        writes=writes,
        gate=limits,
        ledger=CallLedger(calls, owner=owner, stats=stats, writes=writes, lease_s=settings.lease_s),
        cache=CallCache(cache, stats, writes),
    )


async def shared_or_local(nc: Client | None, prefix: str, pool: Pool, settings: SharedSettings) -> Shared:
    """The shared bundle when enabled and JetStream answers; else ``local_only`` with a warning saying so."""
    if nc is None or not settings.enabled:
        return local_only()
    try:
        return await open_shared(nc, prefix, pool, settings)
    except (
        nats.errors.NoRespondersError,
        nats.errors.TimeoutError,
        js_errors.ServiceUnavailableError,
    ) as exc:
        log.warning("JetStream unavailable: calls, cache and limits are not shared", error=repr(exc))
        return local_only()

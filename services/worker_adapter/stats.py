"""Plain counters of what the worker-adapter did instead of (or before) calling a provider; exported as metrics."""

from __future__ import annotations

import msgspec


class CallStats(msgspec.Struct, kw_only=True):
    """Monotonic counters, one instance per adapter, mutated in place (single event loop, no locking needed).

    ``WorkerAdapter.stats()`` hands out copies, so a reader never sees a half-updated snapshot.
    """

    provider_calls: int = 0  # tries sent to a provider (retries included)
    cache_hits: int = 0
    cache_misses: int = 0  # lookups only: requests without ``cache=True`` count neither
    replays: int = 0  # finished (task, round, step) calls answered from the ledger, no provider call
    joined: int = 0  # of those, duplicates that waited for a call in flight (here or on another replica)
    takeovers: int = 0  # claims taken over from a replica whose lease ran out
    limit_waits: int = 0  # calls that waited for a deployment-wide limit (concurrency, rpm, tpm)
    cooldown_waits: int = 0  # calls that waited out a shared 429 cool-down
    reserve_writes: int = 0  # KV writes made to reserve or return capacity (the cost of shared limits)

"""KV writes that need not delay a reply (cache fills, finished-call records, returned capacity), kept track of.

A reply is sent as soon as the provider answered; the write that records it follows on the same connection. If the
process dies in between, the cost is bounded and stated where each write is spawned (one cache miss, one re-run of
a call whose reply was already delivered, capacity held until its lease expires). Failures are logged, never lost
silently, and ``drain`` lets a stopping service finish them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

import structlog

log = structlog.get_logger("conductor.worker_adapter")


class WriteBehind:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[object]] = set()

    def spawn(self, write: Awaitable[object], *, what: str) -> None:
        task = asyncio.ensure_future(write)
        self._tasks.add(task)
        task.add_done_callback(lambda t: self._done(t, what))

    def _done(self, task: asyncio.Task[object], what: str) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("background write failed", what=what, error=repr(task.exception()))

    async def drain(self, timeout_s: float) -> None:
        """Wait for pending writes (a stopping service), then cancel what is left."""
        if not self._tasks:
            return
        _, pending = await asyncio.wait(set(self._tasks), timeout=timeout_s)
        for task in pending:
            task.cancel()

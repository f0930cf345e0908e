"""Round-robin sharing of scarce things (sandboxes, math processes, admission) across requesters.

A first-come queue lets one client's batch of 40 infinite loops delay another client's single item by a minute:
every loop was queued first. Here each requester has its own line, and a freed item goes to the next requester
in turn, so a single item waits for at most one turn of each other requester, whatever their batch sizes.

The requester is a context variable: ``Verifier.verify_batch`` / ``stream`` set it once per call (each batch is
its own requester unless the caller names one), and the tasks they start inherit it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections import deque
from collections.abc import AsyncIterator, Hashable, Iterable
from typing import Generic, TypeVar

T = TypeVar("T")
REQUESTER: contextvars.ContextVar[Hashable] = contextvars.ContextVar(
    "verifier_requester", default="anonymous"
)


class FairQueue(Generic[T]):
    """Free items, and the requesters waiting for one; ``put`` hands an item to the next requester in turn."""

    def __init__(self, items: Iterable[T] = ()) -> None:
        self.free: deque[T] = deque(items)
        self.waiting: dict[Hashable, deque[asyncio.Future[T]]] = {}
        self.turns: deque[Hashable] = deque()  # requesters with someone waiting, in serving order

    async def get(self, key: Hashable | None = None) -> T:
        key = REQUESTER.get() if key is None else key
        if self.free and not self.turns:
            return self.free.popleft()
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        if key not in self.waiting:
            self.waiting[key] = deque()
            self.turns.append(key)
        self.waiting[key].append(future)
        try:
            return await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.put(future.result())  # handed over just as we were cancelled: pass it on
            else:
                self._forget(key, future)
            raise

    def _forget(self, key: Hashable, future: asyncio.Future[T]) -> None:
        line = self.waiting.get(key)
        if line is None:
            return
        with contextlib.suppress(ValueError):
            line.remove(future)
        if not line:
            del self.waiting[key]
            with contextlib.suppress(ValueError):
                self.turns.remove(key)

    def put(self, item: T) -> None:
        while self.turns:
            key = self.turns.popleft()
            line = self.waiting[key]
            future = line.popleft()
            if line:
                self.turns.append(key)  # the rest of this requester's line waits for its next turn
            else:
                del self.waiting[key]
            if not future.done():
                future.set_result(item)
                return
        self.free.append(item)


class FairLimit:
    """At most ``capacity`` holders at once, admitted round-robin across requesters (a fair semaphore)."""

    def __init__(self, capacity: int) -> None:
        self.permits: FairQueue[int] = FairQueue(range(max(1, capacity)))

    @contextlib.asynccontextmanager
    async def hold(self) -> AsyncIterator[None]:
        permit = await self.permits.get()
        try:
            yield
        finally:
            self.permits.put(permit)

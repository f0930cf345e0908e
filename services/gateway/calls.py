"""A task's call from the gateway, from admission to settlement: counted against its key's limits and holding its
spend (services/gateway/quota.py), run on the bus, and settled exactly once whatever becomes of the HTTP request
(issue 19, item 3) — charged with what it cost when its result comes, the hold released when it fails.

A client that hangs up (streamed or not, request/reply or durable) cancels its task: the gateway sends the
executor a cancel (schemas/solve.py ``CANCEL``; it owns its tasks), no further worker call starts, and the result —
what ran, with its usage — still comes back to the call, which settles the key's hold with it. Hanging up thus
spends nothing free and nothing more.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import msgspec
import nats.errors
import structlog

from conductor import metrics
from schemas.solve import Budget, SolveRequest, SolveResult
from services.gateway.bus import Bus
from services.gateway.config import GatewaySettings
from services.gateway.errors import GatewayError
from services.gateway.keys import ApiKey
from services.gateway.quota import Hold, Quotas

log = structlog.get_logger("conductor.gateway")
CANCEL_REPEAT_S = 2.0
"""How often a cancel is sent again while the task's result has not come: a cancel is core NATS (best effort), and
one sent before the task reached an executor that has not heard it (one started since) would be lost."""
HUNG_UP = "the HTTP client hung up"
PENDING = "task_pending"  # the code of ``bus.pending``: a durable task still running when the wait ended
LATE_SETTLE_S = 3600.0
"""How long the gateway waits for the result of a durable task that outlived its request, to charge the key for it;
one that ends later (or while no gateway waits: a restart) is not charged."""
T = TypeVar("T")


class Call:
    """One running task. Whoever waits for it waits through ``result``; a waiter that goes away never cancels the
    asyncio task that waits for the result (it must settle), it cancels the solve on the executor (``hang_up``)."""

    def __init__(self, key: ApiKey, task_id: str, task: asyncio.Task[SolveResult], calls: Calls) -> None:
        self.key = key
        self.task_id = task_id
        self.task = task
        self._calls = calls
        self._hung_up = False

    async def result(self) -> SolveResult:
        """The task's result. A waiter cancelled here (a client that hung up) cancels the task, whose result, with
        what ran until then, still settles the call."""
        try:
            return await asyncio.shield(self.task)
        except asyncio.CancelledError:
            self.hang_up()
            raise

    def hang_up(self) -> None:
        """The client went away before its answer was sent: counted, and the task cancelled, once."""
        if self._hung_up or self.task.done():
            return
        self._hung_up = True
        metrics.GATEWAY_DISCONNECTS.labels(self.key.name).inc()
        self._calls.background(self._cancel())

    async def _cancel(self) -> None:
        """Ask the executor to stop the task, again every ``CANCEL_REPEAT_S`` until its result is in."""
        while not self.task.done():
            try:
                await self._calls.bus.cancel(self.task_id, HUNG_UP)
            except nats.errors.Error as exc:  # a lost connection: the next try, or the result, settles it
                log.warning("cancel not sent", task_id=self.task_id, error=repr(exc))
            await asyncio.wait({self.task}, timeout=CANCEL_REPEAT_S)


class Calls:
    def __init__(self, settings: GatewaySettings, quotas: Quotas | None, bus: Bus) -> None:
        self.settings = settings
        self.quotas = quotas
        self.bus = bus
        self._running: set[asyncio.Task[Any]] = set()  # calls in flight and their cancels, until they end
        self._late: set[asyncio.Task[None]] = set()  # durable tasks that outlived their requests, to settle

    def task_id(self, key: ApiKey) -> str:
        """A new task of ``key``: ``<key name>.<random>`` (``owns`` reads the name back)."""
        return f"{key.name}.{uuid.uuid4().hex}"

    async def admit(self, key: ApiKey, solve: SolveRequest) -> tuple[SolveRequest, Hold | None]:
        """Count the request against the key's limits and reserve its spend (services/gateway/quota.py); the
        request with that reservation as its budget, and the hold to settle."""
        solve = msgspec.structs.replace(
            solve, key=key.name
        )  # echoed in its result: read back for this key only
        hold = None
        if key.spend_usd_per_day is not None or key.max_in_flight is not None:
            usd = key.reserve_usd or self.settings.reserve_usd
            hold = Hold(
                id=uuid.uuid4().hex, usd=usd, expires=time.time() + self.settings.solve_timeout_s + 60
            )
        if self.quotas is not None:
            await self.quotas.admit(key, hold)
        if hold is not None and key.spend_usd_per_day is not None:
            limit = (
                hold.usd
                if solve.budget is None or solve.budget.max_cost_usd is None
                else min(hold.usd, solve.budget.max_cost_usd)
            )
            budget = msgspec.structs.replace(solve.budget or Budget(), max_cost_usd=limit)
            solve = msgspec.structs.replace(solve, budget=budget)
        return solve, hold

    def start(self, key: ApiKey, solve: SolveRequest, hold: Hold | None, durable: bool) -> Call:
        """Run the admitted task; it settles when it ends, whether or not anyone still waits for it."""

        async def call() -> SolveResult:
            run = self.bus.solve_durable if durable else self.bus.solve
            try:
                result = await run(solve, self.settings.solve_timeout_s)
            except GatewayError as exc:
                if durable and exc.code == PENDING:  # it runs on: settled when it ends (issue 34)
                    late = self.background(self._settle_late(key, hold, solve))
                    self._late.add(late)
                    late.add_done_callback(self._late.discard)
                else:
                    await self.settle(key, hold, None)
                raise
            except BaseException:
                await self.settle(key, hold, None)
                raise
            await self.settle(key, hold, result)
            return result

        return Call(key, solve.task_id or "", self.background(call()), self)

    async def _settle_late(self, key: ApiKey, hold: Hold | None, solve: SolveRequest) -> None:
        """Settle a durable task that outlived its request with its result, whenever within ``LATE_SETTLE_S`` it
        comes; its hold stays taken meanwhile (until it expires). Before issue 34 such a task was charged nothing."""
        try:
            result = await self.bus.late_result(solve.task_id or "", solve.key, LATE_SETTLE_S)
        except asyncio.CancelledError:  # the gateway stops: the hold expires on its own
            log.warning(
                "durable task not settled: the gateway stopped before it ended", task_id=solve.task_id
            )
            raise
        if result is None:
            log.warning(
                "durable task not settled: no result came", task_id=solve.task_id, waited_s=LATE_SETTLE_S
            )
        await self.settle(key, hold, result)

    async def stop(self) -> None:
        """Stop waiting for durable tasks that outlived their requests (``_settle_late``)."""
        late = list(self._late)
        for task in late:
            task.cancel()
        await asyncio.gather(*late, return_exceptions=True)

    def background(self, work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Run ``work`` to its end whatever becomes of the request that started it (asyncio keeps only weak
        references to tasks: this set is what keeps them)."""
        task = asyncio.create_task(work)
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        return task

    async def settle(self, key: ApiKey, hold: Hold | None, result: SolveResult | None) -> None:
        if result is not None:
            metrics.gateway_usage(key.name, result.usage.total)
        if self.quotas is None:
            return
        cost = result.usage.total.cost_usd if result is not None else 0.0
        try:
            await self.quotas.charge(key, cost, hold)
        except GatewayError as exc:  # the record stayed contended: the hold expires on its own
            log.error("spend not settled", key=key.name, error=exc.message, cost_usd=cost)


def owns(key: ApiKey, task_id: str) -> bool:
    """Whether ``task_id`` is one of ``key``'s tasks (``Calls.task_id``). The gateway is one tenant on the bus
    (docs/tenancy.md): its keys' tasks share its namespace, and this is what keeps them apart. The gateway alone
    makes its task ids (a request cannot choose one), and key names are unique in the keys file, so a key reaches
    only ids made for its own name; a key rotated under the same name keeps its tasks. The tag used to be a
    prefix of the key's SHA-256: every tenant on the bus could read those ids then, and a short hash of a weak
    key is something to brute-force offline; a name is no secret's digest."""
    name, _, token = task_id.rpartition(".")
    return name == key.name and len(token) == 32 and all(c in "0123456789abcdef" for c in token)


@contextlib.contextmanager
def in_flight() -> Iterator[None]:
    """A request waiting on its task (``conductor_gateway_in_flight``)."""
    metrics.GATEWAY_IN_FLIGHT.inc()
    try:
        yield
    finally:
        metrics.GATEWAY_IN_FLIGHT.dec()

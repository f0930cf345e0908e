"""The gateway's side of NATS: a solve (request/reply, with optional progress events) or a durable submission, and
the cancel of a task whose client hung up — always through the public solve API: the gateway is a tenant like any
other (the NATS user ``gateway``: its tasks, progress and results are its own, docs/tenancy.md), with no access to
internals. Which of its API keys a task belongs to is the gateway's to keep apart (services/gateway/calls.py)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import msgspec
import nats.errors
import nats.js.errors as js_errors
import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg

from conductor.access import GATEWAY
from conductor.client import ConductorClient, ResultNotReadyError, store_full
from conductor.endpoints import Requester
from conductor.liveness import WIND_DOWN_S, ResponderLost
from conductor.settings import CommonSettings
from conductor.wire import encode
from schemas.solve import (
    CancelRequest,
    ProgressEvent,
    SolveRequest,
    SolveResult,
    cancel_subject,
    progress_subject,
    solve_subject,
)
from schemas.tasks import result_subject
from services.gateway.errors import GatewayError

_result_dec = msgspec.json.Decoder(SolveResult)
log = structlog.get_logger("conductor.gateway.bus")
REPLY_MARGIN_S = 2.0  # beyond the executor's wind-down: its answer's way back
LATE_POLL_S = 30.0
BEAT_S = (
    2.0  # the executor's beat period while a solve runs; BEAT_MISSES silent periods = the executor is gone
)
BEAT_MISSES = 3
_event_dec = msgspec.json.Decoder(ProgressEvent)


def unavailable(message: str) -> GatewayError:
    return GatewayError(503, message, kind="service_unavailable", code="unavailable", retry_after=1)


def store_refused(exc: js_errors.APIError, what: str) -> GatewayError:
    """A JetStream write the gateway needed was refused: a full store says so (an operator must free space; no
    retry soon helps), anything else is a plain 503."""
    why = f"{exc.description or type(exc).__name__} (JetStream error {exc.err_code})"
    if store_full(exc):
        return GatewayError(
            503,
            f"{what}: the NATS JetStream store is full: {why}",
            kind="service_unavailable",
            code="storage_full",
        )
    return GatewayError(
        503,
        f"{what}: JetStream refused the write: {why}",
        kind="service_unavailable",
        code="unavailable",
        retry_after=1,
    )


def pending(task_id: str) -> GatewayError:
    """A durable task that outlived the wait: its result is stored, so the GET named here resolves once it ends."""
    return GatewayError(
        504,
        f"task {task_id} is still running; fetch it later with GET /v1/conductor/tasks/{task_id} (what it costs is "
        "charged to this key when it ends)",
        kind="timeout",
        code="task_pending",
        param="task_id",
    )


def not_kept(task_id: str, timeout: float) -> GatewayError:
    """A request/reply task that did not answer, even past its deadline: its result is nowhere to be fetched."""
    return GatewayError(
        504,
        f"task {task_id} did not answer within {timeout:g}s; a request/reply task's result is not stored, so no GET "
        'will find it: send the request with "durable": true to fetch a long task later',
        kind="timeout",
        code="task_timeout",
        param="task_id",
    )


def undecodable(exc: msgspec.DecodeError) -> GatewayError:
    """A result the executor sent that does not decode: its fault, not the client's (never a 400)."""
    return GatewayError(
        502, f"the executor's result does not decode: {exc}", kind="upstream_error", code="bad_result"
    )


def _decoded(data: bytes) -> SolveResult:
    try:
        return _result_dec.decode(data)
    except msgspec.DecodeError as exc:
        raise undecodable(exc) from exc


class Bus:
    def __init__(self, nc: Client, settings: CommonSettings) -> None:
        self._nc = nc
        self._settings = settings
        self._requests = Requester(nc)
        self._client = ConductorClient(settings, nc=nc, role=GATEWAY)
        self.tenant = (
            self._client.tenant
        )  # the NATS user it connected as (``gateway`` in every deployment we ship)
        self._solve = settings.subject(solve_subject(self.tenant))

    def pending(self) -> int:
        """Replies this gateway still waits for (a test and a debugging aid: it must return to 0)."""
        return self._requests.pending()

    async def solve(self, req: SolveRequest, timeout: float) -> SolveResult:
        """Request/reply solve with liveness (conductor/liveness.py): the executor beats while it works, so one
        that dies mid-task is a 503 in seconds, not a wait of ``timeout``; the deadline travels with the request,
        so no step starts after the gateway stopped waiting. A client that hangs up does not end this wait: the task
        is cancelled (``cancel``) and its result, with what ran, still comes here to be settled."""
        try:
            msg = await self._requests.request(
                self._solve,
                encode(req),
                # Past the deadline the executor stops and answers with what ran (conductor/liveness.py
                # ``WIND_DOWN_S``): that answer is waited for, so what the task spent is settled (issue 34).
                timeout=timeout + WIND_DOWN_S + REPLY_MARGIN_S,
                beat_s=BEAT_S,
                misses=BEAT_MISSES,
                deadline=time.time() + timeout,
            )
        except nats.errors.NoRespondersError as exc:
            raise unavailable("no executor is serving the solve API") from exc
        except ResponderLost as exc:
            raise unavailable(
                "the executor running the task stopped answering; the task was not finished"
            ) from exc
        except TimeoutError as exc:
            raise not_kept(req.task_id or "", timeout) from exc
        except nats.errors.ConnectionClosedError as exc:
            raise unavailable("the gateway lost its NATS connection") from exc
        return _decoded(msg.data)

    async def solve_durable(self, req: SolveRequest, timeout: float) -> SolveResult:
        """Submit to the JetStream task queue (deduplicated by task id), then wait for the stored result (also a
        cancelled task's: what ran, stored like any result)."""
        try:
            task_id = await self._client.submit(req)
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError) as exc:
            raise unavailable(
                "the durable task queue did not accept the task (is JetStream enabled?)"
            ) from exc
        except js_errors.APIError as exc:
            raise store_refused(exc, "the durable task queue did not accept the task") from exc
        return await self.result(task_id, wait=timeout, key=req.key)

    async def result(self, task_id: str, *, wait: float, key: str | None) -> SolveResult:
        """The stored result of ``task_id``, only if the executor wrote it for this tenant and ``key`` (an entry
        that is not is absent: conductor/stored.py)."""
        try:
            return await self._client.result(task_id, wait=wait, key=key)
        except ResultNotReadyError as exc:
            raise pending(task_id) from exc
        except msgspec.DecodeError as exc:
            raise undecodable(exc) from exc

    async def late_result(self, task_id: str, key: str | None, wait: float) -> SolveResult | None:
        """The result of a durable task that outlived its request, once it is stored (within ``wait`` seconds; None
        after): woken by the task's result event, read (and checked) from the results bucket, with a read every
        ``LATE_POLL_S`` in case an event was missed (core NATS across a reconnect)."""
        loop = asyncio.get_running_loop()
        until = loop.time() + wait
        arrived = asyncio.Event()

        async def on_event(_msg: Msg) -> None:
            arrived.set()

        sub = await self._nc.subscribe(
            self._settings.subject(result_subject(self.tenant, task_id)), cb=on_event
        )
        try:
            while True:
                try:
                    return await self._client.result(task_id, key=key)
                except ResultNotReadyError:
                    pass
                except nats.errors.Error as exc:  # a lost connection: the next read, after it is back
                    log.warning("late result not read", task_id=task_id, error=repr(exc))
                left = until - loop.time()
                if left <= 0:
                    return None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(arrived.wait(), min(left, LATE_POLL_S))
                arrived.clear()
        finally:
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()

    async def cancel(self, task_id: str, reason: str) -> None:
        """Ask the executor running ``task_id`` to stop it (schemas/solve.py ``CANCEL``); best effort."""
        subject = self._settings.subject(cancel_subject(self.tenant, task_id))
        ask = CancelRequest(task_id=task_id, reason=reason, tenant=self.tenant)
        await self._nc.publish(subject, encode(ask))

    @contextlib.asynccontextmanager
    async def progress(self, task_id: str) -> AsyncIterator[asyncio.Queue[ProgressEvent]]:
        """Progress events of one task, queued as they arrive, for as long as the context is open."""
        queue: asyncio.Queue[ProgressEvent] = asyncio.Queue()

        async def on_event(msg: Msg) -> None:
            with contextlib.suppress(msgspec.DecodeError):  # a malformed event is not the client's problem
                queue.put_nowait(_event_dec.decode(msg.data))

        sub = await self._nc.subscribe(
            self._settings.subject(progress_subject(self.tenant, task_id)), cb=on_event
        )
        try:
            yield queue
        finally:
            with contextlib.suppress(nats.errors.ConnectionClosedError):
                await sub.unsubscribe()

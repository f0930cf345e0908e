"""Request/reply endpoints, served on the NATS connection itself.

Every service's request/reply subjects (`conductor.solve`, `.plan`, `.work`, `.verify`) are declared once as an
``Endpoint``: subject, queue group, and an async ``handler(bytes) -> bytes`` that never needs the message object.

In production (``conductor.runtime.running``) an ``EndpointServer`` subscribes each endpoint with nats-py and runs
every message as its own task, at most ``handler_concurrency`` at a time per service; the subscription's pending
queue holds the rest (back-pressure), up to nats-py's limits (524,288 messages, 128 MiB) — beyond them nats-py
drops messages as a slow consumer and their requesters time out (retryable), rather than the process growing
without bound. FastStream's per-message pipeline (message wrapper, middleware chain,
context, publisher) cost about as much CPU as the work itself on the hot worker-call path (bench/throughput_bench.py
has the figures); it still serves the durable JetStream intake, whose per-message cost is dominated by acks.

``faststream_router`` declares the same endpoints as FastStream subscribers: the AsyncAPI document is generated from
it, and tests drive handlers through FastStream's in-memory test broker with it. The handler is the same function.

Guarantees of ``EndpointServer``:
- a handler that raises still answers: ``on_error`` turns the exception into the endpoint's typed ``internal`` reply
  (logged with its traceback), so a requester never waits out its timeout for a bug;
- a message without a reply subject is handled and its answer dropped (a publish is not a request);
- a reply larger than the server's max_payload becomes the endpoint's typed ``payload_too_large`` reply; a reply
  that cannot be sent at all (connection gone) is logged, and the requester's timeout covers it;
- ``stop()`` drains: no new messages are taken (the subscription's pending ones still run), then the in-flight
  handlers get up to ``drain_timeout_s`` to answer; what is still running after that is cancelled;
- after a NATS reconnect nats-py resubscribes on its own; handlers that were mid-reply get their publish buffered
  by the client until the connection is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import nats.errors
import structlog
from faststream.nats import NatsMessage, NatsRouter
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import (
    DEFAULT_SUB_PENDING_BYTES_LIMIT,
    DEFAULT_SUB_PENDING_MSGS_LIMIT,
    Subscription,
)

from schemas.errors import ErrorCode, ErrorInfo

log = structlog.get_logger("conductor.endpoints")

STATUS_HEADER = "Status"  # how nats-py reports a server status message (nats.js.api.Header.STATUS)
NO_RESPONDERS_STATUS = "503"

Handler = Callable[[bytes], Awaitable[bytes]]


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One request/reply subject of a service. ``subject`` is the full (prefixed) subject; ``title`` names the
    channel in the AsyncAPI document; ``on_error`` encodes the endpoint's reply type carrying an ``ErrorInfo``."""

    subject: str
    queue: str
    title: str
    handler: Handler
    on_error: Callable[[ErrorInfo], bytes]
    description: str | None = None


def internal_error(exc: BaseException) -> ErrorInfo:
    return ErrorInfo(
        code=ErrorCode.INTERNAL,
        message=f"the handler failed: {type(exc).__name__}",
        retryable=True,  # a bug or a resource fault in this replica; another replica or a later try may do better
        detail=str(exc)[:500] or None,
    )


async def answer(endpoint: Endpoint, data: bytes) -> bytes:
    """The handler's reply, or the endpoint's typed internal error if it raised."""
    try:
        return await endpoint.handler(data)
    except Exception as exc:
        log.exception("handler failed; answered with an internal error", subject=endpoint.subject)
        return endpoint.on_error(internal_error(exc))


def faststream_router(endpoints: Sequence[Endpoint], *, max_workers: int) -> NatsRouter:
    """The endpoints as FastStream subscribers (AsyncAPI generation, in-memory tests)."""
    router = NatsRouter()
    for ep in endpoints:
        router.subscriber(ep.subject, queue=ep.queue, title=ep.title, max_workers=max_workers)(
            _faststream_handler(ep)
        )
    return router


def _faststream_handler(ep: Endpoint) -> Callable[[NatsMessage], Awaitable[bytes]]:
    async def handle(msg: NatsMessage) -> bytes:
        return await answer(ep, msg.body)

    handle.__doc__ = ep.description or ep.handler.__doc__
    return handle


class EndpointServer:
    """Serves endpoints on one nats-py connection, a task per message, ``concurrency`` handlers at once."""

    def __init__(
        self,
        nc: Client,
        endpoints: Sequence[Endpoint],
        *,
        concurrency: int,
        drain_timeout_s: float,
        pending_msgs_limit: int = DEFAULT_SUB_PENDING_MSGS_LIMIT,
        pending_bytes_limit: int = DEFAULT_SUB_PENDING_BYTES_LIMIT,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self._nc = nc
        self._endpoints = list(endpoints)
        self._slots = asyncio.Semaphore(concurrency)
        self._drain_timeout_s = drain_timeout_s
        self._limits = {"pending_msgs_limit": pending_msgs_limit, "pending_bytes_limit": pending_bytes_limit}
        self._subs: list[Subscription] = []
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    async def start(self) -> None:
        for ep in self._endpoints:
            sub = await self._nc.subscribe(
                ep.subject, queue=ep.queue, cb=self._dispatcher(ep), **self._limits
            )
            self._subs.append(sub)

    def _dispatcher(self, ep: Endpoint) -> Callable[[Msg], Awaitable[None]]:
        # nats-py awaits this callback for one message at a time per subscription: it only waits for a slot (so a
        # full server leaves further messages in the pending queue) and starts the handler as a task.
        async def dispatch(msg: Msg) -> None:
            await self._slots.acquire()
            task = asyncio.create_task(self._serve(ep, msg))
            self._tasks.add(task)
            task.add_done_callback(self._finished)

        return dispatch

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._slots.release()

    async def _serve(self, ep: Endpoint, msg: Msg) -> None:
        out = await answer(ep, msg.data)
        if not msg.reply:
            return
        try:
            try:
                await self._nc.publish(msg.reply, out)
            except nats.errors.MaxPayloadError:
                log.error("reply over the server's max_payload; answering with an error", subject=ep.subject,
                          reply_bytes=len(out))  # fmt: skip
                too_large = ErrorInfo(
                    code=ErrorCode.PAYLOAD_TOO_LARGE,
                    message=f"the reply ({len(out)} bytes) exceeds the NATS server's max_payload",
                )
                await self._nc.publish(msg.reply, ep.on_error(too_large))
        except nats.errors.Error as exc:  # closed or lost connection: the requester times out and may retry
            log.warning("reply not sent", subject=ep.subject, error=repr(exc))

    async def stop(self) -> None:
        """Drain (see the module docstring); safe to call twice."""
        subs, self._subs = self._subs, []
        deadline = asyncio.get_running_loop().time() + self._drain_timeout_s
        try:
            async with asyncio.timeout_at(deadline):
                for sub in subs:
                    await sub.drain()
        except (nats.errors.Error, TimeoutError) as exc:
            # Closed or lost connection, or a pending queue longer than the drain timeout: what was not taken is
            # the requesters' to retry (their request times out); what runs is still awaited below.
            log.warning("endpoint drain incomplete", error=type(exc).__name__)
            for sub in subs:
                with contextlib.suppress(nats.errors.Error):  # already gone with the connection or the drain
                    await sub.unsubscribe()
        if not self._tasks:
            return
        pending = set(self._tasks)
        _, still = await asyncio.wait(pending, timeout=max(deadline - asyncio.get_running_loop().time(), 0.1))
        if still:
            log.warning("drain timed out; cancelling handlers", handlers=len(still))
            for task in still:
                task.cancel()
            await asyncio.wait(still, timeout=1.0)  # bounded: see conductor.aio.stop_task


class Requester:
    """Request/reply over one wildcard inbox subscription, for the executor's hot path (a plan and a worker call
    per step). nats-py's ``request`` does the same with more per-call work (a NUID plus random bytes per token, a
    done-callback, ``wait_for``): measured 27-30 µs of the requester's CPU per request against 19-21 µs here.

    Raises what nats-py's ``request`` raises: ``nats.errors.NoRespondersError`` when nobody serves the subject,
    ``TimeoutError`` when no reply comes in time, ``nats.errors.ConnectionClosedError`` on a closed connection.
    The inbox subscription is resent by nats-py after a reconnect, like any other.
    """

    def __init__(self, nc: Client) -> None:
        self._nc = nc
        self._pending: dict[str, asyncio.Future[Msg]] = {}
        self._ids = itertools.count()
        self._prefix = ""
        self._ready = asyncio.Lock()
        self._sub: Subscription | None = None

    async def _start(self) -> None:
        async with self._ready:
            if self._sub is None:
                self._prefix = self._nc.new_inbox() + "."
                self._sub = await self._nc.subscribe(self._prefix + "*", cb=self._on_reply)

    async def _on_reply(self, msg: Msg) -> None:
        future = self._pending.pop(msg.subject[len(self._prefix) :], None)
        if future is not None and not future.done():
            future.set_result(msg)

    async def request(self, subject: str, payload: bytes, *, timeout: float) -> Msg:
        if self._sub is None:
            await self._start()
        token = str(next(self._ids))
        future: asyncio.Future[Msg] = asyncio.get_running_loop().create_future()
        self._pending[token] = future
        try:
            await self._nc.publish(subject, payload, reply=self._prefix + token)
            async with asyncio.timeout(timeout):
                msg = await future
        finally:
            self._pending.pop(token, None)
        if msg.headers and msg.headers.get(STATUS_HEADER) == NO_RESPONDERS_STATUS:
            raise nats.errors.NoRespondersError
        return msg

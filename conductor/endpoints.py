"""Request/reply endpoints, served on the NATS connection itself, and requested through one inbox.

Every request/reply subject is declared once in ``schemas/`` as a ``RequestReply`` contract (subject, queue group,
request and reply types, description). A service serves it with ``serve(contract, handler, ...)``: the handler is a
typed ``async (Request) -> Reply`` function, and the sequence every handler used to spell out — decode with the
payload limit, reject bad input with the contract's typed error reply naming the field, count the rejection, encode
— happens here, once. The result is an ``Endpoint``: full subject, queue group and an async
``handler(bytes) -> bytes`` that never needs the message object. A requester calls it with
``Requester.call(contract, request, ...)`` and always gets the typed reply back (see ``Requester``).

In production (``conductor.app.runtime.running``) an ``EndpointServer`` subscribes each endpoint with nats-py and runs
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
- a request whose reply subject is not inside an inbox (``conductor.access.is_reply_inbox``: e.g. a result's KV
  key or result-event subject) is dropped unrun, counted in ``conductor_refused_replies_total{subject}`` and
  logged — the responder is never a confused deputy writing with its own grants where the requester may not;
- a reply larger than the server's max_payload becomes the endpoint's typed ``payload_too_large`` reply; a reply
  that cannot be sent at all (connection gone) is logged, and the requester's timeout covers it;
- ``stop()`` drains: no new messages are taken (the subscription's pending ones still run), then the in-flight
  handlers get up to ``drain_timeout_s`` to answer; what is still running after that is cancelled;
- after a NATS reconnect nats-py resubscribes on its own; handlers that were mid-reply get their publish buffered
  by the client until the connection is back;
- liveness and deadlines (conductor/liveness.py): a request asking for beats gets one every period while it is
  queued or running; a request whose deadline passed while queued is answered with a typed ``timeout`` and never
  run; one still running at its deadline is cancelled; the handler sees the deadline (``current_deadline()``);
- admission is bounded: at most ``max_queued`` requests wait for a slot; beyond that a request is answered at once
  with a typed, retryable ``unavailable`` ("overloaded") instead of silently queueing into its requester's timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass

import msgspec
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
from opentelemetry.trace import SpanKind, StatusCode

from conductor import metrics, tracing
from conductor.access import is_reply_inbox
from conductor.liveness import (
    CallHeaderError,
    CallPolicy,
    PendingCall,
    ResponderLost,
    Watch,
    current_deadline,
    earliest,
    expired,
    is_beat,
    parse_call,
    request_headers,
    reset_deadline,
    set_deadline,
)
from conductor.wire import WireError, decode, encode
from schemas.contract import Rep, Req, RequestReply, wildcard
from schemas.errors import ErrorCode, ErrorInfo

log = structlog.get_logger("conductor.endpoints")

STATUS_HEADER = "Status"  # how nats-py reports a server status message (nats.js.api.Header.STATUS)
NO_RESPONDERS_STATUS = "503"

Handler = Callable[[bytes], Awaitable[bytes]]

_subject: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "conductor_request_subject", default=None
)


def request_subject() -> str | None:
    """The subject the request being handled arrived on: a parameter of the contract's subject (the solve's
    tenant) is read from it, never from the payload, since only the parameter's owner may publish there."""
    return _subject.get()


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One request/reply subject of a service. ``subject`` is the full (prefixed) subject, its ``{name}``
    parameters served as ``*`` (``schemas.contract.wildcard``); ``title`` names the channel in the AsyncAPI
    document; ``on_error`` encodes the endpoint's reply type carrying an ``ErrorInfo``; ``contract`` is the
    declaration it was built from (``serve``), None for a raw bytes endpoint."""

    subject: str
    queue: str
    title: str
    handler: Handler
    on_error: Callable[[ErrorInfo], bytes]
    description: str | None = None
    contract: RequestReply | None = None
    # Seconds the handler may run past its requester's deadline to answer with what it did (conductor/liveness.py
    # ``WIND_DOWN_S``); 0: cancelled at the deadline.
    wind_down_s: float = 0.0


def serve(
    contract: RequestReply[Req, Rep],
    handler: Callable[[Req], Awaitable[Rep]],
    *,
    prefix: str,
    max_bytes: int,
    rejected: Callable[[Rep], None] | None = None,
    wind_down_s: float = 0.0,
) -> Endpoint:
    """The endpoint serving ``contract`` with a typed ``handler``. A request that does not decode (malformed JSON,
    wrong types, out-of-bounds values, over ``max_bytes``) never reaches the handler: it is logged, counted in
    ``conductor_bad_requests_total{subject}``, passed to ``rejected`` (the executor counts it as a task too) and
    answered with the contract's error reply, whose ``error.field`` names the field at fault."""
    request_type = contract.request
    family = contract.subject.split(".{", 1)[0]  # the metric's label: one per contract, never per tenant

    async def handle(body: bytes) -> bytes:
        try:
            request = decode(body, request_type, max_bytes=max_bytes)
        except WireError as exc:
            log.info("rejected request", subject=family, error=exc.info.message, field=exc.info.field)
            reply = contract.failed(exc.info)
            metrics.bad_request(family)
            if rejected is not None:
                rejected(reply)
            return encode(reply)
        return encode(await handler(request))

    return Endpoint(
        prefix + contract.subject,
        queue=contract.queue,
        title=contract.title,
        handler=handle,
        on_error=lambda info: encode(contract.failed(info)),
        description=contract.description,
        contract=contract,
        wind_down_s=wind_down_s,
    )


def internal_error(exc: BaseException) -> ErrorInfo:
    return ErrorInfo(
        code=ErrorCode.INTERNAL,
        message=f"the handler failed: {type(exc).__name__}",
        retryable=True,  # a bug or a resource fault in this replica; another replica or a later try may do better
        detail=str(exc)[:500] or None,
    )


def deadline_error(what: str) -> ErrorInfo:
    # Not retryable: the requester set the deadline and has stopped waiting; nothing was paid for after it.
    return ErrorInfo(code=ErrorCode.TIMEOUT, message=f"the request's deadline passed {what}")


def overloaded(queued: int) -> ErrorInfo:
    return ErrorInfo(
        code=ErrorCode.UNAVAILABLE,
        message=f"overloaded: {queued} requests already queued or running here",
        retryable=True,  # another replica, or this one a moment later, may have room
    )


def too_large(service: str, size: int) -> ErrorInfo:
    """Deterministic: the same request will never fit, so sending it again would only repeat the failure."""
    return ErrorInfo(
        code=ErrorCode.PAYLOAD_TOO_LARGE,
        message=f"the request to {service} ({size} bytes) exceeds the NATS server's max_payload",
    )


async def answer_by(
    endpoint: Endpoint, data: bytes, deadline: float | None, subject: str | None = None
) -> bytes:
    """The handler's reply, or the endpoint's typed internal error if it raised, under the requester's deadline:
    not started once past it (the server's ``Watch`` cancels it when it passes mid-run), and visible to the handler
    as ``current_deadline()``. ``subject``: the one the request arrived on, visible as ``request_subject()``.
    One coroutine (every request in flight holds each frame of its await chain)."""
    if deadline is not None and expired(deadline):
        return endpoint.on_error(deadline_error("while it was queued; it was not run"))
    deadline_token = None if deadline is None else set_deadline(deadline)
    subject_token = _subject.set(subject)
    try:
        return await endpoint.handler(data)
    except Exception as exc:
        log.exception("handler failed; answered with an internal error", subject=endpoint.subject)
        return endpoint.on_error(internal_error(exc))
    finally:
        _subject.reset(subject_token)
        if deadline_token is not None:
            reset_deadline(deadline_token)


def answer(endpoint: Endpoint, data: bytes, subject: str | None = None) -> Coroutine[None, None, bytes]:
    """``answer_by`` with no deadline."""
    return answer_by(endpoint, data, None, subject)


def faststream_router(endpoints: Sequence[Endpoint], *, max_workers: int) -> NatsRouter:
    """The endpoints as FastStream subscribers (AsyncAPI generation, in-memory tests)."""
    router = NatsRouter()
    for ep in endpoints:
        router.subscriber(
            ep.subject, queue=ep.queue, title=ep.title, description=ep.description, max_workers=max_workers
        )(_faststream_handler(ep))
    return router


def _faststream_handler(ep: Endpoint) -> Callable[[NatsMessage], Awaitable[bytes]]:
    async def handle(msg: NatsMessage) -> bytes:
        return await answer(ep, msg.body, msg.raw_message.subject)

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
        max_queued: int | None = None,
        pending_msgs_limit: int = DEFAULT_SUB_PENDING_MSGS_LIMIT,
        pending_bytes_limit: int = DEFAULT_SUB_PENDING_BYTES_LIMIT,
    ) -> None:
        """``max_queued``: requests allowed to wait for a slot (default 16 x ``concurrency``)."""
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self._admit = concurrency + (16 * concurrency if max_queued is None else max_queued)
        self._watch = Watch(nc)
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
        self._watch.start()
        for ep in self._endpoints:
            sub = await self._nc.subscribe(
                wildcard(ep.subject), queue=ep.queue, cb=self._dispatcher(ep), **self._limits
            )
            self._subs.append(sub)

    def _dispatcher(self, ep: Endpoint) -> Callable[[Msg], Awaitable[None]]:
        # nats-py awaits this callback for one message at a time per subscription. It never waits: the request
        # becomes a task at once (queued for a slot in our own queue, where it can be sent beats and dropped at its
        # deadline — nats-py's pending queue allows neither), or, past the admission bound, is refused at once.
        async def dispatch(msg: Msg) -> None:
            if msg.reply and not is_reply_inbox(msg.reply):
                # Neither run nor answered: nobody legitimate asks for a reply outside an inbox (is_reply_inbox).
                metrics.refused_reply(ep.subject)
                log.warning(
                    "request dropped: its reply subject is not an inbox",
                    subject=ep.subject,
                    reply=msg.reply[:200],
                )
                return
            if len(self._tasks) >= self._admit:
                if msg.reply:
                    await self._reply(ep, msg.reply, ep.on_error(overloaded(len(self._tasks))))
                return
            task = asyncio.create_task(self._serve(ep, msg))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        return dispatch

    async def _serve(self, ep: Endpoint, msg: Msg) -> None:
        try:
            period, deadline = parse_call(msg.headers) if msg.headers else (None, None)
        except CallHeaderError as exc:  # answered as bad input, nothing run (issue 34)
            log.warning("request with a malformed deadline refused", subject=ep.subject, error=str(exc))
            metrics.bad_request(ep.subject)
            if msg.reply:
                await self._reply(
                    ep, msg.reply, ep.on_error(ErrorInfo(code=ErrorCode.BAD_REQUEST, message=str(exc)))
                )
            return
        watched = None
        if deadline is not None or (period is not None and msg.reply):
            cancel_at = deadline + ep.wind_down_s if deadline is not None else None
            watched = self._watch.watch(msg.reply, period, cancel_at)
        try:
            # The requester's trace context (conductor/tracing.py) makes this handler's work a child of its call.
            with (
                tracing.span(
                    f"process {ep.subject}",
                    kind=SpanKind.SERVER,
                    headers=msg.headers,
                    attributes=_attrs(ep.subject),
                )
                if tracing.enabled()
                else tracing.NO_SPAN  # no name or attributes built per message when tracing is off
            ):
                async with self._slots:
                    out = await answer_by(ep, msg.data, deadline, msg.subject)
        except asyncio.CancelledError:
            if watched is None or not watched.expired:
                raise  # shutdown, not the deadline
            asyncio.current_task().uncancel()  # type: ignore[union-attr]
            out = ep.on_error(deadline_error("while it was queued or running; it was cancelled"))
        finally:
            if watched is not None:
                self._watch.forget(watched)
        if msg.reply:
            await self._reply(ep, msg.reply, out)

    async def _reply(self, ep: Endpoint, reply: str, out: bytes) -> None:
        try:
            try:
                await self._nc.publish(reply, out)
            except nats.errors.MaxPayloadError:
                log.error(
                    "reply over the server's max_payload; answering with an error",
                    subject=ep.subject,
                    reply_bytes=len(out),
                )
                too_large = ErrorInfo(
                    code=ErrorCode.PAYLOAD_TOO_LARGE,
                    message=f"the reply ({len(out)} bytes) exceeds the NATS server's max_payload",
                )
                await self._nc.publish(reply, ep.on_error(too_large))
        except nats.errors.Error as exc:  # closed or lost connection: the requester times out and may retry
            log.warning("reply not sent", subject=ep.subject, error=repr(exc))

    async def stop(self) -> None:
        """Drain (see the module docstring); safe to call twice. Beats go on while in-flight requests finish."""
        try:
            await self._drain()
        finally:
            await self._watch.stop()

    async def _drain(self) -> None:
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

    ``request`` raises what nats-py's ``request`` raises: ``nats.errors.NoRespondersError`` when nobody serves
    the subject, ``TimeoutError`` when no reply comes in time, ``nats.errors.ConnectionClosedError`` on a closed
    connection; with ``beat_s``, ``ResponderLost`` (a ``TimeoutError``) after ``misses`` beat periods without a
    reply or a beat. ``call`` is the typed form over a contract and never raises for those: a responder that does
    not answer becomes the contract's retryable ``unavailable`` reply, a reply that does not decode its
    ``internal`` one, a request over the server's max_payload its non-retryable ``payload_too_large`` one. The
    inbox subscription is resent by nats-py after a reconnect, like any other.
    """

    def __init__(self, nc: Client) -> None:
        self._nc = nc
        self._pending: dict[str, PendingCall] = {}
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
        token = msg.subject[len(self._prefix) :]
        call = self._pending.get(token)
        if call is None:
            return
        if is_beat(msg.headers):
            call.heard()
            return
        del self._pending[token]
        if not call.future.done():
            call.future.set_result(msg)

    def pending(self) -> int:
        """Requests still waiting for their reply."""
        return len(self._pending)

    async def request(
        self,
        subject: str,
        payload: bytes,
        *,
        timeout: float,
        beat_s: float | None = None,
        misses: int = 3,
        deadline: float | None = None,
    ) -> Msg:
        """``timeout`` bounds the whole call (a live, slow responder); ``beat_s`` asks the responder for a beat
        every that many seconds and gives up after ``misses`` silent periods; ``deadline`` (unix seconds) travels
        with the request so the responder drops or cancels it once nobody waits (conductor/liveness.py)."""
        if self._sub is None:
            await self._start()
        token = str(next(self._ids))
        call = PendingCall(
            asyncio.get_running_loop().create_future(), None if beat_s is None else beat_s * misses
        )
        self._pending[token] = call
        try:
            headers = tracing.headers(request_headers(beat_s, deadline))
            await self._nc.publish(subject, payload, reply=self._prefix + token, headers=headers)
            # Sent: neither is kept for the reply's wait (a work request's payload is the step's whole prompt).
            del headers, payload
            msg = await call.start(timeout, subject)
        finally:
            call.close()
            self._pending.pop(token, None)
        if msg.headers and msg.headers.get(STATUS_HEADER) == NO_RESPONDERS_STATUS:
            raise nats.errors.NoRespondersError
        return msg

    async def call(
        self,
        contract: RequestReply[Req, Rep],
        request: Req,
        *,
        prefix: str,
        timeout: float,
        policy: CallPolicy | None = None,
    ) -> Rep:
        """``request`` on ``contract``'s subject; the typed reply, or the contract's error reply saying why not.

        With a ``policy`` the request asks for beats and carries a deadline — the earlier of this call's timeout
        and the deadline of the request being served here, so nested work never outlives its first requester —
        and a lost or missing responder is tried again (``CallPolicy``). Sending again is exactly-once safe on
        this project's subjects: a durable task's worker call is keyed in the worker-adapter's call ledger, so a
        retry joins or replays the first one; a request/reply solve's worker call, or a plan from an LLM policy,
        is paid again only when the replica that made it died with its answer (it is lost either way)."""
        # Encoded for each try, not kept: every call in flight would hold its whole payload while it waits. The
        # same request encodes to the same bytes, and a try after the first is rare (a lost or missing responder).
        subject = prefix + contract.subject
        traced = tracing.enabled()  # no span name or attributes built per call when off
        with (
            tracing.span(f"request {subject}", kind=SpanKind.CLIENT, attributes=_attrs(subject))
            if traced
            else tracing.NO_SPAN
        ) as span:
            try:
                if policy is None:
                    msg = await self.request(subject, encode(request), timeout=timeout)
                else:  # inline, not a coroutine of its own: every call in flight holds each frame it awaits in
                    deadline = earliest(current_deadline(), time.time() + timeout)
                    assert deadline is not None
                    give_up = time.monotonic() + policy.failover_s
                    pause = policy.retry_base_s
                    while True:
                        try:
                            msg = await self.request(
                                subject,
                                encode(request),
                                timeout=max(deadline - time.time(), 0.001),
                                beat_s=policy.beat_s,
                                misses=policy.beat_misses,
                                deadline=deadline,
                            )
                            break
                        except _FAIL_OVER as exc:
                            if time.monotonic() + pause > give_up or time.time() + pause >= deadline:
                                raise
                            log.warning(
                                "responder lost or missing; trying again",
                                subject=subject,
                                error=type(exc).__name__,
                                pause_s=pause,
                            )
                            await asyncio.sleep(pause)
                            pause = min(pause * 2, policy.retry_max_s)
            except nats.errors.MaxPayloadError:
                return contract.failed(too_large(contract.queue, len(encode(request))), request)
            except _NOT_ANSWERED as exc:
                if span is not None:
                    span.set_status(StatusCode.ERROR, type(exc).__name__)
                return contract.failed(unavailable(contract.queue, exc), request)
        try:
            return _reply_decoder(contract.reply).decode(msg.data)
        except msgspec.DecodeError as exc:
            return contract.failed(malformed_reply(contract.queue, exc), request)


_FAIL_OVER = (ResponderLost, nats.errors.NoRespondersError)  # nobody is working on it: sending again is safe


def _attrs(subject: str) -> dict[str, str]:
    return {"messaging.system": "nats", "messaging.destination.name": subject}


_NOT_ANSWERED = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    TimeoutError,
    nats.errors.ConnectionClosedError,
)
_reply_decoders: dict[type, msgspec.json.Decoder] = {}


def _reply_decoder(kind: type[Rep]) -> msgspec.json.Decoder[Rep]:
    dec = _reply_decoders.get(kind)
    if dec is None:
        dec = _reply_decoders[kind] = msgspec.json.Decoder(kind)
    return dec


def unavailable(service: str, exc: BaseException) -> ErrorInfo:
    """The responder (named by its queue group) did not answer: transient, the requester may retry."""
    return ErrorInfo(
        code=ErrorCode.UNAVAILABLE,
        message=f"{service} did not answer: {type(exc).__name__}",
        retryable=True,
        detail=str(exc) or None,
    )


def malformed_reply(service: str, exc: BaseException) -> ErrorInfo:
    """A reply that does not decode means mismatched versions or a bug, not a transient fault."""
    return ErrorInfo(code=ErrorCode.INTERNAL, message=f"{service} sent a reply that does not decode: {exc}")

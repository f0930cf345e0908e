"""Liveness of the executor's requests on a real nats-server (issue 8, items 1, 4 and 7): a responder that dies
mid-call is detected in beats, not after the call timeout; a live slow one is not; deadlines travel and are
honoured; overload is refused with a typed error; an oversized request is a typed, non-retryable error."""

from __future__ import annotations

import asyncio
import contextlib
import time
from types import SimpleNamespace

import msgspec
import nats
import pytest

from conductor.endpoints import Endpoint, EndpointServer, Requester
from conductor.liveness import ResponderLost, current_deadline, request_headers
from conductor.settings import CommonSettings
from conductor.wire import encode
from schemas.errors import ErrorCode
from schemas.work import WORK_SUBJECT, ChatMessage, WorkReply, WorkRequest
from services.executor.config import CallSettings
from services.executor.transport import NatsTransport

pytestmark = pytest.mark.nats

FAST = CallSettings(beat_s=0.1, beat_misses=3, failover_s=20.0, retry_base_s=0.05)
HOUR = 3600.0  # the call timeout in these tests: reaching it would hang the test (the guard below fails it)
REQ = WorkRequest(worker="w", messages=[ChatMessage(role="user", content="hi")], task_id="t", idempotent=True)


def _endpoint(subject: str, handler) -> Endpoint:
    return Endpoint(
        subject,
        queue="worker-adapter",
        title="work",
        handler=handler,
        on_error=lambda info: encode(WorkReply(worker="", error=info)),
    )


@contextlib.asynccontextmanager
async def _served(url: str, subject: str, handler, **kw):
    nc = await nats.connect(url)
    server = EndpointServer(nc, [_endpoint(subject, handler)], drain_timeout_s=1, **{"concurrency": 8, **kw})
    await server.start()
    try:
        yield server
    finally:
        await server.stop()
        await nc.close()


async def _transport(url: str, prefix: str, calls: CallSettings = FAST) -> tuple[NatsTransport, nats.NATS]:
    nc = await nats.connect(url)
    settings = CommonSettings(nats_url=url, subject_prefix=prefix)
    return NatsTransport(SimpleNamespace(connection=nc), settings, calls), nc  # type: ignore[arg-type]


async def _ok(body: bytes) -> bytes:
    req = msgspec.json.decode(body, type=WorkRequest)
    return encode(WorkReply(worker=req.worker, text="live"))


async def test_a_responder_that_dies_mid_call_is_detected_and_the_call_fails_over(nats_url, subject_prefix):
    """Failed before: the executor waited out the call timeout (900 s in production) for a SIGKILLed
    worker-adapter. Now the missing beats show it in ~0.3 s and the call reaches the replica that replaced it."""
    subject = f"{subject_prefix}{WORK_SUBJECT}"
    transport, nc = await _transport(nats_url, subject_prefix)
    dead = await nats.connect(nats_url)
    taken: list[bytes] = []
    took = asyncio.Event()

    async def swallow(msg):  # takes the request and dies: no reply, no beat, ever
        taken.append(msg.data)
        took.set()

    await dead.subscribe(subject, queue="worker-adapter", cb=swallow)
    try:
        async with asyncio.timeout(60):
            call = asyncio.create_task(transport.work(REQ, timeout=HOUR))
            await took.wait()
            await dead.close()  # the replica is gone; its replacement comes up
            async with _served(nats_url, subject, _ok):
                reply = await call
    finally:
        await nc.close()
    assert reply.error is None and reply.text == "live"
    assert len(taken) == 1


async def test_a_live_slow_responder_is_not_declared_lost(nats_url, subject_prefix):
    subject = f"{subject_prefix}{WORK_SUBJECT}"
    calls = 0

    async def slow(body: bytes) -> bytes:
        nonlocal calls
        calls += 1
        await asyncio.sleep(1.0)  # ten beat periods
        return await _ok(body)

    transport, nc = await _transport(nats_url, subject_prefix)
    try:
        async with _served(nats_url, subject, slow):
            reply = await transport.work(REQ, timeout=HOUR)
    finally:
        await nc.close()
    assert reply.error is None and reply.text == "live" and calls == 1


async def test_a_silent_responder_raises_responder_lost_not_a_plain_timeout(nats_url, subject_prefix):
    subject = f"{subject_prefix}silent"
    nc = await nats.connect(nats_url)

    async def ignore(msg):
        return None

    await nc.subscribe(subject, cb=ignore)
    try:
        with pytest.raises(ResponderLost):
            await Requester(nc).request(subject, b"x", timeout=HOUR, beat_s=0.05, misses=2)
        with pytest.raises(TimeoutError) as plain:  # no beats asked: the timeout decides, as before
            await Requester(nc).request(subject, b"x", timeout=0.2)
        assert not isinstance(plain.value, ResponderLost)
    finally:
        await nc.close()


async def test_the_deadline_travels_and_work_queued_past_it_is_not_run(nats_url, subject_prefix):
    """Failed before: no deadline travelled, so queued work of a requester that had left was run and paid."""
    subject = f"{subject_prefix}{WORK_SUBJECT}"
    release, started = asyncio.Event(), asyncio.Event()
    ran: list[str] = []
    seen: list[float | None] = []

    async def held(body: bytes) -> bytes:
        req = msgspec.json.decode(body, type=WorkRequest)
        ran.append(req.task_id)
        seen.append(current_deadline())
        started.set()
        await release.wait()
        return await _ok(body)

    transport, nc = await _transport(nats_url, subject_prefix)
    try:
        async with _served(nats_url, subject, held, concurrency=1):
            first = asyncio.create_task(transport.work(REQ, timeout=HOUR))
            await started.wait()
            late = await transport.work(msgspec.structs.replace(REQ, task_id="late"), timeout=0.3)
            release.set()
            assert (await first).error is None
    finally:
        await nc.close()
    assert late.error is not None and late.error.code in (ErrorCode.TIMEOUT, ErrorCode.UNAVAILABLE)
    assert ran == ["t"]  # the late request was dropped unpaid, never handed to the handler
    assert seen[0] is not None and seen[0] > time.time() + HOUR - 60  # the first call's deadline reached it


async def test_a_handler_still_running_at_its_deadline_is_cancelled(nats_url, subject_prefix):
    subject = f"{subject_prefix}held"
    cancelled = asyncio.Event()

    async def forever(body: bytes) -> bytes:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return body

    async with _served(nats_url, subject, forever):
        nc = await nats.connect(nats_url)
        try:
            msg = await nc.request(
                subject, b"{}", timeout=10, headers=request_headers(None, time.time() + 0.3)
            )
        finally:
            await nc.close()
    reply = msgspec.json.decode(msg.data, type=WorkReply)
    assert reply.error is not None and reply.error.code == ErrorCode.TIMEOUT and not reply.error.retryable
    assert cancelled.is_set()


async def test_admission_is_bounded_overload_gets_a_typed_retryable_error(nats_url, subject_prefix):
    """Failed before: a full server queued without bound and the requesters' timeouts silently included it."""
    subject = f"{subject_prefix}bounded"
    release = asyncio.Event()

    async def held(body: bytes) -> bytes:
        await release.wait()
        return body

    async with _served(nats_url, subject, held, concurrency=1, max_queued=1):
        nc = await nats.connect(nats_url)
        try:
            waiting = [asyncio.create_task(nc.request(subject, b"{}", timeout=10)) for _ in range(2)]
            await asyncio.sleep(0.2)
            refused = msgspec.json.decode((await nc.request(subject, b"{}", timeout=10)).data, type=WorkReply)
            release.set()
            answered = [(await w).data for w in waiting]
        finally:
            await nc.close()
    assert (
        refused.error is not None and refused.error.code == ErrorCode.UNAVAILABLE and refused.error.retryable
    )
    assert "overloaded" in refused.error.message and answered == [b"{}", b"{}"]


async def test_an_oversized_work_request_is_a_typed_non_retryable_error(nats_url, subject_prefix):
    """Failed before: nats-py's MaxPayloadError escaped as an exception, became ``internal`` (retryable) and the
    task was redelivered five times to fail the same way."""
    transport, nc = await _transport(nats_url, subject_prefix)
    huge = msgspec.structs.replace(
        REQ, messages=[ChatMessage(role="user", content="x" * (nc.max_payload + 1))]
    )
    try:
        reply = await transport.work(huge, timeout=5)
    finally:
        await nc.close()
    assert reply.error is not None and reply.error.code == ErrorCode.PAYLOAD_TOO_LARGE
    assert not reply.error.retryable

"""The endpoint server on a real nats-server: bounded concurrency, typed replies for handler bugs, drain on stop."""

from __future__ import annotations

import asyncio
import contextlib
import io
import time

import msgspec
import nats
import nats.errors
import pytest

from conductor.app.cli import dump_tasks
from conductor.endpoints import Endpoint, EndpointServer, Requester
from conductor.liveness import CALL_HEADER
from conductor.wire import encode
from schemas.errors import ErrorCode
from schemas.work import WorkReply

pytestmark = pytest.mark.nats


@contextlib.asynccontextmanager
async def _served(url: str, endpoints: list[Endpoint], *, concurrency: int, drain_timeout_s: float = 5):
    """A connection with the endpoints served on it; stopped and closed on exit."""
    nc = await nats.connect(url)
    server = EndpointServer(nc, endpoints, concurrency=concurrency, drain_timeout_s=drain_timeout_s)
    await server.start()
    try:
        yield nc, server
    finally:
        await server.stop()
        await nc.close()


def _endpoint(subject: str, handler) -> Endpoint:
    return Endpoint(
        subject,
        queue="test",
        title="test",
        handler=handler,
        on_error=lambda info: encode(WorkReply(worker="", error=info)),
    )


async def test_requests_run_concurrently_up_to_the_limit_and_all_are_answered(nats_url, subject_prefix):
    running = peak = 0

    async def slow(body: bytes) -> bytes:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.05)
        running -= 1
        return body.upper()

    subject = f"{subject_prefix}ep.slow"
    async with _served(nats_url, [_endpoint(subject, slow)], concurrency=3) as (nc, _):
        replies = await asyncio.gather(
            *(nc.request(subject, f"m{i}".encode(), timeout=10) for i in range(12))
        )
        assert [r.data for r in replies] == [f"M{i}".encode() for i in range(12)]
        assert peak == 3  # twelve requests, never more than three handlers at once


async def test_a_handler_that_raises_answers_with_a_typed_internal_error(nats_url, subject_prefix):
    async def broken(body: bytes) -> bytes:
        raise KeyError("no such thing")

    subject = f"{subject_prefix}ep.broken"
    async with _served(nats_url, [_endpoint(subject, broken)], concurrency=4) as (nc, _):
        reply = msgspec.json.decode((await nc.request(subject, b"{}", timeout=5)).data, type=WorkReply)
        assert reply.error is not None and reply.error.code == ErrorCode.INTERNAL
        assert "KeyError" in reply.error.message and reply.error.retryable
        # the server keeps serving after a failure
        again = msgspec.json.decode((await nc.request(subject, b"{}", timeout=5)).data, type=WorkReply)
        assert again.error is not None and again.error.code == ErrorCode.INTERNAL


@pytest.mark.parametrize("deadline", ["nan", "inf", "-inf", "soon"])
async def test_a_deadline_that_is_not_a_finite_number_is_a_typed_bad_request(
    nats_url, subject_prefix, deadline
):
    """Failed before (issue 34): a NaN deadline logged a traceback and the request ran as if it had none."""
    ran = []

    async def handler(body: bytes) -> bytes:
        ran.append(body)
        return body

    subject = f"{subject_prefix}ep.deadline"
    async with _served(nats_url, [_endpoint(subject, handler)], concurrency=2) as (nc, _):
        headers = {CALL_HEADER: f"2;{deadline}"}
        reply = msgspec.json.decode(
            (await nc.request(subject, b"{}", timeout=5, headers=headers)).data, type=WorkReply
        )
        assert reply.error is not None and reply.error.code == ErrorCode.BAD_REQUEST
        assert f"deadline {deadline!r} is not a finite number" in reply.error.message and ran == []
        fine = {CALL_HEADER: f"2;{time.time() + 30:.3f}"}
        assert (await nc.request(subject, b"{}", timeout=5, headers=fine)).data == b"{}"


async def test_stop_lets_in_flight_handlers_answer_and_then_takes_nothing_more(nats_url, subject_prefix):
    started = asyncio.Event()
    release = asyncio.Event()
    handled: list[bytes] = []

    async def held(body: bytes) -> bytes:
        handled.append(body)
        started.set()
        await release.wait()
        return b"done:" + body

    subject = f"{subject_prefix}ep.drain"
    nc = await nats.connect(nats_url)
    server = EndpointServer(nc, [_endpoint(subject, held)], concurrency=8, drain_timeout_s=5)
    await server.start()
    pending = asyncio.create_task(nc.request(subject, b"a", timeout=10))
    await started.wait()
    stopping = asyncio.create_task(server.stop())
    await asyncio.sleep(0.2)
    assert not stopping.done() and server.in_flight == 1  # stop waits for the handler
    release.set()
    assert (await pending).data == b"done:a"
    await stopping
    with pytest.raises(nats.errors.NoRespondersError):
        await nc.request(subject, b"b", timeout=2)
    assert handled == [b"a"]
    await nc.close()


async def test_stop_cancels_handlers_still_running_after_the_drain_timeout(nats_url, subject_prefix):
    cancelled = asyncio.Event()

    async def forever(body: bytes) -> bytes:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return body

    subject = f"{subject_prefix}ep.forever"
    nc = await nats.connect(nats_url)
    server = EndpointServer(nc, [_endpoint(subject, forever)], concurrency=8, drain_timeout_s=0.3)
    await server.start()
    await nc.publish(subject, b"x")  # no reply subject: handled, answer dropped
    await nc.flush()
    for _ in range(100):
        if server.in_flight:
            break
        await asyncio.sleep(0.01)
    assert server.in_flight == 1
    await server.stop()
    assert cancelled.is_set() and server.in_flight == 0
    await nc.close()


def test_concurrency_must_be_positive():
    with pytest.raises(ValueError, match="concurrency"):
        EndpointServer(None, [], concurrency=0, drain_timeout_s=1)  # type: ignore[arg-type]


async def test_dump_tasks_prints_every_task_with_its_stack():
    async def parked() -> None:
        await inner()

    async def inner() -> None:
        await asyncio.Event().wait()

    task = asyncio.create_task(parked(), name="parked-task")
    await asyncio.sleep(0)
    out = io.StringIO()
    assert dump_tasks(out) >= 2
    text = out.getvalue()
    assert "parked-task" in text and "in parked" in text and "in inner" in text and "in wait" in text
    task.cancel()


async def test_a_reply_over_the_servers_max_payload_becomes_a_typed_error(nats_url, subject_prefix):
    async def huge(body: bytes) -> bytes:
        return b"x" * (2 * 1024 * 1024)  # nats-server's default max_payload is 1 MiB

    subject = f"{subject_prefix}ep.huge"
    async with _served(nats_url, [_endpoint(subject, huge)], concurrency=2) as (nc, _):
        reply = msgspec.json.decode((await nc.request(subject, b"{}", timeout=5)).data, type=WorkReply)
        assert reply.error is not None and reply.error.code == ErrorCode.PAYLOAD_TOO_LARGE
        assert "max_payload" in reply.error.message


async def test_requester_matches_concurrent_replies_and_raises_like_nats_py(nats_url, subject_prefix):
    async def echo(body: bytes) -> bytes:
        await asyncio.sleep(0.001 * (int(body) % 7))  # replies come back out of order
        return b"re:" + body

    async def silent(body: bytes) -> bytes:
        await asyncio.Event().wait()
        return body

    served = f"{subject_prefix}rq.echo"
    hung = f"{subject_prefix}rq.hung"
    endpoints = [_endpoint(served, echo), _endpoint(hung, silent)]
    async with _served(nats_url, endpoints, concurrency=64, drain_timeout_s=0.2) as (nc, _):
        requester = Requester(nc)
        replies = await asyncio.gather(
            *(requester.request(served, str(i).encode(), timeout=5) for i in range(200))
        )
        assert [r.data for r in replies] == [f"re:{i}".encode() for i in range(200)]
        with pytest.raises(nats.errors.NoRespondersError):
            await requester.request(f"{subject_prefix}rq.nobody", b"x", timeout=5)
        with pytest.raises(TimeoutError):
            await requester.request(hung, b"x", timeout=0.2)
        assert not requester._pending  # nothing left behind by answered, refused or timed-out requests
    with pytest.raises(nats.errors.ConnectionClosedError):
        await requester.request(served, b"x", timeout=1)

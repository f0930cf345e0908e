"""The work handler on FastStream's in-memory broker and on a real nats-server: replies, typed errors, keeps serving."""

from __future__ import annotations

import asyncio

import msgspec
import pytest
from faststream.nats import TestNatsBroker

from conductor.app.runtime import running
from conductor.broker import make_broker
from conductor.pool import load_pool
from conductor.service import full_router
from conductor.settings import CommonSettings
from conductor.wire import encode
from schemas.errors import ErrorCode
from schemas.work import WORK_SUBJECT, ChatMessage, WorkReply, WorkRequest
from services.worker_adapter.app import WorkerAdapterService, create_service
from services.worker_adapter.config import SharedSettings, WorkerAdapterSettings

QUESTION = "What is the capital city of Australia?"

BAD_PAYLOADS = [
    (b"not json", ErrorCode.BAD_REQUEST, None),
    (b"[1, 2]", ErrorCode.BAD_REQUEST, None),
    (b'{"worker": 5, "messages": []}', ErrorCode.BAD_REQUEST, "worker"),
    (b'{"worker": "sim-small"}', ErrorCode.BAD_REQUEST, "messages"),
    (
        b'{"worker": "sim-small", "messages": [{"role": "robot", "content": "x"}]}',
        ErrorCode.BAD_REQUEST,
        "messages[0].role",
    ),
    (
        b'{"worker": "nobody", "messages": [{"role": "user", "content": "x"}]}',
        ErrorCode.BAD_REQUEST,
        "worker",
    ),
    (
        b'{"worker": "sim-small", "messages": [{"role": "user", "content": "' + b"x" * 5000 + b'"}]}',
        ErrorCode.PAYLOAD_TOO_LARGE,
        None,
    ),
]


def _service(
    prefix: str, url: str = "nats://127.0.0.1:1", *, shared: bool = True
) -> tuple[WorkerAdapterService, object]:
    common = CommonSettings(nats_url=url, subject_prefix=prefix, max_payload_bytes=4096)
    settings = WorkerAdapterSettings(common=common, shared=SharedSettings(enabled=shared))
    svc = WorkerAdapterService(settings, load_pool(None))
    broker = make_broker(common, name="test")
    broker.include_router(full_router(svc))
    return svc, broker


def _work(worker: str, step: int = 0) -> bytes:
    msgs = [ChatMessage(role="user", content=f"{QUESTION}\n\nAnswer it.")]
    return encode(WorkRequest(worker=worker, messages=msgs, task_id="t-1", step=step))


async def _exercise(svc: WorkerAdapterService, request, prefix: str) -> None:
    subject = f"{prefix}{WORK_SUBJECT}"
    for payload, code, field in BAD_PAYLOADS:
        reply = msgspec.json.decode(await request(payload, subject), type=WorkReply)
        assert reply.error is not None and reply.error.code == code, payload
        assert reply.error.field == field, (payload, reply.error)
    names = svc.pool.names()
    replies = await asyncio.gather(*(request(_work(w, i), subject) for i, w in enumerate(names * 3)))
    for name, raw in zip(names * 3, replies, strict=True):
        reply = msgspec.json.decode(raw, type=WorkReply)
        assert reply.error is None and reply.worker == name and "Final answer: " in reply.text
        assert reply.usage.calls == 1 and reply.usage.output_tokens > 0 and reply.attempts == 1


async def test_work_handler_in_memory(subject_prefix):
    svc, broker = _service(subject_prefix, shared=False)  # the in-memory broker's JetStream is a mock
    async with TestNatsBroker(broker) as br:

        async def request(payload: bytes, subject: str) -> bytes:
            return (await br.request(payload, subject)).body

        await svc.start(broker)
        await _exercise(svc, request, subject_prefix)
        await svc.stop()


@pytest.mark.nats
async def test_work_handler_real_nats(nats_url, subject_prefix):
    svc, _ = _service(subject_prefix, nats_url)
    async with running([svc], svc.settings.common, name="test") as broker:  # the production endpoint server

        async def request(payload: bytes, subject: str) -> bytes:
            return (await broker.request(payload, subject, timeout=10)).body

        await _exercise(svc, request, subject_prefix)


@pytest.mark.nats
async def test_requests_are_handled_concurrently(nats_url, subject_prefix):
    """Sixteen 50 ms sim calls finish in far less than 16 × 50 ms: the subscriber does not serialise them."""
    svc, _ = _service(subject_prefix, nats_url)
    subject = f"{subject_prefix}{WORK_SUBJECT}"
    async with running([svc], svc.settings.common, name="test") as broker:
        loop = asyncio.get_running_loop()
        start = loop.time()
        await asyncio.gather(
            *(broker.request(_work("sim-frontier", i), subject, timeout=10) for i in range(16))
        )
        assert loop.time() - start < 0.5
        assert svc.shared is not None and svc.shared.ledger is not None  # ledger, cache and limits on KV
        assert svc.adapter is not None and svc.adapter.stats().provider_calls == 16


def test_create_service_reads_env_once():
    svc = create_service({"CONDUCTOR_SUBJECT_PREFIX": "x.", "CONDUCTOR_RETRY_BACKOFF_BASE_S": "0.25"})
    assert svc.name == "worker-adapter" and svc.settings.backoff_base_s == 0.25
    assert svc.settings.common.subject(WORK_SUBJECT) == "x.conductor.work"

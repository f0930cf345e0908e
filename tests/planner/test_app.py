"""The plan handler on FastStream's in-memory broker and on a real nats-server: typed replies, then workflows."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import msgspec
import pytest
from faststream.nats import NatsBroker, TestNatsBroker

from conductor.broker import make_broker
from conductor.service import full_router
from conductor.settings import CommonSettings
from conductor.wire import encode
from schemas.errors import ErrorCode
from schemas.plan import PLAN_SUBJECT, PlanReply
from services.planner.app import PlannerService, create_service
from services.planner.config import PlannerSettings
from services.planner.policies.scripted import ScriptedPolicy
from tests.planner.samples import GOOD, request

Request = Callable[[bytes, str], Awaitable[bytes]]

BAD_PAYLOADS = [
    (b"not json", None),
    (b"[1, 2]", None),
    (b'{"task_id": "t", "question": "q"}', "workers"),
    (
        b'{"task_id": "t", "question": "q", "workers": [{"index": "0", "description": "d"}]}',
        "workers[0].index",
    ),
    (
        b'{"task_id": "t", "question": "q", "workers": [{"index": 0, "description": "d"}], "max_steps": 0}',
        "max_steps",
    ),
    (b'{"task_id": "t", "question": " ", "workers": [{"index": 0, "description": "d"}]}', "question"),
    (
        b'{"task_id": "t", "question": "q", "workers": [{"index": 0, "description": "d"}], "policy": "x"}',
        "policy",
    ),
]


def _service(prefix: str, url: str = "nats://127.0.0.1:1") -> tuple[PlannerService, NatsBroker]:
    common = CommonSettings(nats_url=url, subject_prefix=prefix, max_payload_bytes=4096)
    svc = PlannerService(PlannerSettings(common=common, policy="openai:c"), policy=ScriptedPolicy([GOOD] * 5))
    broker = make_broker(common, name="test")
    broker.include_router(full_router(svc))
    return svc, broker


async def _exercise(svc: PlannerService, broker: NatsBroker, send: Request, prefix: str, cards) -> None:
    await svc.start(broker)
    subject = f"{prefix}{PLAN_SUBJECT}"
    for payload, field in BAD_PAYLOADS:
        reply = msgspec.json.decode(await send(payload, subject), type=PlanReply)
        assert reply.error is not None and reply.error.code == ErrorCode.BAD_REQUEST, payload
        assert reply.error.field == field, (payload, reply.error)
    big = encode(request(cards, question="x" * 5000))
    reply = msgspec.json.decode(await send(big, subject), type=PlanReply)
    assert reply.error.code == ErrorCode.PAYLOAD_TOO_LARGE
    reply = msgspec.json.decode(await send(encode(request(cards)), subject), type=PlanReply)
    assert reply.error is None and reply.workflow.model_id == [1, 3] and reply.policy == "scripted"
    reply = msgspec.json.decode(
        await send(encode(request(cards, policy="single:2")), subject), type=PlanReply
    )
    assert reply.workflow.model_id == [2] and reply.policy == "single:2"
    await svc.stop()


async def test_plan_handler_in_memory(subject_prefix: str, cards) -> None:
    svc, broker = _service(subject_prefix)
    async with TestNatsBroker(broker) as br:

        async def send(payload: bytes, subject: str) -> bytes:
            return (await br.request(payload, subject)).body

        await _exercise(svc, broker, send, subject_prefix, cards)


@pytest.mark.nats
async def test_plan_handler_real_nats(nats_url: str, subject_prefix: str, cards) -> None:
    svc, broker = _service(subject_prefix, nats_url)
    async with broker:
        await broker.start()

        async def send(payload: bytes, subject: str) -> bytes:
            return (await broker.request(payload, subject, timeout=5)).body

        await _exercise(svc, broker, send, subject_prefix, cards)


async def test_unconfigured_service_answers_with_the_default_baseline(subject_prefix: str, cards) -> None:
    svc = create_service({"CONDUCTOR_SUBJECT_PREFIX": subject_prefix})
    broker = make_broker(svc.settings.common, name="test")
    broker.include_router(full_router(svc))
    async with TestNatsBroker(broker) as br:
        await svc.start(broker)
        msg = await br.request(encode(request(cards)), f"{subject_prefix}{PLAN_SUBJECT}")
        reply = msgspec.json.decode(msg.body, type=PlanReply)
        await svc.stop()
    assert reply.policy == "moa" and reply.workflow.model_id == [0, 1, 2, 3, 0]

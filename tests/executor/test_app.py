"""The solve handler on FastStream's in-memory broker and on a real nats-server: typed replies for bad input."""

from __future__ import annotations

import msgspec
import pytest
from faststream.nats import TestNatsBroker

from conductor.broker import make_broker
from conductor.service import full_router
from conductor.settings import CommonSettings
from schemas.errors import ErrorCode
from schemas.plan import Workflow
from schemas.solve import SolveResult, solve_subject
from services.executor.app import ExecutorService
from services.executor.config import ExecutorSettings
from tests.executor.fakes import ScriptedTransport

BAD_PAYLOADS = [
    (b"not json", None),
    (b"\xff\xfe\x00", None),
    (b"[1, 2]", None),
    (b'{"question": 5}', "question"),
    (b'{"question": "q", "pool": "sim-math"}', "pool"),
    (b'{"question": "q", "max_steps": "three"}', "max_steps"),
    (b'{"question": "  "}', "question"),
    (b'{"question": "q", "pool": ["who"]}', "pool[0]"),
    (b'{"no_question": 1}', "question"),
]


def _service(
    prefix: str, url: str = "nats://127.0.0.1:1", max_bytes: int = 4096, durable: bool = False
) -> tuple[ExecutorService, object]:
    common = CommonSettings(nats_url=url, subject_prefix=prefix, max_payload_bytes=max_bytes)
    svc = ExecutorService(
        ExecutorSettings(common=common, durable=durable),
        transport=ScriptedTransport([Workflow(model_id=[0], subtasks=["go"], access_list=[[]])] * 50),
    )
    broker = make_broker(common, name="test")
    broker.include_router(full_router(svc))
    return svc, broker


async def _exercise(svc, broker, request, prefix: str) -> None:
    await svc.start(broker)
    subject = f"{prefix}{solve_subject('client')}"
    for payload, field in BAD_PAYLOADS:
        res = msgspec.json.decode(await request(payload, subject), type=SolveResult)
        assert res.error is not None and res.error.code == ErrorCode.BAD_REQUEST, payload
        assert res.error.field == field, (payload, res.error)
    big = b'{"question": "' + b"x" * 5000 + b'"}'
    res = msgspec.json.decode(await request(big, subject), type=SolveResult)
    assert res.error.code == ErrorCode.PAYLOAD_TOO_LARGE
    res = msgspec.json.decode(
        await request(b'{"question": "2+2?", "task_id": "t-1"}', subject), type=SolveResult
    )
    assert res.error is None and res.task_id == "t-1" and res.answer == "sim-frontier@0: saw 1 msgs"


async def test_solve_handler_in_memory(subject_prefix):
    svc, broker = _service(subject_prefix)
    async with TestNatsBroker(broker) as br:

        async def request(payload: bytes, subject: str) -> bytes:
            return (await br.request(payload, subject)).body

        await _exercise(svc, broker, request, subject_prefix)


@pytest.mark.nats
async def test_solve_handler_real_nats(nats_url, subject_prefix):
    svc, broker = _service(subject_prefix, nats_url, durable=True)
    async with broker:
        await broker.start()

        async def request(payload: bytes, subject: str) -> bytes:
            return (await broker.request(payload, subject, timeout=5)).body

        await _exercise(svc, broker, request, subject_prefix)

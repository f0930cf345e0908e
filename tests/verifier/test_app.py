"""The verify handler on the in-memory broker and on a real nats-server: verdicts in order, typed bad-request errors."""

from __future__ import annotations

import msgspec
import pytest
from faststream.nats import TestNatsBroker

from conductor.broker import make_broker
from conductor.service import full_router
from conductor.settings import CommonSettings
from conductor.wire import encode
from schemas.errors import ErrorCode
from schemas.verify import (
    VERIFY_SUBJECT,
    IOTest,
    Outcome,
    StdioTestsReference,
    TextReference,
    VerifyBatch,
    VerifyBatchResult,
    VerifyRequest,
)
from services.verifier.app import VerifierService, create_service
from services.verifier.core import Verifier
from tests.verifier.conftest import make_settings

BAD_PAYLOADS = [
    (b"not json", None),
    (b"[1, 2]", None),
    (b'{"items": 5}', "items"),
    (b'{"items": [{"id": "x", "response": "r"}]}', "items[0].reference"),
    (b'{"items": [{"id": "x", "response": "r", "reference": {"type": "nope"}}]}', "items[0].reference.type"),
    (b'{"items": [{"id": 1, "response": "r", "reference": {"type": "text", "answer": "1"}}]}', "items[0].id"),
]
BATCH = VerifyBatch(
    items=[
        VerifyRequest(id="math", response=r"\boxed{\frac{1}{2}}", reference=TextReference(answer="0.5")),
        VerifyRequest(
            id="mcq", response="Answer: B", reference=TextReference(answer="C", choices=["1", "2", "3", "4"])
        ),
        VerifyRequest(
            id="code",
            response="```python\nprint(input()[::-1])\n```",
            reference=StdioTestsReference(tests=[IOTest(input="abc", output="cba")]),
        ),
        VerifyRequest(id="none", response="no answer here", reference=TextReference(answer="3")),
    ]
)


def service(
    verifier: Verifier, prefix: str, url: str = "nats://127.0.0.1:1"
) -> tuple[VerifierService, object]:
    settings = msgspec.structs.replace(
        make_settings(), common=CommonSettings(nats_url=url, subject_prefix=prefix)
    )
    svc = VerifierService(settings, verifier)
    broker = make_broker(settings.common, name="test")
    broker.include_router(full_router(svc))
    return svc, broker


async def exercise(svc: VerifierService, broker, request, prefix: str) -> None:
    await svc.start(broker)
    subject = f"{prefix}{VERIFY_SUBJECT}"
    for payload, field in BAD_PAYLOADS:
        reply = msgspec.json.decode(await request(payload, subject), type=VerifyBatchResult)
        assert reply.error is not None and reply.error.code == ErrorCode.BAD_REQUEST, payload
        assert reply.error.field == field, (payload, reply.error)
        assert reply.verdicts == []
    reply = msgspec.json.decode(await request(encode(BATCH), subject), type=VerifyBatchResult)
    assert reply.error is None
    assert [(v.id, v.outcome) for v in reply.verdicts] == [
        ("math", Outcome.CORRECT),
        ("mcq", Outcome.INCORRECT),
        ("code", Outcome.CORRECT),
        ("none", Outcome.INCORRECT),
    ]
    await svc.stop()
    assert (
        svc._given is not None and svc._given.sandbox.processes.slots[0].process is not None
    )  # a shared verifier stays up


@pytest.mark.asyncio(loop_scope="session")
async def test_verify_handler_in_memory(verifier: Verifier, subject_prefix: str) -> None:
    svc, broker = service(verifier, subject_prefix)
    async with TestNatsBroker(broker) as br:

        async def request(payload: bytes, subject: str) -> bytes:
            return (await br.request(payload, subject, timeout=30)).body  # a loaded machine is not a bug

        await exercise(svc, broker, request, subject_prefix)


@pytest.mark.nats
@pytest.mark.asyncio(loop_scope="session")
async def test_verify_handler_real_nats(verifier: Verifier, nats_url: str, subject_prefix: str) -> None:
    svc, broker = service(verifier, subject_prefix, nats_url)
    async with broker:
        await broker.start()

        async def request(payload: bytes, subject: str) -> bytes:
            return (await broker.request(payload, subject, timeout=30)).body

        await exercise(svc, broker, request, subject_prefix)


def test_create_service_reads_env_once() -> None:
    svc = create_service({"CONDUCTOR_SUBJECT_PREFIX": "x.", "CONDUCTOR_SANDBOX_WORKERS": "3"})
    assert svc.name == "verifier" and svc.settings.sandbox_workers == 3
    assert svc.settings.common.subject(VERIFY_SUBJECT) == "x.conductor.verify"

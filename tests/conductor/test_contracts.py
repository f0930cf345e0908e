"""Each request/reply contract is declared once and everything is derived from it: the served endpoints, the
typed requester, the AsyncAPI channels; bad input is rejected in one place."""

from __future__ import annotations

import msgspec
import nats
import pytest

from conductor import metrics
from conductor.app.asyncapi import asyncapi_document
from conductor.app.runtime import SERVICES, create_services
from conductor.endpoints import Requester, serve
from conductor.wire import encode
from schemas.catalog import REQUEST_REPLY
from schemas.errors import ErrorCode, ErrorInfo
from schemas.work import WORK, ChatMessage, WorkReply, WorkRequest
from tests.conductor.scrape import parse, value

INFO = ErrorInfo(code=ErrorCode.INTERNAL, message="boom")


@pytest.mark.parametrize("contract", REQUEST_REPLY, ids=lambda c: c.title)
def test_every_contract_builds_a_typed_error_reply_that_round_trips(contract) -> None:
    reply = contract.failed(INFO)
    assert isinstance(reply, contract.reply) and reply.error == INFO
    assert msgspec.json.decode(encode(reply), type=contract.reply) == reply
    assert contract.description and contract.subject.startswith("conductor.")


def test_subjects_titles_and_queue_groups_are_unique() -> None:
    for attr in ("subject", "title"):
        values = [getattr(c, attr) for c in REQUEST_REPLY]
        assert len(values) == len(set(values)), attr


def test_every_contract_is_served_by_exactly_one_service_and_nothing_else_is() -> None:
    # The gateway (HTTP, no NATS endpoints) needs keys or the anonymous switch to be built at all.
    env = {"CONDUCTOR_SUBJECT_PREFIX": "p.", "CONDUCTOR_GATEWAY_ALLOW_ANONYMOUS": "true"}
    services = create_services(list(SERVICES), env)
    served = [ep.contract for svc in services for ep in svc.endpoints]
    assert sorted(c.title for c in served) == sorted(c.title for c in REQUEST_REPLY)
    for svc in services:
        for ep in svc.endpoints:
            assert ep.subject == "p." + ep.contract.subject and ep.queue == ep.contract.queue


def test_the_asyncapi_document_carries_each_contracts_description_queue_and_types() -> None:
    doc = asyncapi_document()
    for contract in REQUEST_REPLY:
        channel = doc["channels"][contract.title]
        assert channel["address"] == contract.subject
        assert channel["description"] == contract.description
        assert channel["bindings"]["nats"]["queue"] == contract.queue
        reply = doc["components"]["messages"][f"{contract.title}:ReplyMessage"]["payload"]["$ref"]
        assert reply.endswith("/" + contract.reply.__name__)


async def test_serve_rejects_bad_input_once_with_the_contracts_typed_reply_and_counts_it() -> None:
    seen: list[WorkRequest] = []
    rejected: list[WorkReply] = []

    async def handler(req: WorkRequest) -> WorkReply:
        seen.append(req)
        return WorkReply(worker=req.worker, text="ok")

    ep = serve(WORK, handler, prefix="x.", max_bytes=200, rejected=rejected.append)
    assert (ep.subject, ep.queue, ep.title) == ("x.conductor.work", "worker-adapter", "work")
    good = WorkRequest(worker="w", messages=[ChatMessage(role="user", content="hi")])
    assert msgspec.json.decode(await ep.handler(encode(good)), type=WorkReply).text == "ok"
    assert seen == [good]

    before = parse(metrics.exposition().decode())
    bad = msgspec.json.decode(await ep.handler(b'{"worker": 3, "messages": []}'), type=WorkReply)
    huge = msgspec.json.decode(await ep.handler(b" " * 201), type=WorkReply)
    after = parse(metrics.exposition().decode())
    assert bad.error is not None and (bad.error.code, bad.error.field) == (ErrorCode.BAD_REQUEST, "worker")
    assert huge.error is not None and huge.error.code == ErrorCode.PAYLOAD_TOO_LARGE
    assert seen == [good] and rejected == [bad, huge]
    counted = value(after, "conductor_bad_requests_total", subject=WORK.subject)
    assert counted - value(before, "conductor_bad_requests_total", subject=WORK.subject) == 2


@pytest.mark.nats
async def test_call_returns_typed_replies_and_never_raises_for_a_missing_or_broken_responder(
    nats_url: str, subject_prefix: str
) -> None:
    nc = await nats.connect(nats_url)
    try:
        requester = Requester(nc)
        req = WorkRequest(worker="sim-math", messages=[ChatMessage(role="user", content="2+2?")])
        nobody = await requester.call(WORK, req, prefix=subject_prefix, timeout=5)
        assert (
            nobody.error is not None and nobody.error.code == ErrorCode.UNAVAILABLE and nobody.error.retryable
        )
        assert nobody.worker == "sim-math" and "worker-adapter did not answer" in nobody.error.message

        async def garbage(msg) -> None:
            await msg.respond(b"not json")

        await nc.subscribe(subject_prefix + WORK.subject, cb=garbage)
        broken = await requester.call(WORK, req, prefix=subject_prefix, timeout=5)
        assert (
            broken.error is not None
            and broken.error.code == ErrorCode.INTERNAL
            and not broken.error.retryable
        )
        assert broken.worker == "sim-math"
    finally:
        await nc.close()


def test_the_asyncapi_payloads_carry_the_schemas_bounds_and_descriptions() -> None:
    schemas_ = asyncapi_document()["components"]["schemas"]
    solve = schemas_["SolveRequest"]["properties"]
    assert solve["question"]["minLength"] == 1 and solve["question"]["description"]
    assert {"type": "integer", "minimum": 1} in solve["max_steps"]["anyOf"] and solve["max_rounds"][
        "minimum"
    ] == 0
    assert {"type": "integer", "exclusiveMinimum": 0} in schemas_["Budget"]["properties"]["max_calls"][
        "anyOf"
    ]
    assert schemas_["PlanRequest"]["properties"]["workers"]["minItems"] == 1


def test_published_subjects_are_declared_once_and_documented_from_the_declaration() -> None:
    from schemas.catalog import EVENTS
    from schemas.solve import PROGRESS, progress_subject
    from schemas.tasks import RESULTS, result_subject

    assert PROGRESS.subject(tenant="a", task_id="t-1") == progress_subject("a", "t-1")
    assert RESULTS.subject(tenant="a", task_id="t-1") == result_subject("a", "t-1")
    doc = asyncapi_document()
    for event in EVENTS:
        channel = doc["channels"][event.title]
        assert (channel["address"], channel["description"]) == (event.address, event.description)
        assert (
            set(channel["parameters"]) == set(event.parameters)
            and doc["operations"][event.title]["action"] == "send"
        )
        payload = doc["components"]["messages"][f"{event.title}:Message"]["payload"]["$ref"]
        assert payload.endswith("/" + event.payload.__name__)

"""Stores that check what they read (issue 34, item 2), on a real nats-server: an entry under a tenant's name that
the executor did not write for that task — a reflected PubAck, another tenant's result — is absent to the intake,
the client and the result-event publisher, is counted, and is replaced by the task's own result; a foreign JSON
object on a cancel subject cancels nothing."""

from __future__ import annotations

import types

import msgspec
import nats
import pytest

from conductor import metrics
from conductor.access import CLIENT
from conductor.client import ConductorClient, ResultNotReadyError
from conductor.wire import encode
from schemas.plan import Workflow
from schemas.solve import SolveRequest, SolveResult, cancel_subject
from schemas.tasks import Names, task_key
from services.executor.app import ExecutorService
from tests.executor.fakes import ScriptedTransport
from tests.executor.test_durable import _settings, _start

pytestmark = pytest.mark.nats

WF = Workflow(model_id=[0], subtasks=["a"], access_list=[[]])
PUBACK = b'{"stream":"CONDUCTOR_TASKS","seq":7}'  # what a reply subject aimed at the key stores


def _refused(store: str, reason: str) -> float:
    labels = {"store": store, "reason": reason}
    return metrics.REGISTRY.get_sample_value("conductor_store_entries_refused_total", labels) or 0.0


def _decode(data: bytes) -> SolveResult:
    return msgspec.json.decode(data, type=SolveResult)


@pytest.mark.parametrize(
    "planted",
    [
        PUBACK,
        b"",  # a reflected 404: no body
        encode(SolveResult(task_id="same-1", answer="beta's answer", tenant="beta")),
        encode(SolveResult(task_id="same-1", answer="no tenant")),  # nobody's: the executor always writes one
    ],
    ids=["puback", "empty", "other-tenant", "no-tenant"],
)
async def test_a_planted_result_is_absent_and_replaced_by_the_tasks_own(nats_url, subject_prefix, planted):
    settings = _settings(nats_url, subject_prefix)
    t = ScriptedTransport([WF])
    _svc, broker = await _start(settings, t)
    names = Names.for_prefix(subject_prefix)
    nc = await nats.connect(nats_url)
    try:
        kv = await nc.jetstream().key_value(names.results_bucket)
        await kv.put(task_key(CLIENT, "same-1"), planted)
        async with ConductorClient(settings.common) as client:
            with pytest.raises(ResultNotReadyError):  # the client does not take it for the answer
                await client.result("same-1")
            await client.submit(SolveRequest(question="Q?", task_id="same-1"))
            res = await client.result("same-1", wait=10)
        assert len(t.plan_requests) == 1  # the task ran: what was stored there was not its result
        assert res.tenant == CLIENT and res.task_id == "same-1" and res.answer and "beta" not in res.answer
        held = await nc.jetstream().get_last_msg(
            names.result_events_stream, names.result_subject(CLIENT, "same-1")
        )
        assert _decode(held.data).tenant == CLIENT
    finally:
        await nc.close()
        await broker.stop()


async def test_the_client_counts_and_names_an_entry_it_refuses(nats_url, subject_prefix):
    settings = _settings(nats_url, subject_prefix)
    names = Names.for_prefix(subject_prefix)
    _svc, broker = await _start(settings, ScriptedTransport([]))
    nc = await nats.connect(nats_url)
    try:
        kv = await nc.jetstream().key_value(names.results_bucket)
        await kv.put(task_key(CLIENT, "x-1"), PUBACK)
        await kv.put(task_key(CLIENT, "x-2"), encode(SolveResult(task_id="x-2", answer="a", tenant="beta")))
        undecodable, foreign = _refused("results", "undecodable"), _refused("results", "foreign")
        async with ConductorClient(settings.common) as client:
            with pytest.raises(ResultNotReadyError, match="not its result"):
                await client.result("x-1", wait=0.2)  # polled several times, refused once
            with pytest.raises(ResultNotReadyError, match="not its result"):
                await client.result("x-2")
        assert _refused("results", "undecodable") == undecodable + 1
        assert _refused("results", "foreign") == foreign + 1
    finally:
        await nc.close()
        await broker.stop()


async def test_a_planted_result_event_is_published_over(nats_url, subject_prefix):
    settings = _settings(nats_url, subject_prefix)
    svc, broker = await _start(settings, ScriptedTransport([]))
    names = Names.for_prefix(subject_prefix)
    js = broker.connection.jetstream()
    subject = names.result_subject(CLIENT, "ev-1")
    try:
        await js.publish(subject, PUBACK)
        mine = SolveResult(task_id="ev-1", answer="42", tenant=CLIENT)
        assert svc.store is not None
        await svc.store.publish_result_event(task_key(CLIENT, "ev-1"), mine)
        held = await js.get_last_msg(names.result_events_stream, subject)
        assert _decode(held.data) == mine
        await svc.store.publish_result_event(task_key(CLIENT, "ev-1"), mine)  # once: now it holds it
        assert (await js.get_last_msg(names.result_events_stream, subject)).seq == held.seq
    finally:
        await broker.stop()


@pytest.mark.parametrize(
    "payload",
    [
        encode(
            SolveResult(task_id="run-1", answer="beta's", tenant="beta")
        ),  # a result reflected as a cancel
        encode(
            {"task_id": "run-1", "reason": "r", "tenant": "beta"}
        ),  # naming another tenant than the subject
    ],
    ids=["foreign-result", "other-tenant"],
)
async def test_a_foreign_object_on_a_cancel_subject_cancels_nothing(subject_prefix, payload):
    settings = _settings("nats://unused:4222", subject_prefix)
    svc = ExecutorService(settings, transport=ScriptedTransport([]))
    subject = subject_prefix + cancel_subject("acme", "run-1")
    await svc.handle_cancel(types.SimpleNamespace(subject=subject, data=payload))
    with svc.cancels.watch("acme", SolveRequest(question="Q?", task_id="run-1")) as cancel:
        assert cancel.error() is None
    ok = encode({"task_id": "run-1", "reason": "mine", "tenant": "acme"})
    await svc.handle_cancel(types.SimpleNamespace(subject=subject, data=ok))
    with svc.cancels.watch("acme", SolveRequest(question="Q?", task_id="run-1")) as cancel:
        assert cancel.error() is not None

"""Durable intake on a real nats-server: dedup, typed bad input, retries with backoff, dead letters, resume."""

from __future__ import annotations

import asyncio

import msgspec
import nats
import pytest

from conductor.access import CLIENT
from conductor.broker import make_broker
from conductor.client import ConductorClient, DuplicateTaskError, ResultNotReadyError
from conductor.service import full_router
from conductor.settings import CommonSettings
from conductor.wire import encode
from schemas.errors import ErrorCode, ErrorInfo
from schemas.plan import PlanReply, Workflow
from schemas.solve import SolveRequest
from schemas.tasks import DeadLetter, Names, task_key
from services.executor.app import ExecutorService
from services.executor.config import ExecutorSettings, IntakeSettings
from tests.executor.fakes import ScriptedTransport

pytestmark = pytest.mark.nats

WF = Workflow(model_id=[0, 1, 2], subtasks=["a", "b", "c"], access_list=[[], "all", "all"])


class FlakyPlanner(ScriptedTransport):
    """The planner is unavailable for the first ``failures`` calls."""

    def __init__(self, failures: int) -> None:
        super().__init__([WF] * 10)
        self.failures = failures

    async def plan(self, req, timeout):
        if self.failures > 0:
            self.failures -= 1
            self.plan_requests.append(req)
            return PlanReply(
                policy="", error=ErrorInfo(code=ErrorCode.UNAVAILABLE, message="down", retryable=True)
            )
        return await super().plan(req, timeout)


class BlockingStep(ScriptedTransport):
    """Step ``block_at`` never returns: the process 'dies' while that call is in flight."""

    def __init__(self, block_at: int) -> None:
        super().__init__([WF])
        self.block_at = block_at
        self.reached = asyncio.Event()

    async def work(self, req, timeout):
        if req.step == self.block_at:
            self.work_requests.append(req)
            self.reached.set()
            await asyncio.Event().wait()
        return await super().work(req, timeout)


def _settings(url: str, prefix: str, **intake) -> ExecutorSettings:
    return ExecutorSettings(
        common=CommonSettings(nats_url=url, subject_prefix=prefix, drain_timeout_s=0.2),
        intake=IntakeSettings(**{"ack_wait_s": 1.0, "backoff_base_s": 0.05, "max_deliver": 4, **intake}),
    )


async def _start(settings: ExecutorSettings, transport):
    svc = ExecutorService(settings, transport=transport)
    broker = make_broker(settings.common, name="test-executor")
    broker.include_router(full_router(svc))
    await broker.start()
    await svc.start(broker)
    return svc, broker


async def test_duplicate_submissions_give_one_result_and_one_event(nats_url, subject_prefix):
    settings = _settings(nats_url, subject_prefix)
    t = ScriptedTransport([WF, WF])
    svc, broker = await _start(settings, t)
    names = Names.for_prefix(subject_prefix)
    nc = await nats.connect(nats_url)
    events = []

    async def on_event(msg):
        events.append(msg)

    sub = await nc.subscribe(f"{names.result_prefix}.>", cb=on_event)
    try:
        async with ConductorClient(settings.common) as client:
            req = SolveRequest(question="Q?", task_id="dup-1")
            assert await client.submit(req) == "dup-1"
            with pytest.raises(DuplicateTaskError, match="dup-1 was already submitted"):
                await client.submit(req)  # dropped by JetStream's duplicate window, and said so
            res = await client.result("dup-1", wait=10)
            assert res.error is None and res.answer == "sim-knowledge@2: saw 5 msgs"
            await asyncio.sleep(0.3)
        assert len(t.plan_requests) == 1 and len(events) == 1
        assert (
            await svc.store.checkpoint(task_key(CLIENT, "dup-1")) is None
        )  # forgotten after the result was stored
    finally:
        await sub.unsubscribe()
        await nc.close()
        await broker.stop()


async def test_bad_task_payload_gets_a_typed_result_under_its_msg_id(nats_url, subject_prefix):
    settings = _settings(nats_url, subject_prefix)
    _svc, broker = await _start(settings, ScriptedTransport([]))
    names = Names.for_prefix(subject_prefix)
    try:
        js = broker.connection.jetstream()
        await js.publish(names.submit(CLIENT), b'{"question": 42}', headers={"Nats-Msg-Id": "bad-1"})
        async with ConductorClient(settings.common) as client:
            res = await client.result("bad-1", wait=10)
        assert res.error.code == ErrorCode.BAD_REQUEST and res.error.field == "question"
    finally:
        await broker.stop()


async def test_transient_failures_are_redelivered_with_backoff_then_succeed(nats_url, subject_prefix):
    settings = _settings(nats_url, subject_prefix)
    t = FlakyPlanner(failures=2)
    _svc, broker = await _start(settings, t)
    try:
        async with ConductorClient(settings.common) as client:
            await client.submit(SolveRequest(question="Q?", task_id="flaky-1"))
            res = await client.result("flaky-1", wait=15)
        assert res.error is None and len(t.plan_requests) == 3
    finally:
        await broker.stop()


async def test_max_deliver_produces_dead_letter_and_final_error_result(nats_url, subject_prefix):
    settings = _settings(nats_url, subject_prefix, max_deliver=3)
    t = FlakyPlanner(failures=100)
    _svc, broker = await _start(settings, t)
    names = Names.for_prefix(subject_prefix)
    try:
        async with ConductorClient(settings.common) as client:
            await client.submit(SolveRequest(question="Q?", task_id="dead-1"))
            res = await client.result("dead-1", wait=15)
        assert res.error.code == ErrorCode.UNAVAILABLE and len(t.plan_requests) == 3
        js = broker.connection.jetstream()
        raw = await js.get_last_msg(names.dead_stream, names.dead_subject(task_key(CLIENT, "dead-1")))
        letter = msgspec.json.decode(raw.data, type=DeadLetter)
        assert letter.attempts == 3 and len(letter.errors) == 3 and letter.request.question == "Q?"
    finally:
        await broker.stop()


async def test_crash_mid_step_resumes_elsewhere_rerunning_only_the_inflight_call(nats_url, subject_prefix):
    settings = _settings(nats_url, subject_prefix)
    first = BlockingStep(block_at=1)
    _svc_a, broker_a = await _start(settings, first)
    async with ConductorClient(settings.common) as client:
        await client.submit(SolveRequest(question="Q?", task_id="crash-1"))
        await asyncio.wait_for(first.reached.wait(), 10)
        await asyncio.sleep(0.1)  # let step 0's checkpoint land
        await broker_a.stop()  # drain times out: the in-flight task is cancelled and released (delayed nak)
        second = ScriptedTransport([])  # must not be asked to plan again
        _svc_b, broker_b = await _start(settings, second)
        try:
            res = await client.result("crash-1", wait=20)
        finally:
            await broker_b.stop()
    assert res.error is None and not second.plan_requests
    assert [r.step for r in second.work_requests] == [1, 2]
    assert [s.index for s in res.workflows[0].steps] == [0, 1, 2]


async def test_result_of_unknown_task_is_not_ready(nats_url, subject_prefix):
    settings = _settings(nats_url, subject_prefix)
    _svc, broker = await _start(settings, ScriptedTransport([]))
    try:
        async with ConductorClient(settings.common) as client:
            with pytest.raises(ResultNotReadyError):
                await client.result("nope", wait=0.2)
    finally:
        await broker.stop()


def test_encode_roundtrip_of_dead_letter():
    letter = DeadLetter(task_id="x", request=SolveRequest(question="q"), attempts=2, errors=[])
    assert msgspec.json.decode(encode(letter), type=DeadLetter) == letter

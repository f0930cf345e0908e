"""Outages ride out (issue 8, items 2 and 7): transient failures are retried for a *time* (the retry horizon), not a
delivery count; a task's start persists across redeliveries for ``max_wall_s`` and ``latency_s``; a task id that
JetStream accepts again after its duplicate window was lost is not re-run."""

from __future__ import annotations

import asyncio
import time

import msgspec
import nats
import nats.js.errors
import pytest

from conductor.access import CLIENT
from conductor.client import ConductorClient
from conductor.wire import encode
from schemas.errors import ErrorCode, ErrorInfo
from schemas.plan import PlanReply
from schemas.solve import Budget, SolveRequest, StepRecord
from schemas.tasks import Names, RoundRecord, TaskCheckpoint, task_key
from services.executor.config import IntakeSettings
from services.executor.intake import failed_again, given_up
from tests.executor.fakes import ScriptedTransport
from tests.executor.test_durable import WF, _settings, _start

DOWN = ErrorInfo(code=ErrorCode.UNAVAILABLE, message="planner did not answer", retryable=True)


class PlannerOutage(ScriptedTransport):
    """The planner answers ``unavailable`` until ``down_s`` after the first request; each failing answer takes
    ``slow_s`` (a request timing out)."""

    def __init__(self, down_s: float, slow_s: float = 0.0) -> None:
        super().__init__([WF] * 10)
        self.down_s, self.slow_s = down_s, slow_s
        self.began: float | None = None
        self.failed = 0

    async def plan(self, req, timeout):
        self.began = self.began or time.monotonic()
        if time.monotonic() - self.began < self.down_s:
            self.failed += 1
            await asyncio.sleep(self.slow_s)
            self.plan_requests.append(req)
            return PlanReply(policy="", error=DOWN)
        return await super().plan(req, timeout)


def _cp(steps: int, **kw) -> TaskCheckpoint:
    rnd = RoundRecord(
        round=0,
        policy="p",
        steps=[StepRecord(index=i, model_id=0, worker="w", subtask="s", access=[]) for i in range(steps)],
    )
    return TaskCheckpoint(task_id="t", request=SolveRequest(question="q"), rounds=[rnd], **kw)


def test_the_horizon_counts_from_the_first_failure_since_the_last_progress():
    s = IntakeSettings(retry_horizon_s=100.0, max_deliver=1000)
    cp = failed_again(_cp(1), DOWN, now=1000.0)
    assert cp.failing_since == 1000.0 and not given_up(cp, 50, 1099.0, s)
    assert given_up(failed_again(cp, DOWN, 1100.0), 51, 1100.0, s)
    # progress since the run of failures began (another step finished): a new run starts
    moved = msgspec.structs.replace(cp, rounds=_cp(2).rounds)
    again = failed_again(moved, DOWN, now=1100.0)
    assert again.failing_since == 1100.0 and not given_up(again, 52, 1100.0, s)
    assert given_up(again, 1000, 1100.0, s)  # the delivery backstop still holds
    assert len(failed_again(msgspec.structs.replace(cp, errors=[DOWN] * 80), DOWN, 1.0).errors) == 50


async def test_an_outage_longer_than_the_old_delivery_budget_does_not_dead_letter(nats_url, subject_prefix):
    """Failed before: five deliveries with backoff covered a fixed span (here ~0.5 s; 15 s in production), so
    every task reaching a longer outage was dead-lettered. Now it rides the outage out within the horizon."""
    settings = _settings(
        nats_url, subject_prefix, backoff_base_s=0.05, backoff_max_s=0.2, retry_horizon_s=60.0
    )
    # the production default for the delivery count (a backstop now), not the small one the other tests use
    settings = msgspec.structs.replace(
        settings, intake=msgspec.structs.replace(settings.intake, max_deliver=IntakeSettings().max_deliver)
    )
    t = PlannerOutage(down_s=2.0)
    _svc, broker = await _start(settings, t)
    names = Names.for_prefix(subject_prefix)
    try:
        async with ConductorClient(settings.common) as client:
            await client.submit(SolveRequest(question="Q?", task_id="outage-1"))
            res = await client.result("outage-1", wait=30)
        assert res.error is None and t.failed >= 5
        with pytest.raises(nats.js.errors.NotFoundError):
            await broker.connection.jetstream().get_last_msg(
                names.dead_stream, names.dead_subject(task_key(CLIENT, "outage-1"))
            )
    finally:
        await broker.stop()


async def test_failures_outlasting_the_horizon_dead_letter_with_a_final_error(nats_url, subject_prefix):
    settings = _settings(
        nats_url, subject_prefix, backoff_base_s=0.05, backoff_max_s=0.1, retry_horizon_s=0.5
    )
    t = PlannerOutage(down_s=3600.0)
    _svc, broker = await _start(settings, t)
    try:
        async with ConductorClient(settings.common) as client:
            await client.submit(SolveRequest(question="Q?", task_id="gone-1"))
            res = await client.result("gone-1", wait=30)
        assert res.error.code == ErrorCode.UNAVAILABLE and t.failed >= 2
    finally:
        await broker.stop()


async def test_max_wall_s_and_latency_count_from_the_first_delivery(nats_url, subject_prefix):
    """Failed before: a redelivered task started its wall-time budget afresh (a 30 s budget ran 165 s) and its
    ``latency_s`` left out the earlier deliveries."""
    settings = _settings(nats_url, subject_prefix, backoff_base_s=0.5, backoff_max_s=0.5)
    t = PlannerOutage(
        down_s=0.1, slow_s=0.8
    )  # the first delivery spends 0.8 s failing; redelivered after 0.5 s
    _svc, broker = await _start(settings, t)
    try:
        async with ConductorClient(settings.common) as client:
            await client.submit(SolveRequest(question="Q?", task_id="wall-1", budget=Budget(max_wall_s=1.0)))
            res = await client.result("wall-1", wait=30)
    finally:
        await broker.stop()
    assert res.error is not None and res.error.code == ErrorCode.BUDGET_EXCEEDED, res.error
    assert not t.work_requests  # the budget was spent before the first step: no worker call made
    assert res.latency_s >= 1.3  # 0.8 s failing + 0.5 s backoff at least, all counted


async def test_a_task_id_accepted_again_is_answered_from_the_stored_result_not_rerun(
    nats_url, subject_prefix
):
    """After a nats-server restart JetStream's duplicate window forgets ids it has seen, so an already-finished
    task id is accepted again (a fresh ``Nats-Msg-Id`` here stands for that). The stored result must answer it."""
    settings = _settings(nats_url, subject_prefix)
    t = ScriptedTransport([WF, WF])
    _svc, broker = await _start(settings, t)
    names = Names.for_prefix(subject_prefix)
    nc = await nats.connect(nats_url)
    try:
        async with ConductorClient(settings.common) as client:
            first = await client.result(
                await client.submit(SolveRequest(question="Q?", task_id="again-1")), wait=10
            )
            js = nc.jetstream()
            ack = await js.publish(
                names.submit(CLIENT),
                encode(SolveRequest(question="Q?", task_id="again-1")),
                headers={"Nats-Msg-Id": "again-1/after-restart"},
            )
            assert not ack.duplicate  # JetStream took it
            for _ in range(100):  # the work queue empties once the delivery is acked
                if (await js.stream_info(names.tasks_stream)).state.messages == 0:
                    break
                await asyncio.sleep(0.05)
            info = await js.stream_info(names.result_events_stream)
            again = await client.result("again-1", wait=1)
        assert (await js.stream_info(names.tasks_stream)).state.messages == 0
        assert len(t.plan_requests) == 1 and len(t.work_requests) == 3  # not re-run
        assert info.state.messages == 1 and again == first
    finally:
        await nc.close()
        await broker.stop()


def test_admission_is_what_the_pool_can_serve_unless_configured():
    """Failed before: every executor took up to 1,024 tasks whatever its pool could serve."""
    from conductor.pool import load_pool
    from services.executor.intake import admission

    pool = load_pool(None)
    served = sum(w.concurrency for w in pool.workers)
    assert admission(pool, IntakeSettings(), 1024) == min(served, 1024)
    assert admission(pool, IntakeSettings(), 10) == 10
    assert admission(pool, IntakeSettings(concurrency=3), 1024) == 3

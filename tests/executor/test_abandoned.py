"""An abandoned solve stops paying (issue 8, item 4): once the requester's deadline has passed, the executor
starts no further plan or worker call for it; a client's deadline travels with its solve request."""

from __future__ import annotations

import asyncio
import time

import nats
import pytest

from conductor.client import ConductorClient, SolveTimeoutError
from conductor.endpoints import EndpointServer
from conductor.liveness import reset_deadline, set_deadline
from conductor.pool import load_pool
from conductor.settings import CommonSettings
from schemas.errors import ErrorCode
from schemas.plan import Workflow
from schemas.solve import SolveRequest
from services.executor.app import ExecutorService
from services.executor.config import ExecutorSettings
from services.executor.core import Executor
from tests.executor.fakes import ScriptedTransport

WF = Workflow(model_id=[0, 1, 2], subtasks=["a", "b", "c"], access_list=[[], "all", "all"])


async def test_no_step_starts_after_the_requesters_deadline():
    """Failed before: every step ran (and was paid) whether or not anyone still waited for the result."""
    t = ScriptedTransport([WF], delay=0.3)
    ex = Executor(load_pool(None), ExecutorSettings(common=CommonSettings()), t)
    token = set_deadline(time.time() + 0.45)
    try:
        res = await ex.solve(SolveRequest(question="Q?"))
    finally:
        reset_deadline(token)
    assert [r.step for r in t.work_requests] == [0, 1]  # step 1 started before the deadline; step 2 never did
    assert res.error is not None and res.error.code == ErrorCode.TIMEOUT
    assert res.workflows[0].steps[2].error.code == ErrorCode.SKIPPED


@pytest.mark.nats
async def test_a_clients_solve_deadline_reaches_the_executor(nats_url, subject_prefix):
    t = ScriptedTransport([WF], delay=0.3)
    settings = ExecutorSettings(
        common=CommonSettings(nats_url=nats_url, subject_prefix=subject_prefix), durable=False
    )
    svc = ExecutorService(settings, transport=t)
    nc = await nats.connect(nats_url)
    await svc.start(None)  # type: ignore[arg-type]  # not durable, transport given: start() needs no broker
    server = EndpointServer(nc, svc.endpoints, concurrency=4, drain_timeout_s=2)
    await server.start()
    try:
        async with ConductorClient(settings.common) as client:
            with pytest.raises(SolveTimeoutError):
                await client.solve(SolveRequest(question="Q?"), timeout=0.45)
        await asyncio.sleep(1.0)  # what the executor would still do for the departed client, it does now
    finally:
        await server.stop()
        await nc.close()
    assert [r.step for r in t.work_requests] == [0, 1]

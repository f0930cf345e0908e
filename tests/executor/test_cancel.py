"""A task's tenant cancels it (issue 19, items 3 and 4): no further plan or worker call starts, the call already
running finishes, and the result carries what ran (its usage) with the error ``cancelled``. Only the tenant's own
subject is believed; a cancel that comes before the task is remembered."""

from __future__ import annotations

import asyncio
import types

import nats
import pytest

from conductor.client import ConductorClient
from conductor.endpoints import EndpointServer
from conductor.pool import load_pool
from conductor.settings import CommonSettings
from conductor.wire import encode
from schemas.errors import ErrorCode
from schemas.plan import Workflow
from schemas.solve import CancelRequest, SolveRequest, cancel_subject
from services.executor import cancels as cancels_module
from services.executor.app import ExecutorService
from services.executor.cancels import Cancels, parse_subject
from services.executor.config import ExecutorSettings
from services.executor.core import Executor
from tests.executor.fakes import ScriptedTransport

WF = Workflow(model_id=[0, 1, 2], subtasks=["a", "b", "c"], access_list=[[], "all", "all"])
REQ = SolveRequest(question="Q?", task_id="t-1.x")


async def test_a_cancelled_task_starts_no_further_step_and_reports_what_ran():
    t = ScriptedTransport([WF], delay=0.3)
    ex = Executor(load_pool(None), ExecutorSettings(common=CommonSettings()), t)
    cancels = Cancels()
    with cancels.watch("gateway", REQ) as cancel:
        running = asyncio.create_task(ex.solve(REQ, cancel=cancel))
        await asyncio.sleep(0.45)  # step 1 is running
        assert cancels.cancel("gateway", "t-1.x", "the HTTP client hung up")
        res = await running
    assert [r.step for r in t.work_requests] == [0, 1]  # step 1 finished; step 2 never started
    assert res.error is not None and res.error.code == ErrorCode.CANCELLED and "hung up" in res.error.message
    assert [s.error is None for s in res.workflows[0].steps] == [True, True, False]
    assert (
        res.usage.total.cost_usd == pytest.approx(0.002)
        and sum(u.calls for u in res.usage.by_worker.values()) == 2
    )


async def test_a_cancel_before_the_task_starts_stops_it_before_its_first_call():
    t = ScriptedTransport([WF])
    ex = Executor(load_pool(None), ExecutorSettings(common=CommonSettings()), t)
    cancels = Cancels()
    assert not cancels.cancel("gateway", "t-1.x", "gone")  # nothing runs yet: remembered
    with cancels.watch("gateway", REQ) as cancel:
        res = await ex.solve(REQ, cancel=cancel)
    assert t.plan_requests == [] and t.work_requests == []
    assert res.error is not None and res.error.code == ErrorCode.CANCELLED and res.usage.total.calls == 0


def test_only_the_tasks_tenant_cancels_it_whatever_its_request_says():
    cancels = Cancels()
    with (
        cancels.watch("gateway", REQ) as cancel,
        cancels.watch("client", REQ) as same_id,
    ):  # two tenants, one id
        assert cancels.cancel("client", "t-1.x", "mine")
        assert cancel.reason is None and same_id.reason == "mine"
    claimed = SolveRequest(question="Q?", task_id="t-2", owner="client")  # schema 8's owner: ignored
    with cancels.watch("gateway", claimed) as cancel:
        assert not cancels.cancel("client", "t-2", "x")
        assert cancel.reason is None
    with cancels.watch(None, REQ) as nobodys:  # no tenant (a handler called outside a request): nobody can
        assert not cancels.cancel("gateway", "t-1.x", "x") and nobodys.reason is None


def test_one_tenants_flood_of_early_cancels_forgets_only_its_own(monkeypatch):
    """Failed before (issue 34): one memory for all tenants, so a flood evicted another tenant's early cancel."""
    monkeypatch.setattr(cancels_module, "REMEMBER_MAX", 3)
    cancels = Cancels()
    assert not cancels.cancel("acme", "a-1", "stop it")  # acme's task not started yet: remembered
    for i in range(10):
        cancels.cancel("beta", f"b-{i}", "flood")
    assert cancels.remembered("beta") == 3 and cancels.remembered("acme") == 1
    with cancels.watch("acme", SolveRequest(question="Q?", task_id="a-1")) as cancel:
        assert cancel.reason == "stop it"
    with cancels.watch("beta", SolveRequest(question="Q?", task_id="b-0")) as cancel:
        assert cancel.reason is None  # beta's oldest were forgotten
    assert cancels.remembered("acme") == 0


def test_the_subject_says_which_tenant_cancels_which_task():
    assert parse_subject("p.conductor.cancel.gateway.t-1.x", "p.") == ("gateway", "t-1.x")
    assert parse_subject("conductor.cancel.gateway", "") is None
    assert parse_subject("q.conductor.cancel.gateway.t", "p.") is None


@pytest.mark.nats
async def test_the_tenant_cancels_its_solve_on_the_bus(nats_url, subject_prefix):
    """Over NATS: a cancel on another tenant's subject is ignored; the solve's own tenant's (the client's, whose
    subject it was sent on) stops it, and its reply is the result with what ran."""
    t = ScriptedTransport([WF], delay=0.3)
    settings = ExecutorSettings(
        common=CommonSettings(nats_url=nats_url, subject_prefix=subject_prefix), durable=False
    )
    svc = ExecutorService(settings, transport=t)
    nc = await nats.connect(nats_url)
    await svc.start(types.SimpleNamespace(connection=nc))  # type: ignore[arg-type]  # start() only subscribes
    server = EndpointServer(nc, svc.endpoints, concurrency=4, drain_timeout_s=2)
    await server.start()
    try:
        async with ConductorClient(settings.common) as client:
            solving = asyncio.create_task(client.solve(REQ, timeout=10))
            await asyncio.sleep(0.45)
            for tenant in ("gateway", "client"):
                await nc.publish(
                    subject_prefix + cancel_subject(tenant, "t-1.x"),
                    encode(CancelRequest(task_id="t-1.x", reason=f"from {tenant}")),
                )
            res = await solving
    finally:
        await server.stop()
        await svc.stop()
        await nc.close()
    assert [r.step for r in t.work_requests] == [0, 1]
    assert (
        res.error is not None and res.error.code == ErrorCode.CANCELLED and "from client" in res.error.message
    )
